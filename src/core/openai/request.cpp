// Request parsing with simdjson on-demand. One pass over the root object: known fields are read
// into the model, unknown ones are skipped (their JSON is still validated structurally). Nesting
// depth is checked up front by a byte scan so a hostile body cannot recurse deeply anywhere.
#include "core/openai/request.h"

#include "core/openai/json_scan.h"

#include "core/json_escape.h"

#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <fmt/format.h>

namespace sluice {
namespace od = simdjson::ondemand;
using namespace std::string_view_literals;  // key == "model"sv: the literal's length is known when compiled

std::string_view to_string(ApiKind k) {
  switch (k) {
    case ApiKind::chat: return "chat";
    case ApiKind::completion: return "completion";
    case ApiKind::embedding: return "embedding";
    case ApiKind::response: return "response";
    case ApiKind::tokenize: return "tokenize";
    case ApiKind::detokenize: return "detokenize";
    case ApiKind::rerank: return "rerank";
    case ApiKind::score: return "score";
  }
  return "unknown";
}

bool generates(ApiKind k) { return k == ApiKind::chat || k == ApiKind::completion || k == ApiKind::response; }
bool needs_pooling_pool(ApiKind k) { return k == ApiKind::embedding || k == ApiKind::rerank || k == ApiKind::score; }
bool any_pool_kind(ApiKind k) { return k == ApiKind::tokenize || k == ApiKind::detokenize; }
ApiKind pick_kind(ApiKind k) {
  if (k == ApiKind::response) return ApiKind::chat;
  return generates(k) ? k : ApiKind::embedding;
}

std::string truncate_echo(std::string_view s, size_t max) {
  if (s.size() <= max) return std::string(s);
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  std::string out(s.substr(0, cut));
  out += "...";
  return out;
}

int64_t estimate_tokens(std::string_view text) {
  return std::max<int64_t>(1, static_cast<int64_t>((text.size() + 3) / 4));
}

namespace {

ApiError bad(std::string message, std::string param = {}) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

// One scan over the body: the maximum nesting of [ and { outside strings (stopping early once over
// `limit`), and whether anything but whitespace follows the root value. Written by hand because
// simdjson's On Demand front end checks neither for parts it skips; a prompt's bytes are nearly all
// inside strings, which json_string_end (json_scan.h) crosses with memchr (code: 64 bytes at a time).
struct Structure {
  size_t max_depth = 0;
  bool trailing = false;
};
Structure scan_structure(std::string_view s, size_t limit) {
  Structure st;
  size_t depth = 0;
  bool closed = false;
  const char* p = s.data();
  const char* const end = s.data() + s.size();
  while (p < end) {
    const char c = *p;
    if (closed) {
      if (c != ' ' && c != '\n' && c != '\r' && c != '\t') {
        st.trailing = true;
        return st;
      }
      ++p;
      continue;
    }
    if (c == '"') {
      p = json_string_end(p + 1, end);
      if (p == nullptr) return st;  // unterminated: the parser reports it
      continue;
    }
    if (c == '[' || c == '{') {
      if (++depth > st.max_depth && (st.max_depth = depth) > limit) return st;
    } else if ((c == ']' || c == '}') && depth > 0) {
      if (--depth == 0) closed = true;
    }
    ++p;
  }
  return st;
}

std::string_view trim_right(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\r' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

// Text of a prompt-like value: a string, or an array of strings / token ids / token id arrays.
// Strings are appended verbatim; anything else contributes its raw JSON so equal inputs still
// hash equally. Returns the number of top-level inputs, or an error.
simdjson::error_code append_text_value(od::value v, std::string& out, size_t& count) {
  od::json_type t;
  if (auto err = v.type().get(t)) return err;
  if (t == od::json_type::string) {
    std::string_view s;
    if (auto err = v.get_string().get(s)) return err;
    out.append(s);
    count = 1;
    return simdjson::SUCCESS;
  }
  if (t != od::json_type::array) return simdjson::INCORRECT_TYPE;
  od::array arr;
  if (auto err = v.get_array().get(arr)) return err;
  count = 0;
  for (auto el : arr) {
    od::value item;
    if (auto err = el.get(item)) return err;
    od::json_type it;
    if (auto err = item.type().get(it)) return err;
    if (count > 0) out.push_back('\n');
    if (it == od::json_type::string) {
      std::string_view s;
      if (auto err = item.get_string().get(s)) return err;
      out.append(s);
    } else if (it == od::json_type::number) {
      out.append(trim_right(item.raw_json_token()));
    } else if (it == od::json_type::array) {  // a list of token-id lists
      od::array ids;
      if (auto err = item.get_array().get(ids)) return err;
      for (auto id : ids) {
        uint64_t n;
        if (auto err = id.get_uint64().get(n)) return err;
        out.append(std::to_string(n)).push_back(' ');
      }
    } else {
      return simdjson::INCORRECT_TYPE;
    }
    ++count;
  }
  return simdjson::SUCCESS;
}

// A string value's text to a sink, assigned (replace) or appended, through the parser's own buffer.
template <class Sink>
simdjson::error_code plain_string(od::value& v, Sink& sink, bool replace) {
  std::string_view s;
  if (auto err = v.get_string().get(s)) return err;
  replace ? sink.assign(s) : sink.append(s);
  return simdjson::SUCCESS;
}

// The sink that keeps a message as a ChatMessage.
struct MessageSink {
  ChatMessage& m;
  void role(std::string_view r) { m.role.assign(r); }
  void assign(std::string_view s) { m.content.assign(s); }
  void append(std::string_view s) { m.content.append(s); }
  bool has_role() const { return !m.role.empty(); }
  simdjson::error_code string(od::value& v, bool replace) { return plain_string(v, *this, replace); }
};

// The sink that renders a message straight into the chat template's output (render_chat's text,
// byte for byte), so a long message is copied once from the parser's string, not twice (into the
// message, then into the rendered prompt). The header needs the role: text that comes before the
// role (rare: clients write "role" first) is held until it is known.
struct RenderSink {
  std::string& out;
  od::parser& parser;  // the document's parser: strings are unescaped by it straight into `out`
  std::string role_name, held;
  size_t header_at = std::string::npos;  // where this message's header starts in out (npos: not yet)
  size_t text_at = 0;                    // where its text starts in out

  void role(std::string_view r) {
    if (header_at != std::string::npos) {  // a second "role" key: the last one wins, as in a ChatMessage
      held.assign(out, text_at);
      out.resize(header_at);
    }
    role_name.assign(r);
    header_at = out.size();
    append_chat_header(out, r);
    text_at = out.size();
    out += held;
    held.clear();
  }
  void assign(std::string_view s) {
    if (header_at == std::string::npos) held.assign(s);
    else out.resize(text_at), out.append(s);
  }
  void append(std::string_view s) {
    if (header_at == std::string::npos) held.append(s);
    else out.append(s);
  }
  bool has_role() const { return !role_name.empty(); }
  void finish() { out += kChatEndOfTurn; }
  // A string value's text, assigned (replace) or appended, unescaped by simdjson straight into the
  // rendered prompt once the role is known: get_string() unescapes into the parser's buffer, from
  // which the text was then copied into `out`. Same unescape, same validation (get_string is
  // get_raw_json_string + unescape); `out` is grown by the raw token's length (an upper bound) +
  // simdjson's padding, then cut to the unescaped length. A 220 KB message: 32.3 -> 29.7 us parsed
  // (sluice_microbench BM_ParseChatRenderProse/225280). Short strings (under 1 KB: most messages)
  // take the plain path, which costs less there.
  // Growing `out` with resize() zero-fills the bound first, which unescape then overwrites: memset was
  // 9% of the gateway's CPU on 220 KB prompts (perf, 150 connections). std::string's C++23
  // resize_and_overwrite grows it without the fill; this file is built as C++23 where the compiler
  // can (CMakeLists.txt), with resize() as the fallback.
  simdjson::error_code string(od::value& v, bool replace) {
    const size_t bound = v.raw_json_token().size();
    if (header_at == std::string::npos || bound < 1024) return plain_string(v, *this, replace);
    od::raw_json_string raw;
    if (auto err = v.get_raw_json_string().get(raw)) return err;
    if (replace) out.resize(text_at);
    const size_t at = out.size();
    simdjson::error_code err = simdjson::SUCCESS;
    const auto unescape = [&](char* data) {
      std::string_view s;
      auto* dst = reinterpret_cast<uint8_t*>(data + at);
      err = parser.unescape(raw, dst).get(s);
      return err ? at : at + s.size();
    };
#if defined(__cpp_lib_string_resize_and_overwrite)
    out.resize_and_overwrite(at + bound + simdjson::SIMDJSON_PADDING, [&](char* data, size_t) { return unescape(data); });
#else
    out.resize(at + bound + simdjson::SIMDJSON_PADDING);
    out.resize(unescape(out.data()));
#endif
    return err;
  }
};

// A message's fields, in key order: its role to sink.role(), its text (content, text parts, name,
// tool_call_id) to sink.assign() / sink.append(). Sinks: MessageSink (a ChatMessage) and
// RenderSink (straight into the rendered prompt).
template <class Sink>
simdjson::error_code read_message_into(od::object obj, Sink& m) {
  for (auto field : obj) {
    std::string_view key;
    if (auto err = field.unescaped_key().get(key)) return err;
    od::value v;
    if (auto err = field.value().get(v)) return err;
    if (key == "role"sv) {
      std::string_view s;
      if (auto err = v.get_string().get(s)) return err;
      m.role(s);
    } else if (key == "content"sv) {
      od::json_type t;
      if (auto err = v.type().get(t)) return err;
      if (t == od::json_type::null) continue;
      if (t == od::json_type::string) {
        if (auto err = m.string(v, true)) return err;
      } else if (t == od::json_type::array) {
        // Content parts: text parts are joined in order, other parts keep their JSON.
        od::array parts;
        if (auto err = v.get_array().get(parts)) return err;
        for (auto p : parts) {
          od::object part;
          if (auto err = p.get_object().get(part)) return err;
          // A text part contributes its text; other parts (images, audio) their fields' JSON,
          // so equal inputs still hash equally.
          for (auto pf : part) {
            std::string_view pk, raw;
            od::value pv;
            if (auto err = pf.unescaped_key().get(pk)) return err;
            if (auto err = pf.value().get(pv)) return err;
            if (pk == "text"sv) {
              if (auto err = m.string(pv, false)) return err;
            } else if (pk == "image_url"sv || pk == "input_audio"sv) {
              od::object media;
              if (auto err = pv.get_object().get(media)) return err;
              for (auto mf : media) {
                std::string_view mv;
                od::value mval;
                if (auto err = mf.value().get(mval)) return err;
                if (!mval.get_string().get(mv)) m.append(mv);
              }
            }
          }
        }
      } else {
        return simdjson::INCORRECT_TYPE;
      }
    } else if (key == "name"sv || key == "tool_call_id"sv) {
      std::string_view s;  // part of what the engine renders
      if (!v.get_string().get(s)) m.append(s);
    }
    // Other members (tool_calls...) are skipped by the iterator.
  }
  if (!m.has_role()) return simdjson::NO_SUCH_FIELD;
  return simdjson::SUCCESS;
}

simdjson::error_code read_message(od::object obj, ChatMessage& m) {
  MessageSink sink{m};
  return read_message_into(obj, sink);
}

simdjson::error_code consume_value(od::value v);

// One content part of a Responses API message ({"type":"input_text","text":...}, input_image,
// input_file, ...): its string fields other than `type` are appended (text verbatim), so equal
// inputs hash equally; other values are validated and skipped.
simdjson::error_code append_part(od::object part, std::string& out) {
  for (auto pf : part) {
    std::string_view pk;
    od::value pv;
    if (auto err = pf.unescaped_key().get(pk)) return err;
    if (auto err = pf.value().get(pv)) return err;
    od::json_type t;
    if (auto err = pv.type().get(t)) return err;
    if (t == od::json_type::string && pk != "type"sv) {
      std::string_view text;
      if (auto err = pv.get_string().get(text)) return err;
      out.append(text);
    } else if (auto err = consume_value(pv)) {
      return err;
    }
  }
  return simdjson::SUCCESS;
}

// One item of a Responses API `input` list: a message ({"role","content"}, `type` "message" or
// absent) or another item type (function_call, function_call_output, reasoning...), which is
// rendered under its type as the role with its string fields as content.
simdjson::error_code read_input_item(od::object obj, ChatMessage& m) {
  std::string type;
  for (auto field : obj) {
    std::string_view key;
    if (auto err = field.unescaped_key().get(key)) return err;
    od::value v;
    if (auto err = field.value().get(v)) return err;
    od::json_type t;
    if (auto err = v.type().get(t)) return err;
    if (key == "role"sv || key == "type"sv) {
      std::string_view s;
      if (auto err = v.get_string().get(s)) return err;
      (key == "role"sv ? m.role : type).assign(s);
    } else if (key == "content"sv && t == od::json_type::array) {
      od::array parts;
      if (auto err = v.get_array().get(parts)) return err;
      for (auto p : parts) {
        od::object part;
        if (auto err = p.get_object().get(part)) return err;
        if (auto err = append_part(part, m.content)) return err;
      }
    } else if (t == od::json_type::string && key != "id"sv && key != "status"sv) {
      std::string_view s;  // content, output, arguments, name, call_id: what the engine renders
      if (auto err = v.get_string().get(s)) return err;
      m.content.append(s);
    } else if (auto err = consume_value(v)) {
      return err;
    }
  }
  if (m.role.empty()) m.role = type;
  if (m.role.empty()) return simdjson::NO_SUCH_FIELD;
  return simdjson::SUCCESS;
}

// Consumes a value we do not use, validating it all the way down: the on-demand iterator would
// otherwise step over a malformed member (e.g. `"x": :::`) without looking at it (a fuzzer find).
simdjson::error_code consume_value(od::value v) {
  od::json_type t;
  if (auto err = v.type().get(t)) return err;
  switch (t) {
    case od::json_type::object: {
      od::object obj;
      if (auto err = v.get_object().get(obj)) return err;
      for (auto f : obj) {
        std::string_view k;
        od::value fv;
        if (auto err = f.unescaped_key().get(k)) return err;
        if (auto err = f.value().get(fv)) return err;
        if (auto err = consume_value(fv)) return err;
      }
      return simdjson::SUCCESS;
    }
    case od::json_type::array: {
      od::array arr;
      if (auto err = v.get_array().get(arr)) return err;
      for (auto el : arr) {
        od::value ev;
        if (auto err = el.get(ev)) return err;
        if (auto err = consume_value(ev)) return err;
      }
      return simdjson::SUCCESS;
    }
    case od::json_type::string: {
      std::string_view s;
      return v.get_string().get(s);
    }
    case od::json_type::number: {
      double d;
      return v.get_double().get(d);
    }
    case od::json_type::boolean: {
      bool b;
      return v.get_bool().get(b);
    }
    case od::json_type::null: {
      bool is_null = false;  // get() only: simdjson's implicit conversions throw
      if (auto err = v.is_null().get(is_null)) return err;
      return is_null ? simdjson::SUCCESS : simdjson::INCORRECT_TYPE;
    }
  }
  return simdjson::INCORRECT_TYPE;
}

std::optional<int64_t> max_of(std::optional<int64_t> a, int64_t b) {
  return a ? std::max(*a, b) : b;
}

}  // namespace

ParseResult parse_request(ApiKind kind, std::string_view body, const ParseLimits& limits, bool body_padded) {
  ParseResult result;
  if (body.empty()) {
    result.error = bad("Request body is empty; expected a JSON object.");
    return result;
  }
  thread_local od::parser parser;
  static_assert(kBodyPadding >= simdjson::SIMDJSON_PADDING);
  simdjson::padded_string_view padded;
  if (body_padded) {
    padded = simdjson::padded_string_view(body.data(), body.size(), body.size() + kBodyPadding);
  } else {
    thread_local simdjson::padded_string buffer;
    if (buffer.size() < body.size() || buffer.size() > (1u << 20) + body.size()) {
      buffer = simdjson::padded_string(body.size());
    }
    std::memcpy(buffer.data(), body.data(), body.size());
    // The padding simdjson reads past the body is zeroed, as the gateway's own body buffer's is: a
    // reused buffer's stale bytes there (an earlier body's closing braces) changed how a malformed
    // body was read (request_fuzz; tests/core/openai/request_test.cpp).
    std::memset(buffer.data() + body.size(), 0, simdjson::SIMDJSON_PADDING);
    padded = simdjson::padded_string_view(buffer.data(), body.size(), body.size() + simdjson::SIMDJSON_PADDING);
  }

  RequestModel req;
  req.kind = kind;
  bool have_model = false, have_messages = false, have_prompt = false;
  std::string instructions;                 // Responses API: rendered as a leading system message
  int64_t n_value = 1;                      // n
  std::optional<int64_t> best_of_value;     // best_of
  int pooled_fields = 0;                    // rerank: query + documents; score: text_1 + text_2

  // param: the field (a client-chosen key, echoed truncated only when there is an error to answer).
  auto fail = [&](std::string msg, std::string_view param = {}) {
    result.error = bad(std::move(msg), truncate_echo(param));
    return result;
  };

  // iterate() runs simdjson's stage 1 over the whole body, which validates its UTF-8 (every byte,
  // trailing ones too): no separate pass (validate_utf8 was ~7% of the gateway's CPU at 220 KB).
  od::document doc;
  const simdjson::error_code iterated = parser.iterate(padded).get(doc);
  if (iterated == simdjson::UTF8_ERROR) return fail("Request body is not valid UTF-8.");
  const Structure structure = scan_structure(body, limits.max_depth);
  if (structure.max_depth > limits.max_depth)
    return fail(fmt::format("JSON nesting is deeper than the limit of {}.", limits.max_depth));
  if (structure.trailing) return fail("We could not parse the JSON body of your request (trailing content after the object).");
  if (iterated) return fail("We could not parse the JSON body of your request.");
  od::object root;
  if (doc.get_object().get(root)) return fail("The request body must be a JSON object.");

  for (auto field : root) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return fail("We could not parse the JSON body of your request.");
    od::value v;
    if (field.value().get(v)) return fail("We could not parse the JSON body of your request.");
    const std::string_view param = key;

    if (key == "model"sv) {
      if (have_model) return fail("'model' is given more than once.", param);
      std::string_view raw = trim_right(v.raw_json_token()), s;
      if (v.get_string().get(s)) return fail("'model' must be a string.", param);
      if (s.size() > limits.max_model_bytes)
        return fail(fmt::format("'model' is longer than the limit of {} bytes.", limits.max_model_bytes), param);
      req.model.assign(s);
      req.model_value_offset = static_cast<size_t>(raw.data() - padded.data());
      req.model_value_length = raw.size();
      have_model = true;
    } else if (key == "stream"sv) {
      od::json_type t;
      if (v.type().get(t)) return fail("'stream' must be a boolean.", param);
      if (t == od::json_type::null) continue;
      if (v.get_bool().get(req.stream)) return fail("'stream' must be a boolean.", param);
    } else if (key == "stream_options"sv) {
      od::json_type t;
      if (v.type().get(t)) return fail("'stream_options' must be an object.", param);
      if (t == od::json_type::null) continue;
      od::object so;
      if (v.get_object().get(so)) return fail("'stream_options' must be an object.", param);
      req.has_stream_options = true;
      for (auto f : so) {
        std::string_view k;
        od::value sv;
        if (f.unescaped_key().get(k) || f.value().get(sv)) return fail("'stream_options' is malformed.", param);
        if (k == "include_usage"sv) {
          if (sv.get_bool().get(req.include_usage))
            return fail("'stream_options.include_usage' must be a boolean.", "stream_options.include_usage");
        } else if (consume_value(sv)) {
          return fail("'stream_options' is malformed.", param);
        }
      }
    } else if (key == "max_tokens"sv || key == "max_completion_tokens"sv || key == "max_output_tokens"sv) {
      od::json_type t;
      if (v.type().get(t)) return fail(fmt::format("'{}' must be an integer.", key), param);
      if (t == od::json_type::null) continue;
      int64_t n;
      if (v.get_int64().get(n)) return fail(fmt::format("'{}' must be an integer.", key), param);
      if (n < 0) return fail(fmt::format("'{}' must be at least 0, got {}.", key, n), param);
      req.max_output_tokens = max_of(req.max_output_tokens, n);
    } else if (key == "messages"sv && kind == ApiKind::chat) {
      od::array arr;
      if (v.get_array().get(arr)) return fail("'messages' must be an array of message objects.", param);
      req.messages.reserve(8);  // most chats; one allocation instead of a regrowth per message
      if (!limits.keep_message_text && req.rendered.empty()) {
        // The unescaped text is at most the body's size; the template adds ~48 bytes a message.
        req.rendered.reserve(body.size() + body.size() / 4 + 128);
        req.rendered = kChatBegin;
      }
      size_t i = 0;
      for (auto el : arr) {
        od::object mo;
        if (el.get_object().get(mo))
          return fail(fmt::format("'messages[{}]' must be an object.", i), fmt::format("messages[{}]", i));
        ChatMessage m;
        simdjson::error_code err;
        if (limits.keep_message_text) {
          err = read_message(mo, m);
        } else {
          RenderSink sink{req.rendered, parser, {}, {}};
          err = read_message_into(mo, sink);
          if (!err) {
            sink.finish();
            m.role = std::move(sink.role_name);
          }
        }
        if (err)
          return fail(err == simdjson::NO_SUCH_FIELD
                          ? fmt::format("'messages[{}].role' is required.", i)
                          : fmt::format("'messages[{}]' is malformed: role must be a string and content a string or an array of parts.", i),
                      fmt::format("messages[{}]", i));
        req.messages.push_back(std::move(m));
        if (++i > limits.max_messages) return fail("Too many messages.", param);
      }
      have_messages = true;
    } else if ((key == "prompt"sv && kind == ApiKind::completion) || (key == "input"sv && kind == ApiKind::embedding)) {
      size_t count = 0;
      if (append_text_value(v, req.prompt, count))
        return fail(fmt::format("'{}' must be a string, an array of strings, or an array of token ids.", key), param);
      req.num_inputs = count;
      have_prompt = true;
    } else if (key == "input"sv && kind == ApiKind::response) {
      od::json_type t;
      if (v.type().get(t)) return fail("'input' must be a string or an array of input items.", param);
      if (t == od::json_type::string) {
        std::string_view s;
        if (v.get_string().get(s)) return fail("'input' must be a string or an array of input items.", param);
        req.messages.push_back(ChatMessage{"user", std::string(s)});
      } else {
        od::array arr;
        if (v.get_array().get(arr)) return fail("'input' must be a string or an array of input items.", param);
        size_t i = 0;
        for (auto el : arr) {
          od::object io;
          if (el.get_object().get(io))
            return fail(fmt::format("'input[{}]' must be an object.", i), fmt::format("input[{}]", i));
          ChatMessage m;
          if (auto err = read_input_item(io, m))
            return fail(err == simdjson::NO_SUCH_FIELD
                            ? fmt::format("'input[{}]' needs a 'role' or a 'type'.", i)
                            : fmt::format("'input[{}]' is malformed: role and type must be strings, content a string or an array of content parts.", i),
                        fmt::format("input[{}]", i));
          req.messages.push_back(std::move(m));
          if (++i > limits.max_messages) return fail("Too many input items.", param);
        }
      }
      have_messages = true;
    } else if (key == "instructions"sv && kind == ApiKind::response) {
      od::json_type t;
      if (v.type().get(t)) return fail("'instructions' must be a string.", param);
      if (t == od::json_type::null) continue;
      std::string_view s;
      if (v.get_string().get(s)) return fail("'instructions' must be a string.", param);
      instructions.assign(s);
    } else if (key == "previous_response_id"sv && kind == ApiKind::response) {
      od::json_type t;
      if (v.type().get(t)) return fail("'previous_response_id' must be a string.", param);
      if (t == od::json_type::null) continue;
      std::string_view s;
      if (v.get_string().get(s)) return fail("'previous_response_id' must be a string.", param);
      if (s.size() > limits.max_model_bytes)
        return fail(fmt::format("'previous_response_id' is longer than the limit of {} bytes.", limits.max_model_bytes), param);
      req.previous_response_id.assign(s);
    } else if (key == "store"sv && kind == ApiKind::response) {
      od::json_type t;
      if (v.type().get(t)) return fail("'store' must be a boolean.", param);
      if (t == od::json_type::null) continue;
      if (v.get_bool().get(req.store)) return fail("'store' must be a boolean.", param);
    } else if ((key == "n"sv || key == "best_of"sv) && (kind == ApiKind::chat || kind == ApiKind::completion)) {
      od::json_type t;
      if (v.type().get(t)) return fail(fmt::format("'{}' must be an integer.", key), param);
      if (t == od::json_type::null) continue;
      int64_t n;
      if (v.get_int64().get(n)) return fail(fmt::format("'{}' must be an integer.", key), param);
      if (n < 1 || n > kMaxCompletionsPerRequest)
        return fail(fmt::format("'{}' must be between 1 and {}, got {}.", key, kMaxCompletionsPerRequest, n), param);
      if (key == "n"sv) n_value = n;
      else best_of_value = n;
    } else if ((key == "messages"sv && kind == ApiKind::tokenize) ||
               (kind == ApiKind::tokenize && key == "prompt"sv)) {
      if (key == "prompt"sv) {
        size_t count = 0;
        if (append_text_value(v, req.prompt, count)) return fail("'prompt' must be a string.", param);
      } else {
        od::array arr;
        if (v.get_array().get(arr)) return fail("'messages' must be an array of message objects.", param);
        size_t i = 0;
        for (auto el : arr) {
          od::object mo;
          ChatMessage m;
          if (el.get_object().get(mo) || read_message(mo, m))
            return fail(fmt::format("'messages[{}]' is malformed.", i), fmt::format("messages[{}]", i));
          req.messages.push_back(std::move(m));
          if (++i > limits.max_messages) return fail("Too many messages.", param);
        }
        have_messages = true;
      }
      have_prompt = true;
    } else if ((key == "tokens"sv && kind == ApiKind::detokenize) ||
               ((key == "query"sv || key == "documents"sv) && kind == ApiKind::rerank) ||
               ((key == "text_1"sv || key == "text_2"sv) && kind == ApiKind::score)) {
      size_t count = 0;
      if (!req.prompt.empty()) req.prompt.push_back('\n');
      if (append_text_value(v, req.prompt, count))
        return fail(fmt::format("'{}' must be a string, an array of strings, or an array of token ids.", key), param);
      if (key == "documents"sv || key == "text_2"sv) req.num_inputs = count;
      ++pooled_fields;
      have_prompt = true;
    } else if (key == "user"sv) {
      std::string_view s;
      if (v.get_string().get(s)) return fail("'user' must be a string.", param);
      req.user.assign(s);
    } else if (key == "priority"sv) {
      if (v.get_int64().get(req.priority.emplace())) return fail("'priority' must be an integer.", param);
    } else if (key == "cache_salt"sv) {
      std::string_view s;
      if (v.get_string().get(s)) return fail("'cache_salt' must be a string.", param);
      req.cache_salt.assign(s);
    } else if (consume_value(v)) {
      return fail(fmt::format("We could not parse the JSON body of your request (the value of '{}' is malformed).", truncate_echo(key)));
    }
  }

