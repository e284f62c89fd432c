#include "model/workload/trace.h"

#include <fmt/format.h>
#include <fstream>
#include <simdjson.h>
#include <sstream>

#include "model/workload/generators.h"
#include "model/workload/text.h"

namespace sluice::workload {
namespace od = simdjson::ondemand;

namespace {

std::string parse_line(od::parser& parser, std::string_view line, TraceEntry& e) {
  simdjson::padded_string padded(line);
  od::document doc;
  if (parser.iterate(padded).get(doc)) return "not JSON";
  od::object obj;
  if (doc.get_object().get(obj)) return "not a JSON object";
  bool has_time = false;
  for (auto field : obj) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return "bad key";
    od::value v;
    if (field.value().get(v)) return fmt::format("bad value for '{}'", key);
    auto want_number = [&](double& out) -> bool { return !v.get_double().get(out); };
    auto want_int = [&](int64_t& out) -> bool { return !v.get_int64().get(out); };
    auto want_string = [&](std::string& out) -> bool {
      std::string_view s;
      if (v.get_string().get(s)) return false;
      out = std::string(s);
      return true;
    };
    if (key == "timestamp") {
      double ms = 0;
      if (!want_number(ms)) return "timestamp must be a number (ms)";
      e.arrival_s = ms / 1000.0, has_time = true;
    } else if (key == "arrival_s") {
      if (!want_number(e.arrival_s)) return "arrival_s must be a number";
      has_time = true;
    } else if (key == "input_length") {
      if (!want_int(e.input_length) || e.input_length < 0) return "input_length must be a non-negative integer";
    } else if (key == "output_length" || key == "max_tokens") {
      if (!want_int(e.output_length) || e.output_length < 0) return fmt::format("{} must be a non-negative integer", key);
    } else if (key == "hash_ids") {
      od::array arr;
      if (v.get_array().get(arr)) return "hash_ids must be an array";
      for (auto x : arr) {
        uint64_t id = 0;
        if (x.get_uint64().get(id)) return "hash_ids must hold non-negative integers";
        e.hash_ids.push_back(id);
      }
    } else if (key == "tenant") {
      if (!want_string(e.tenant)) return "tenant must be a string";
    } else if (key == "model") {
      if (!want_string(e.model)) return "model must be a string";
    } else if (key == "adapter") {
      if (!want_string(e.adapter)) return "adapter must be a string";
    } else if (key == "prompt") {
      if (!want_string(e.prompt)) return "prompt must be a string";
    } else if (key == "stream") {
      if (v.get_bool().get(e.stream)) return "stream must be a boolean";
    } else if (key == "messages") {
      od::array arr;
      if (v.get_array().get(arr)) return "messages must be an array";
      e.has_messages = true;
      for (auto x : arr) {
        od::object m;
        if (x.get_object().get(m)) return "each message must be an object";
        ChatMessage msg;
        for (auto mf : m) {
          std::string_view mk, mv;
          if (mf.unescaped_key().get(mk)) return "bad message key";
          if (mk != "role" && mk != "content") continue;
          if (mf.value().get_string().get(mv)) return fmt::format("message {} must be a string", mk);
          (mk == "role" ? msg.role : msg.content) = std::string(mv);
        }
        if (msg.role.empty()) return "a message has no role";
        e.messages.push_back(std::move(msg));
      }
    }
    // Other keys are ignored (traces carry extra fields).
  }
  if (!has_time) return "missing timestamp (ms) or arrival_s";
  if (e.hash_ids.empty() && !e.has_messages && e.prompt.empty() && e.input_length == 0)
    return "no content: give hash_ids/input_length, messages or prompt";
  if (e.has_messages && e.messages.empty()) return "messages is empty";
  return "";
}

class TraceContent final : public ContentGenerator {
 public:
  TraceContent(std::vector<TraceEntry> entries, double scale, int64_t block, std::string model, uint64_t seed)
      : entries_(std::move(entries)), scale_(scale), block_(block), model_(std::move(model)), seed_(seed) {
    if (!entries_.empty()) t0_ = entries_.front().arrival_s;
  }

