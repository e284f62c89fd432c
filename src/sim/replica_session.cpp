// HTTP side of a simulated replica: one coroutine per connection, routing, and the life of one
// inference request (see replica.h).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <simdjson.h>

#include <cstdio>
#include <cstdlib>
#include <optional>

#include "core/openai/request.h"
#include "sim/openai_format.h"
#include "sim/replica_internal.h"

namespace sluice::sim {

namespace {

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);
using tcp = asio::ip::tcp;

asio::awaitable<bool> write_response(tcp::socket& sock, http::status status, std::string body, bool keep_alive,
                                     std::string_view content_type = "application/json") {
  http::response<http::string_body> res{status, 11};
  res.set(http::field::server, "uvicorn");
  res.set(http::field::content_type, content_type);
  res.keep_alive(keep_alive);
  res.body() = std::move(body);
  res.prepare_payload();
  auto [ec, n] = co_await http::async_write(sock, res, tuple_awaitable);
  co_return !ec && keep_alive;
}

asio::awaitable<bool> write_error(tcp::socket& sock, int status, std::string_view message, bool keep_alive) {
  co_return co_await write_response(sock, static_cast<http::status>(status),
                                    error_body(message, error_type_for(status), status), keep_alive);
}

// One HTTP/1.1 chunk.
void append_chunk(std::string& out, std::string_view data) {
  if (data.empty()) return;
  out += fmt::format("{:x}\r\n", data.size());
  out += data;
  out += "\r\n";
}

std::string context_length_message(int64_t max_len, int64_t prompt, int64_t out) {
  return fmt::format(
      "This model's maximum context length is {} tokens. However, you requested {} tokens ({} in the messages, {} "
      "in the completion). Please reduce the length of the messages or completion.",
      max_len, prompt + out, prompt, out);
}

std::string random_hex(std::mt19937_64& rng) { return fmt::format("{:016x}{:016x}", rng(), rng()); }

constexpr size_t kMaxStoredResponses = 10000;  // per replica (vLLM keeps them until restart)

// The prompts of a completions body (already checked by parse_request), each as text or as the
// token ids the client gave: a string, a list of strings, a list of ids, or a list of id lists.
struct RenderPrompt {
  std::string text;
  std::vector<engine::TokenId> ids;
  bool given_ids = false;
};
std::optional<std::vector<RenderPrompt>> completion_prompts(std::string_view body) {
  simdjson::dom::parser parser;
  simdjson::dom::element prompt;
  if (parser.parse(body.data(), body.size())["prompt"].get(prompt)) return std::nullopt;
  std::vector<RenderPrompt> out;
  const auto ids_of = [](simdjson::dom::array a, RenderPrompt& p) {
    p.given_ids = true;
    for (auto el : a) {
      uint64_t id = 0;
      if (el.get_uint64().get(id) || id > UINT32_MAX) return false;
      p.ids.push_back(static_cast<engine::TokenId>(id));
    }
    return true;
  };
  if (std::string_view s; !prompt.get_string().get(s)) {
    out.push_back({std::string(s), {}, false});
    return out;
  }
  simdjson::dom::array arr;
  simdjson::dom::element first;
  if (prompt.get_array().get(arr) || arr.at(0).get(first)) return std::nullopt;
  if (first.is_int64() || first.is_uint64()) {  // one prompt given as ids
    RenderPrompt p;
    if (!ids_of(arr, p)) return std::nullopt;
    out.push_back(std::move(p));
    return out;
  }
  for (auto el : arr) {
    RenderPrompt p;
    std::string_view s;
    simdjson::dom::array inner;
    if (!el.get_string().get(s)) p.text.assign(s);
    else if (el.get_array().get(inner) || !ids_of(inner, p)) return std::nullopt;
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

void Replica::watch_disconnect(Connection& c, std::shared_ptr<Stream> st) {
  c.sock.async_wait(tcp::socket::wait_read, [&c, st](boost::system::error_code ec) {
    if (st->done || ec) return;  // response over, or the wait was cancelled with the socket
    boost::system::error_code ec2;
    const size_t avail = c.sock.available(ec2);
    if (ec2 || avail == 0) {  // readable with nothing to read: the peer closed
      st->client_gone = true;
      st->notify();
    }
  });
}

asio::awaitable<bool> Replica::wait_until_client_gone(Connection& c, std::shared_ptr<Stream> st) {
  watch_disconnect(c, st);
  while (!st->client_gone && !stopped_) {
    co_await st->wake.async_wait(tuple_awaitable);
    st->rearm();
  }
  st->done = true;
  co_return false;
}

asio::awaitable<void> Replica::session(tcp::socket sock) {
  Connection c(std::move(sock));
  connections_.insert(&c);
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(64u << 20);
    auto [ec, n] = co_await http::async_read(c.sock, c.buf, parser, tuple_awaitable);
    if (ec) {
      if (ec == http::error::body_limit)
        co_await write_error(c.sock, 413, "request body too large", false);
      break;
    }
    if (stopped_) break;
    auto& req = parser.get();
    bool keep_alive = req.keep_alive();
    std::string_view target = req.target();
    const std::string_view path = target.substr(0, target.find('?'));
    const bool get = req.method() == http::verb::get, post = req.method() == http::verb::post;

    if (path == "/admin/faults") {
      if (post) {
        if (auto err = faults_.apply_json(req.body())) {
          keep_alive = co_await write_error(c.sock, 400, *err, keep_alive);
        } else {
          if (faults_.metrics != MetricsFault::freeze) frozen_metrics_.clear();
          else if (frozen_metrics_.empty()) frozen_metrics_ = metrics_text();
          const ExitFault exit = faults_.exit;
          keep_alive = co_await write_response(c.sock, http::status::ok, faults_.to_json(), keep_alive && exit == ExitFault::none);
          if (exit == ExitFault::replica) {
            spdlog::warn("replica {}: exit fault (replica)", cfg_.index);
            stop();
          } else if (exit == ExitFault::process) {
            spdlog::warn("replica {}: exit fault (process)", cfg_.index);
            std::fflush(nullptr);
            std::_Exit(3);
          }
        }
      } else {
        keep_alive = co_await write_response(c.sock, http::status::ok, faults_.to_json(), keep_alive);
      }
    } else if (faults_.hang) {
      keep_alive = co_await wait_until_client_gone(c, std::make_shared<Stream>(c.sock.get_executor()));
    } else if (path == "/health" && get) {
      keep_alive = co_await write_response(c.sock, http::status::ok, "", keep_alive);
    } else if (path == "/metrics" && get) {
      if (faults_.metrics == MetricsFault::fail) {
        keep_alive = co_await write_response(c.sock, http::status::internal_server_error, "metrics unavailable\n",
                                             keep_alive, "text/plain");
      } else {
        if (faults_.metrics == MetricsFault::slow) {
          asio::steady_timer t(io_);
          t.expires_after(std::chrono::microseconds(static_cast<int64_t>(faults_.metrics_delay_ms * 1000)));
          co_await t.async_wait(tuple_awaitable);
        }
        std::string text = faults_.metrics == MetricsFault::freeze && !frozen_metrics_.empty() ? frozen_metrics_
                                                                                                : metrics_text();
        keep_alive = co_await write_response(c.sock, http::status::ok, std::move(text), keep_alive,
                                             "text/plain; version=0.0.4; charset=utf-8");
      }
    } else if (path == "/v1/models" && get) {
      keep_alive = co_await write_response(
          c.sock, http::status::ok, models_response(cfg_.model_name, cfg_.engine.max_model_len, adapters_, created_unix_),
          keep_alive);
    } else if (post && (path == "/tokenize" || path == "/detokenize" || path == "/v1/rerank" || path == "/rerank" ||
                        path == "/v2/rerank" || path == "/v1/score" || path == "/score")) {
      const ApiKind kind = path == "/tokenize"     ? ApiKind::tokenize
                           : path == "/detokenize" ? ApiKind::detokenize
                           : path.ends_with("rerank") ? ApiKind::rerank
                                                      : ApiKind::score;
      auto [status, out] = handle_extra(static_cast<int>(kind), req.body());
      keep_alive = co_await write_response(c.sock, static_cast<http::status>(status), std::move(out), keep_alive);
    } else if (post && (path == "/v1/chat/completions/render" || path == "/v1/completions/render")) {
      keep_alive = co_await handle_render(c, path == "/v1/chat/completions/render", req.body(), keep_alive);
    } else if (post && (path == "/v1/chat/completions" || path == "/v1/completions" || path == "/v1/embeddings" ||
                        path == "/v1/responses")) {
      const ApiKind kind = path == "/v1/chat/completions" ? ApiKind::chat
                           : path == "/v1/completions"    ? ApiKind::completion
                           : path == "/v1/responses"      ? ApiKind::response
                                                          : ApiKind::embedding;
      keep_alive = co_await handle_generate(c, static_cast<int>(kind), req.body(), keep_alive);
    } else if (post && path == "/reset_prefix_cache") {  // vLLM's: forget every cached block
      engine_.reset_prefix_cache();
      publish_kv_events();
      keep_alive = co_await write_response(c.sock, http::status::ok, "", keep_alive, "text/plain");
    } else if (post && (path == "/v1/load_lora_adapter" || path == "/v1/unload_lora_adapter")) {
      auto [status, body] = handle_lora(path == "/v1/load_lora_adapter", req.body());
      keep_alive = co_await write_response(c.sock, static_cast<http::status>(status), std::move(body), keep_alive,
                                           status == 200 ? "text/plain; charset=utf-8" : "application/json");
    } else if (path == "/health" || path == "/metrics" || path == "/v1/models" || path.starts_with("/v1/")) {
      keep_alive = co_await write_response(c.sock, http::status::method_not_allowed,
                                           R"({"detail":"Method Not Allowed"})", keep_alive);
    } else {
      keep_alive = co_await write_response(c.sock, http::status::not_found, R"({"detail":"Not Found"})", keep_alive);
    }
    if (!keep_alive || stopped_) break;
  }
  connections_.erase(&c);
  boost::system::error_code ec;
  c.sock.shutdown(tcp::socket::shutdown_both, ec);
  c.sock.close(ec);
}

asio::awaitable<bool> Replica::handle_generate(Connection& c, int kind_int, const std::string& body, bool keep_alive) {
  const auto kind = static_cast<ApiKind>(kind_int);
  auto parsed = parse_request(kind, body);
  if (!parsed.ok()) co_return co_await write_error(c.sock, parsed.error.status, parsed.error.message, keep_alive);
  const RequestModel& rq = *parsed.request;

  std::string adapter;
  if (rq.model != cfg_.model_name) {
    if (std::find(adapters_.begin(), adapters_.end(), rq.model) == adapters_.end())
      co_return co_await write_error(c.sock, 404, fmt::format("The model `{}` does not exist.", rq.model), keep_alive);
    adapter = rq.model;
  }
  const bool embedding = kind == ApiKind::embedding;
  const bool responses = kind == ApiKind::response;

  // The Responses API continues a stored conversation: its text comes first, as vLLM prepends it.
  std::string conversation;
  if (responses && !rq.previous_response_id.empty()) {
    auto it = stored_responses_.find(rq.previous_response_id);
    if (it == stored_responses_.end())
      co_return co_await write_error(c.sock, 404, fmt::format("Response with id '{}' not found.", rq.previous_response_id),
                                     keep_alive);
    conversation = it->second;
  }
  conversation += rq.rendered.empty() ? std::string_view(rq.prompt) : std::string_view(rq.rendered);
  auto prompt = tokenize(conversation);
  const auto prompt_len = static_cast<int64_t>(prompt.size());
  const int64_t max_len = cfg_.engine.max_model_len;
  const bool streaming = rq.stream && !embedding;
  const int generated = embedding ? 1 : static_cast<int>(rq.completions);  // n or best_of
  const int returned = embedding ? 1 : static_cast<int>(rq.n);  // best_of generates more, returns the first n
  if (streaming && returned != generated)
    co_return co_await write_error(c.sock, 400, "best_of must equal n when streaming.", keep_alive);

  const FaultDecision fault = decide(faults_, rng_);
  if (fault.error_status == 400)
    co_return co_await write_error(c.sock, 400, context_length_message(max_len, prompt_len, max_len), keep_alive);
  if (fault.error_status) {
    const char* what = fault.error_status == 429   ? "Too many requests (injected fault)"
                       : fault.error_status == 503 ? "Service unavailable (injected fault)"
                                                   : "Internal server error (injected fault)";
    co_return co_await write_error(c.sock, fault.error_status, what, keep_alive);
  }

  engine::EngineRequest er;
  er.arrival = now();
  if (embedding) {
    if (prompt_len > max_len)
      co_return co_await write_error(
          c.sock, 400,
          fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens in the "
                      "input for embedding generation. Please reduce the length of the input.",
                      max_len, prompt_len),
          keep_alive);
    er.embedding = true;
  } else if (rq.max_output_tokens) {
    if (*rq.max_output_tokens < 1)
      co_return co_await write_error(c.sock, 400, "max_tokens must be at least 1", keep_alive);
    if (prompt_len + *rq.max_output_tokens > max_len)
      co_return co_await write_error(c.sock, 400, context_length_message(max_len, prompt_len, *rq.max_output_tokens),
                                     keep_alive);
    er.max_output_tokens = *rq.max_output_tokens;
    er.finish_reason = engine::FinishReason::length;
  } else {
    if (prompt_len >= max_len)
      co_return co_await write_error(c.sock, 400, context_length_message(max_len, prompt_len, 0), keep_alive);
    er.finish_reason = engine::FinishReason::stop;
  }
  er.prompt = std::move(prompt);
  er.priority = rq.priority.value_or(0);
  er.adapter = adapter;
  er.cache_salt = rq.cache_salt;

  auto st = std::make_shared<Stream>(c.sock.get_executor());
  st->first_id = next_id_;
  st->choices.resize(generated);
  for (int i = 0; i < generated; ++i) streams_.emplace(st->first_id + i, st);
  struct Guard {  // however this ends: the stream is gone and the watcher is released
    Replica* self;
    Connection& c;
    std::shared_ptr<Stream> st;
    ~Guard() {
      st->done = true;
      for (size_t i = 0; i < st->choices.size(); ++i) self->streams_.erase(st->first_id + i);
      boost::system::error_code ec;
      c.sock.cancel(ec);
    }
  } guard{this, c, st};
  next_id_ += generated;
  watch_disconnect(c, st);
  const auto abort_all = [&] {
    for (int i = 0; i < generated; ++i) engine_.abort(st->first_id + i, now());
  };

  // Front-end overhead (and an injected latency spike) before the request is queued.
  st->wake.expires_after(real(from_millis(cfg_.frontend_overhead_ms + fault.extra_delay_ms)));
  co_await st->wake.async_wait(tuple_awaitable);
  st->rearm();
  if (st->client_gone || stopped_) co_return false;

  for (int i = 0; i < generated; ++i) {  // n sequences of one prompt: the prefix cache shares it
    engine::EngineRequest one = er;
    one.id = st->first_id + i;
    if (!embedding && !rq.max_output_tokens)
      one.max_output_tokens = std::min(cfg_.output_len.sample(rng_), max_len - prompt_len);
    if (auto err = engine_.submit(std::move(one), now()); err != engine::SubmitError::none) {
      abort_all();
      co_return co_await write_error(c.sock, 400, std::string(engine::to_string(err)), keep_alive);
    }
  }
  wake_step_loop();

  ResponseIds ids;
  ids.id = (kind == ApiKind::chat ? "chatcmpl-" : responses ? "resp_" : embedding ? "embd-" : "cmpl-") + random_hex(rng_);
  ids.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  ids.model = rq.model;
  const bool chat = kind == ApiKind::chat;
  const std::string msg_id = responses ? "msg_" + random_hex(rng_) : std::string();
  const ResponseRequestFields fields{rq.messages.empty() || rq.messages.front().role != "system" ? std::string_view()
                                                                                                   : std::string_view(rq.messages.front().content),
                                     rq.max_output_tokens, rq.previous_response_id, rq.store};
  int64_t seq = 0;  // Responses API event sequence number
  bool roles_sent = false;  // streaming chat: the role chunks (with the first output)

  std::string out;  // streaming: bytes to write next
  if (streaming) {
    out = "HTTP/1.1 200 OK\r\nserver: uvicorn\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
          "transfer-encoding: chunked\r\n";
    out += keep_alive ? "\r\n" : "connection: close\r\n\r\n";
    // The chat role chunks go out with the first output, as vLLM's (and SGLang's) stream sends them on
    // the first iteration over the engine's outputs, i.e. after the prefill: the headers come at once,
    // the role and the first token together. Sent at once instead, a gateway would take the role
    // chunk for the first token (its TTFT, and the end of the request's prefill in its load).
    if (responses) {
      const std::string created = response_object(ids, "in_progress", msg_id, "", {}, fields);
      append_chunk(out, response_event("response.created", seq++, "\"response\":" + created));
      append_chunk(out, response_event("response.in_progress", seq++, "\"response\":" + created));
      append_chunk(out, response_event("response.output_item.added", seq++, output_item_members(msg_id, "in_progress", nullptr)));
      append_chunk(out, response_event("response.content_part.added", seq++, content_part_members(msg_id, "")));
    }
  }
  for (;;) {
    if (st->client_gone || stopped_) {
      abort_all();
      co_return false;
    }
    bool all_finished = true, any_output = !out.empty();
    for (int i = 0; i < generated; ++i) {
      auto& ch = st->choices[i];
      all_finished &= ch.finished.has_value();
      if (ch.pending.empty() && (!ch.finished || ch.finish_sent)) continue;
      any_output = true;
      if (streaming && chat && !roles_sent) {
        for (int r = 0; r < returned; ++r) append_chunk(out, chat_role_event(ids, r));
        roles_sent = true;
      }
      const std::string_view reason = ch.finished ? engine::to_string(*ch.finished) : std::string_view{};
      for (size_t k = 0; k < ch.pending.size(); ++k) {
        const auto word = token_text(ch.pending[k]);
        const bool last = ch.finished && k + 1 == ch.pending.size();
        if (!streaming || responses) ch.text += word;
        if (!streaming || i >= returned) continue;
        if (responses) append_chunk(out, response_event("response.output_text.delta", seq++, text_delta_members(msg_id, word, false)));
        else if (chat) append_chunk(out, chat_delta_event(ids, word, last ? reason : "", i));
        else append_chunk(out, completion_delta_event(ids, word, last ? reason : "", i));
      }
      if (streaming && !responses && i < returned && ch.finished && ch.pending.empty() && !ch.finish_sent)
        append_chunk(out, chat ? chat_delta_event(ids, "", reason, i) : completion_delta_event(ids, "", reason, i));
      if (ch.finished) ch.finish_sent = true;
      ch.pending.clear();
    }
    if (all_finished) break;
    if (streaming && any_output && !out.empty()) {
      auto [ec, n] = co_await asio::async_write(c.sock, asio::buffer(out), tuple_awaitable);
      out.clear();
      if (ec) st->client_gone = true;
      continue;  // tokens may have arrived while writing
    }
    co_await st->wake.async_wait(tuple_awaitable);
    st->rearm();
  }

  int64_t output_tokens = 0;
  for (const auto& ch : st->choices) output_tokens += ch.output_tokens;
  const Usage usage{st->prompt_tokens, output_tokens, st->cached_tokens};
  const auto& first = st->choices.front();
  if (responses && rq.store) {  // kept in this replica's memory for a follow-up
    if (stored_responses_.size() >= kMaxStoredResponses && !stored_order_.empty()) {
      stored_responses_.erase(stored_order_.front());
      stored_order_.pop_front();
    }
    stored_responses_[ids.id] = conversation + first.text + std::string(kChatEndOfTurn);
    stored_order_.push_back(ids.id);
  }
  const std::string_view status = first.finished == engine::FinishReason::length ? "incomplete" : "completed";
  if (!streaming) {
    std::vector<ChoiceText> choices;
    for (int i = 0; i < returned; ++i)
      choices.push_back({std::move(st->choices[i].text), engine::to_string(*st->choices[i].finished)});
    std::string body = embedding ? embedding_response(ids, rq.num_inputs, 16, st->first_id * 7919 + prompt_len, usage)
                       : responses ? response_object(ids, status, msg_id, choices.front().text, usage, fields)
                       : chat      ? chat_response(ids, choices, usage)
                                   : completion_response(ids, choices, usage);
    co_return co_await write_response(c.sock, http::status::ok, std::move(body), keep_alive);
  }
  if (responses) {
    append_chunk(out, response_event("response.output_text.done", seq++, text_delta_members(msg_id, first.text, true)));
    append_chunk(out, response_event("response.content_part.done", seq++, content_part_members(msg_id, first.text)));
    append_chunk(out, response_event("response.output_item.done", seq++, output_item_members(msg_id, "completed", &first.text)));
    append_chunk(out, response_event("response.completed", seq++,
                                     "\"response\":" + response_object(ids, status, msg_id, first.text, usage, fields)));
  } else {
    if (rq.include_usage) append_chunk(out, usage_event(ids, chat, usage));
    append_chunk(out, kDoneEvent);
  }
  out += "0\r\n\r\n";
  auto [ec, n] = co_await asio::async_write(c.sock, asio::buffer(out), tuple_awaitable);
  co_return !ec && keep_alive;
}

std::vector<engine::TokenId> Replica::tokenize(std::string_view text) const {
  auto ids = engine::tokenize(text);
  if (cfg_.foreign_tokenizer)
    for (auto& t : ids) t = (t + 1) % engine::kVocabSize;
  return ids;
}

// vLLM's render routes: the chat template and the tokenizer of generation (handle_generate), no
// engine step, so the ids are those the replica's KV events carry for the same body. Bad bodies
// get generation's 400s; an unknown model 404. Faults (faults.h, "render") answer 500, a 200 that
// is not JSON, or late.
asio::awaitable<bool> Replica::handle_render(Connection& c, bool chat, const std::string& body, bool keep_alive) {
  if (faults_.render == RenderFault::missing)  // a vLLM without the render routes
    co_return co_await write_response(c.sock, http::status::not_found, R"({"detail":"Not Found"})", keep_alive);
  const ApiKind kind = chat ? ApiKind::chat : ApiKind::completion;
  auto parsed = parse_request(kind, body);
  if (!parsed.ok()) co_return co_await write_error(c.sock, parsed.error.status, parsed.error.message, keep_alive);
  const RequestModel& rq = *parsed.request;
  if (rq.model != cfg_.model_name && std::find(adapters_.begin(), adapters_.end(), rq.model) == adapters_.end())
    co_return co_await write_error(c.sock, 404, fmt::format("The model `{}` does not exist.", rq.model), keep_alive);
  std::vector<RenderPrompt> prompts;
  if (chat) {
    prompts.push_back({rq.rendered, {}, false});
  } else if (auto p = completion_prompts(body)) {
    prompts = std::move(*p);
  } else {
    co_return co_await write_error(c.sock, 400, "'prompt' must be a string, an array of strings, or an array of token ids.",
                                   keep_alive);
  }
  switch (faults_.render) {
    case RenderFault::error:
      co_return co_await write_error(c.sock, 500, "Internal server error (injected render fault)", keep_alive);
    case RenderFault::garbage:
      co_return co_await write_response(c.sock, http::status::ok, "{\"token_ids\": [1, 2, oops", keep_alive);
    case RenderFault::slow: {
      asio::steady_timer t(io_);
      t.expires_after(std::chrono::microseconds(static_cast<int64_t>(faults_.render_delay_ms * 1000)));
      co_await t.async_wait(tuple_awaitable);
      break;
    }
    default: break;
  }
  std::string out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto& p = prompts[i];
    if (!p.given_ids) p.ids = tokenize(p.text);
    if (static_cast<int64_t>(p.ids.size()) > cfg_.engine.max_model_len)
      co_return co_await write_error(c.sock, 400, context_length_message(cfg_.engine.max_model_len,
                                                                        static_cast<int64_t>(p.ids.size()), 0), keep_alive);
    if (i) out += ',';
    out += render_object((chat ? "chatcmpl-" : "cmpl-") + random_hex(rng_) + (chat ? "" : fmt::format("-{}", i)), p.ids,
                         rq.model, rq.n, rq.max_output_tokens);
  }
  if (!chat) out = "[" + out + "]";
  co_return co_await write_response(c.sock, http::status::ok, std::move(out), keep_alive);
}