  if (!have_model || req.model.empty()) return fail("You must provide a model parameter.", "model");
  switch (kind) {
    case ApiKind::chat:
      if (!have_messages || req.messages.empty())
        return fail("'messages' is required and must contain at least one message.", "messages");
      if (limits.keep_message_text) req.rendered = render_chat(req.messages);
      else req.rendered += kChatTrailer;  // the messages were rendered as they were read
      break;
    case ApiKind::completion:
      if (!have_prompt) return fail("'prompt' is required.", "prompt");
      req.rendered = limits.keep_message_text ? req.prompt : std::move(req.prompt);
      break;
    case ApiKind::embedding:
      if (!have_prompt || req.num_inputs == 0) return fail("'input' is required and must not be empty.", "input");
      req.rendered = limits.keep_message_text ? req.prompt : std::move(req.prompt);
      break;
    case ApiKind::response:
      if (!have_messages || req.messages.empty())
        return fail("'input' is required and must not be empty.", "input");
      if (!instructions.empty()) req.messages.insert(req.messages.begin(), ChatMessage{"system", std::move(instructions)});
      req.rendered = render_chat(req.messages);
      break;
    case ApiKind::tokenize:
      if (!have_prompt) return fail("'prompt' or 'messages' is required.", "prompt");
      req.rendered = have_messages ? render_chat(req.messages) : req.prompt;
      break;
    case ApiKind::detokenize:
      if (!have_prompt) return fail("'tokens' is required.", "tokens");
      req.rendered = req.prompt;
      break;
    case ApiKind::rerank:
    case ApiKind::score:
      if (pooled_fields < 2) {
        const bool rerank = kind == ApiKind::rerank;
        return fail(rerank ? "'query' and 'documents' are required." : "'text_1' and 'text_2' are required.",
                    rerank ? "documents" : "text_2");
      }
      req.rendered = req.prompt;
      break;
  }
  if (best_of_value && *best_of_value < n_value) return fail("'best_of' must be at least 'n'.", "best_of");
  req.completions = std::max(n_value, best_of_value.value_or(1));
  req.n = n_value;
  result.request = std::move(req);
  return result;
}


std::string rewrite_body(std::string_view body, const RequestModel& req, const BodyRewrite& rw) {
  const bool inject_max = rw.inject_max_tokens && !req.max_output_tokens;
  const bool inject_usage = rw.inject_include_usage && !req.include_usage;
  if (!rw.model && !inject_max && !inject_usage) return std::string(body);

  std::string out;
  out.reserve(body.size() + 96);
  std::string_view head = body.substr(0, req.model_value_offset);
  std::string_view tail = body.substr(req.model_value_offset + req.model_value_length);
  out.append(head);
  if (rw.model) append_json_string(out, *rw.model);
  else out.append(body.substr(req.model_value_offset, req.model_value_length));
  // Extra members are inserted right after the model member; the model is always a member of the
  // root object, so this keeps the JSON valid without re-serialising the body.
  if (inject_max)
    out += fmt::format(",\"{}\":{}", req.kind == ApiKind::response ? "max_output_tokens" : "max_tokens", *rw.inject_max_tokens);
  if (inject_usage) {
    if (req.has_stream_options) {
      // Replace by a later duplicate key: JSON parsers (Python's, simdjson's) take the last one.
      out.append(tail);
      // Insert before the final closing brace.
      size_t close = out.find_last_of('}');
      out.insert(close, ",\"stream_options\":{\"include_usage\":true}");
      return out;
    }
    out += ",\"stream_options\":{\"include_usage\":true}";
  }
  out.append(tail);
  return out;
}

std::string error_json(const ApiError& e) {
  std::string out = "{\"error\":{\"message\":";
  append_json_string(out, e.message);
  out += ",\"type\":";
  append_json_string(out, e.type);
  out += ",\"param\":";
  if (e.param.empty()) out += "null";
  else append_json_string(out, e.param);
  out += ",\"code\":";
  if (e.code.empty()) out += "null";
  else append_json_string(out, e.code);
  out += "}}";
  return out;
}

}  // namespace sluice
