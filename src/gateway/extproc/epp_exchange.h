/*
 * One HTTP request seen through the Endpoint Picker (Envoy ext_proc, FULL_DUPLEX_STREAMED): the
 * gateway's side of one ext_proc stream, with no gRPC or protobuf in it (src/extproc/ converts).
 * It is the standalone proxy's request life (proxy.cpp) without the forwarding, over the same
 * parts: the request model (core/openai), the generation's routes and aliases, its admission
 * layer (authenticate, admit with the gateway queue, the ticket), its pool's PoolRouter (rank,
 * dispatch guard) and the one completion path (Gateway::complete) with an explicit outcome.
 *
 *   request headers  -> kept (pseudo-headers :path/:method, the rest as the request's fields)
 *   request body     -> buffered up to limits.max_body_bytes (more: immediate 413)
 *   end of body      -> decide() on a gateway worker: parse -> authenticate -> resolve (alias,
 *                       adapter, pool) -> admit (objective -> priority, fairness id -> tenant, the
 *                       queue) -> rank -> subset hint -> dispatch to the first -> the answer: the
 *                       destination list (header + metadata), the rewritten body and its
 *                       Content-Length, or an immediate response (401/404/400/413/429/503 with
 *                       x-llm-d-request-dropped-reason where the protocol names one)
 *   served endpoint  -> the dispatch guard moves there when the proxy used a fallback
 *   response headers -> status, SSE or not; Content-Length removed when an alias rewrite may
 *                       change the body
 *   response body    -> SSE events parsed as they pass (TTFT, ITL, tokens, usage; the model name
 *                       rewritten back for an alias; an injected usage chunk stripped) or the
 *                       whole body's usage at its end; each chunk returns the bytes to pass on
 *   end of response  -> finish(ok | upstream_error); the stream ending first -> client_cancelled
 * Every ending passes finish() exactly once; the guard and the ticket are released there.
 *
 * Threading: the stream calls these methods one at a time (from its poller thread); decide() runs its
 * coroutine on the given executor and calls `done` there; cancel() may come from any thread.
 */
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/any_io_executor.hpp>

#include "core/epp/epp_config.h"
#include "gateway/observability/access_log.h"

namespace sluice {

class Gateway;

using EppHeaders = std::vector<std::pair<std::string, std::string>>;

// What the stream sends back for the request side.
struct EppAnswer {
  bool immediate = false;
  bool stream_gone = false;  // the stream ended while deciding: send nothing
  // immediate: the local reply
  int status = 200;
  std::string body;
  EppHeaders reply_headers;
  std::string details;  // the reason's name (Envoy's RESPONSE_CODE_DETAILS)
  // routed: the destination list ("ip:port,ip:port"), request headers to set / remove, the new
  // body when it changed (else the original goes on unchanged)
  std::string destination;
  EppHeaders set_headers;
  std::vector<std::string> remove_headers;
  std::optional<std::string> body_replacement;
};

// What to do to the response headers.
struct EppResponseHeaders {
  EppHeaders set_headers;
  std::vector<std::string> remove_headers;
};

class EppExchange : public std::enable_shared_from_this<EppExchange> {
 public:
  EppExchange(Gateway& gw, const ExtProcConfig& cfg);
  ~EppExchange();
  EppExchange(const EppExchange&) = delete;
  EppExchange& operator=(const EppExchange&) = delete;

  // Request side.
  void set_request_headers(const EppHeaders& headers);
  // The proxy's subset hint (envoy.lb.subset_hint): pick only from these ip:port.
  void set_subset(std::vector<std::string> subset);
  // False: the body passed limits.max_body_bytes (answer_too_large() then gives the reply).
  bool append_request_body(std::string_view bytes);
  EppAnswer answer_too_large();
  const std::string& request_body() const;
  // A malformed or out-of-order message from the ext_proc client: the request ends (rejected
  // 400 before the decision, client_cancelled after it).
  void protocol_error();
  // The answer when it is known at once (a refusal before admission, or admitted without
  // waiting: no thread hop); else nullopt, and the decision goes on on `ex` (a gateway worker,
  // waiting in the admission queue) and calls `done` there.
  std::optional<EppAnswer> decide(boost::asio::any_io_executor ex, std::function<void(EppAnswer)> done);
  bool decided() const { return decided_; }

  // Response side.
  void on_served(std::string_view endpoint);
  EppResponseHeaders on_response_headers(const EppHeaders& headers, bool end_of_stream);
  // Appends to `out` the bytes to pass on for `chunk`.
  void on_response_body(std::string_view chunk, bool end_of_stream, std::string& out);
  void on_response_trailers();

  // The stream ended (the proxy's request is gone, or Envoy closed it): thread-safe.
  void cancel();
  // The stream ended cleanly or not before the response finished: ends the request as cancelled.
  void stream_ended();
  bool finished() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
  std::atomic<bool> decided_{false};
};

}  // namespace sluice