// vLLM's extra routes: answered by the front end at once (no engine step), as cheap as vLLM's.
// Relevance and score: a deterministic function of the text pair (hash-based), in [0, 1).
std::pair<int, std::string> Replica::handle_extra(int kind_int, const std::string& body) {
  const auto kind = static_cast<ApiKind>(kind_int);
  auto parsed = parse_request(kind, body);
  if (!parsed.ok()) return {parsed.error.status, error_body(parsed.error.message, error_type_for(parsed.error.status), parsed.error.status)};
  const RequestModel& rq = *parsed.request;
  if (rq.model != cfg_.model_name && std::find(adapters_.begin(), adapters_.end(), rq.model) == adapters_.end())
    return {404, error_body(fmt::format("The model `{}` does not exist.", rq.model), "NotFoundError", 404)};
  if ((kind == ApiKind::rerank || kind == ApiKind::score) && !cfg_.engine.embedding)
    return {400, error_body(fmt::format("The model does not support the {} API.", kind == ApiKind::rerank ? "Rerank" : "Score"),
                            "BadRequestError", 400)};
  ResponseIds ids;
  ids.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  ids.model = rq.model;
  switch (kind) {
    case ApiKind::tokenize:
      return {200, tokenize_response(tokenize(rq.rendered), cfg_.engine.max_model_len)};
    case ApiKind::detokenize: {
      std::string text;  // rendered holds the ids, space- or newline-separated
      for (size_t i = 0; i < rq.rendered.size();) {
        while (i < rq.rendered.size() && (rq.rendered[i] < '0' || rq.rendered[i] > '9')) ++i;
        if (i >= rq.rendered.size()) break;
        const uint64_t id = std::strtoull(rq.rendered.c_str() + i, nullptr, 10);
        while (i < rq.rendered.size() && rq.rendered[i] >= '0' && rq.rendered[i] <= '9') ++i;
        text += token_text(static_cast<engine::TokenId>(id));
      }
      return {200, detokenize_response(text)};
    }
    default: break;
  }
  // rerank / score: the documents (or text_2 values) are the rendered lines after the first.
  std::vector<std::string> lines;
  for (size_t at = 0; at <= rq.rendered.size();) {
    size_t nl = rq.rendered.find('\n', at);
    if (nl == std::string::npos) nl = rq.rendered.size();
    lines.emplace_back(rq.rendered.substr(at, nl - at));
    at = nl + 1;
  }
  const std::string query = lines.empty() ? std::string() : lines.front();
  std::vector<std::string> docs(lines.begin() + (lines.empty() ? 0 : 1), lines.end());
  std::vector<double> scores;
  for (const auto& d : docs) scores.push_back(double(std::hash<std::string>{}(query + "\x1f" + d) % 1000003) / 1000003.0);
  const int64_t tokens = engine::count_tokens(rq.rendered);
  if (kind == ApiKind::rerank) {
    ids.id = "rerank-" + random_hex(rng_);
    size_t top_n = 0;
    if (auto p = body.find("\"top_n\""); p != std::string::npos) {
      const auto colon = body.find(':', p);
      if (colon != std::string::npos) top_n = static_cast<size_t>(std::max(0, std::atoi(body.c_str() + colon + 1)));
    }
    return {200, rerank_response(ids, docs, scores, top_n, tokens)};
  }
  ids.id = "score-" + random_hex(rng_);
  return {200, score_response(ids, scores, tokens)};
}

}  // namespace sluice::sim
