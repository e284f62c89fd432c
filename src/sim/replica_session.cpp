// HTTP side of a simulated replica: one coroutine per connection, routing, and the life of one
// inference request (see replica.h).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>

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
    } else if (post && (path == "/v1/chat/completions" || path == "/v1/completions" || path == "/v1/embeddings")) {
      const ApiKind kind = path == "/v1/chat/completions" ? ApiKind::chat
                           : path == "/v1/completions"    ? ApiKind::completion
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

  const auto tokens_text = rq.rendered.empty() ? std::string_view(rq.prompt) : std::string_view(rq.rendered);
  auto prompt = engine::tokenize(tokens_text);
  const auto prompt_len = static_cast<int64_t>(prompt.size());
  const int64_t max_len = cfg_.engine.max_model_len;
  const bool embedding = kind == ApiKind::embedding;

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
  er.id = next_id_++;
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
    er.max_output_tokens = std::min(cfg_.output_len.sample(rng_), max_len - prompt_len);
    er.finish_reason = engine::FinishReason::stop;
  }
  er.prompt = std::move(prompt);
  er.priority = rq.priority.value_or(0);
  er.adapter = adapter;
  er.cache_salt = rq.cache_salt;
  const engine::RequestId id = er.id;

  auto st = std::make_shared<Stream>(c.sock.get_executor());
  streams_.emplace(id, st);
  struct Guard {  // however this ends: the stream is gone and the watcher is released
    Replica* self;
    Connection& c;
    std::shared_ptr<Stream> st;
    engine::RequestId id;
    ~Guard() {
      st->done = true;
      self->streams_.erase(id);
      boost::system::error_code ec;
      c.sock.cancel(ec);
    }
  } guard{this, c, st, id};
  watch_disconnect(c, st);

  // Front-end overhead (and an injected latency spike) before the request is queued.
  st->wake.expires_after(real(from_millis(cfg_.frontend_overhead_ms + fault.extra_delay_ms)));
  co_await st->wake.async_wait(tuple_awaitable);
  st->rearm();
  if (st->client_gone || stopped_) co_return false;

  if (auto err = engine_.submit(std::move(er), now()); err != engine::SubmitError::none)
    co_return co_await write_error(c.sock, 400, std::string(engine::to_string(err)), keep_alive);
  wake_step_loop();

  ResponseIds ids;
  ids.id = (kind == ApiKind::chat ? "chatcmpl-" : embedding ? "embd-" : "cmpl-") + random_hex(rng_);
  ids.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  ids.model = rq.model;
  const bool chat = kind == ApiKind::chat;
  const bool streaming = rq.stream && !embedding;

  std::string text;  // non-streaming: the whole output
  std::string out;   // streaming: bytes to write next
  if (streaming) {
    out = "HTTP/1.1 200 OK\r\nserver: uvicorn\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
          "transfer-encoding: chunked\r\n";
    out += keep_alive ? "\r\n" : "connection: close\r\n\r\n";
    if (chat) append_chunk(out, chat_role_event(ids));
  }
  for (;;) {
    if (st->client_gone || stopped_) {
      engine_.abort(id, now());
      co_return false;
    }
    const bool finished = st->finished.has_value();
    if (!st->pending.empty() || finished || !out.empty()) {
      const std::string_view reason = finished ? engine::to_string(*st->finished) : std::string_view{};
      for (size_t i = 0; i < st->pending.size(); ++i) {
        const auto word = token_text(st->pending[i]);
        const bool last = finished && i + 1 == st->pending.size();
        if (!streaming) text += word;
        else if (chat) append_chunk(out, chat_delta_event(ids, word, last ? reason : ""));
        else append_chunk(out, completion_delta_event(ids, word, last ? reason : ""));
      }
      if (streaming && finished && st->pending.empty())  // finished without a new token
        append_chunk(out, chat ? chat_delta_event(ids, "", reason) : completion_delta_event(ids, "", reason));
      st->pending.clear();
      if (finished) break;
      if (streaming) {
        auto [ec, n] = co_await asio::async_write(c.sock, asio::buffer(out), tuple_awaitable);
        out.clear();
        if (ec) st->client_gone = true;
        continue;  // tokens may have arrived while writing
      }
    }
    co_await st->wake.async_wait(tuple_awaitable);
    st->rearm();
  }

  const Usage usage{st->prompt_tokens, st->output_tokens, st->cached_tokens};
  if (!streaming) {
    std::string body = embedding ? embedding_response(ids, rq.num_inputs, 16, id * 7919 + prompt_len, usage)
                       : chat    ? chat_response(ids, text, engine::to_string(*st->finished), usage)
                                 : completion_response(ids, text, engine::to_string(*st->finished), usage);
    co_return co_await write_response(c.sock, http::status::ok, std::move(body), keep_alive);
  }
  if (rq.include_usage) append_chunk(out, usage_event(ids, chat, usage));
  append_chunk(out, kDoneEvent);
  out += "0\r\n\r\n";
  auto [ec, n] = co_await asio::async_write(c.sock, asio::buffer(out), tuple_awaitable);
  co_return !ec && keep_alive;
}

}  // namespace sluice::sim