  bool fill(WorkloadRequest& r, std::mt19937_64& rng) override {
    if (next_ >= entries_.size()) return false;
    const auto& e = entries_[next_++];
    r.arrival = from_seconds((e.arrival_s - t0_) * scale_);
    r.tenant = e.tenant.empty() ? "default" : e.tenant;
    r.adapter = e.adapter;
    r.model = !e.model.empty() ? e.model : (!e.adapter.empty() ? e.adapter : model_);
    r.max_tokens = e.output_length > 0 ? e.output_length : 128;
    r.stream = e.stream;
    if (e.has_messages) {
      r.kind = ApiKind::chat;
      r.messages = e.messages;
    } else if (!e.prompt.empty()) {
      r.kind = ApiKind::completion;
      r.prompt = e.prompt;
    } else {
      // Reconstructed from block ids: the shared blocks' text is fixed by their id.
      std::string text;
      const int64_t want = e.input_length > 0 ? e.input_length : int64_t(e.hash_ids.size()) * block_;
      text.reserve(size_t(want * kCharsPerToken));
      for (auto id : e.hash_ids) {
        if (int64_t(text.size()) >= want * kCharsPerToken) break;
        text += text_for_id(seed_, id, block_);
      }
      if (int64_t(text.size()) < want * kCharsPerToken)
        append_text(rng, want - int64_t(text.size()) / kCharsPerToken, text);
      text.resize(size_t(want * kCharsPerToken));
      r.kind = ApiKind::completion;
      r.prompt = std::move(text);
      r.group = e.hash_ids.empty() ? "" : fmt::format("h{}", e.hash_ids.front());
    }
    return true;
  }
  bool has_own_arrivals() const override { return true; }
  std::string describe() const override {
    return fmt::format("replay {} requests, time x{:g}", entries_.size(), scale_);
  }

 private:
  std::vector<TraceEntry> entries_;
  double scale_;
  int64_t block_;
  std::string model_;
  uint64_t seed_;
  double t0_ = 0;
  size_t next_ = 0;
};

}  // namespace

std::variant<std::vector<TraceEntry>, std::string> parse_trace(std::string_view jsonl) {
  std::vector<TraceEntry> out;
  od::parser parser;
  size_t line_no = 0;
  double last = -1e300;
  while (!jsonl.empty()) {
    ++line_no;
    const auto nl = jsonl.find('\n');
    auto line = jsonl.substr(0, nl);
    jsonl = nl == std::string_view::npos ? std::string_view{} : jsonl.substr(nl + 1);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (line.empty()) continue;
    TraceEntry e;
    if (auto err = parse_line(parser, line, e); !err.empty()) return fmt::format("line {}: {}", line_no, err);
    if (e.arrival_s < last) return fmt::format("line {}: arrival goes back in time", line_no);
    last = e.arrival_s;
    out.push_back(std::move(e));
  }
  if (out.empty()) return std::string("the trace has no requests");
  return out;
}

std::unique_ptr<ContentGenerator> make_trace_content(std::vector<TraceEntry> entries, double scale,
                                                     int64_t block_tokens, std::string default_model,
                                                     uint64_t seed) {
  return std::make_unique<TraceContent>(std::move(entries), scale, block_tokens, std::move(default_model), seed);
}

std::unique_ptr<ContentGenerator> make_replay(Params& p, uint64_t seed) {
  const auto file = p.text("file", "");
  const auto scale = p.real("scale", 1.0, 1e-6, 1e6);
  const auto block = p.integer("block", 512, 1, 1 << 20);
  const auto model = p.text("model", "llama");
  if (file.empty()) p.fail("file= is required");
  if (!p.ok()) return nullptr;
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    p.fail("cannot read " + file);
    return nullptr;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  auto parsed = parse_trace(ss.str());
  if (auto* err = std::get_if<std::string>(&parsed)) {
    p.fail(file + ": " + *err);
    return nullptr;
  }
  return make_trace_content(std::move(std::get<0>(parsed)), scale, block, model, seed);
}

}  // namespace sluice::workload
