// The admission layer as a request sees it: authenticate (before the model is resolved, so a client
// without a key cannot probe which model names exist), then admit (budgets, concurrency, the
// gateway queue and its dispatcher), holding an AdmissionTicket to the request's end.
// admission_driver.h implements it; a generation holds one (generation.h). There is always one:
// without `tenants:` / `admission:` it is the *implicit gate*, which authenticates nobody, charges
// nothing and only queues requests while the pool is at its hard in-flight cap
// (max_in_flight_per_endpoint) with the default queue TTL and shedding rules.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/beast/http/fields.hpp>

#include "core/admission/outcome.h"
#include "core/config.h"
#include "core/openai/request.h"

namespace sluice {

struct Tenant;

// Held for the life of an admitted request (a rate-limit reservation, a queue slot); released when
// the request ends, whatever way it ends.
struct AdmissionTicket {
  virtual ~AdmissionTicket() = default;
  // The request was placed on an endpoint (its DispatchGuard is held); idempotent.
  virtual void on_dispatched() {}
  // n more output tokens were relayed to the client (called per relayed read, not per token).
  virtual void on_output(int64_t n) {}
  // Called once at the end with what the request really used (tokens -1 when unknown: the
  // ticket then charges what was delivered).
  virtual void settle(int64_t prompt_tokens, int64_t completion_tokens) {}
  // The tenant's name for the access log ("" = keep the default).
  virtual std::string_view tenant() const { return {}; }
  // Extra headers for every response to this request (x-ratelimit-*).
  virtual const HeaderList* response_headers() const { return nullptr; }
  // max_tokens to inject upstream (the request set no bound and a default applies).
  virtual std::optional<int64_t> inject_max_tokens() const { return std::nullopt; }
};

struct AuthOutcome {
  const Tenant* tenant = nullptr;  // null with the implicit gate (nobody is authenticated)
  std::optional<Denial> denial;    // set: refuse with 401
};

struct AdmitRequest {
  const RequestModel& request;
  const ModelRoute& route;
  const Tenant* tenant;  // from authenticate()
  const boost::beast::http::fields& headers;
  // Emitted when the client leaves (or the request's deadline passes): a queued request leaves
  // the queue at once. `client_gone` tells the two kinds of wake-up apart afterwards.
  boost::asio::cancellation_slot cancel;
  std::function<bool()> client_gone;
  // A priority the caller vouches for (the Endpoint Picker's objective header, from the trusted
  // proxy): used with or without tenants, in place of the x-sluice-priority header.
  std::optional<int> priority = std::nullopt;
};

struct AdmitResult {
  std::optional<Denial> denial;             // set: refuse with this answer
  std::unique_ptr<AdmissionTicket> ticket;  // set when admitted
  HeaderList headers;                       // extra headers for the refusal (x-ratelimit-*)
  bool client_left = false;                 // the client disconnected while queued
  Duration queued{0};                       // time spent in the gateway queue
  int priority = 0;                         // the effective priority (tenant's, or the request's header)
};

class AdmissionRuntime {
 public:
  virtual ~AdmissionRuntime() = default;
  // True when tenants are configured: keys are checked, budgets charged, the client's
  // Authorization is never forwarded, usage is requested from the engine to settle.
  virtual bool enforcing() const = 0;
  virtual AuthOutcome authenticate(const boost::beast::http::fields& headers) const = 0;
  // Decides at once when it can without waiting (the implicit gate with room and an empty
  // queue: no queue entry, no timer, no client watch); nullopt: call admit().
  virtual std::optional<AdmitResult> try_admit(const AdmitRequest& req) = 0;
  virtual boost::asio::awaitable<AdmitResult> admit(const AdmitRequest& req) = 0;
  // Room may have appeared without a request ending (an endpoint turned healthy, fresh signals):
  // run the dispatcher. Cheap when nothing is queued.
  virtual void poke() = 0;
  // Appends its exposition text (queue depth, outstanding reservations).
  virtual void render(std::string& out) = 0;
  // The `tenants:` + `admission:` sections it was built from (reused across reloads when equal).
  virtual const std::string& fingerprint() const = 0;
  // The configured tenant of that name (the Endpoint Picker's fairness id, when trusted); null
  // when none or without tenants.
  virtual const Tenant* find_tenant(std::string_view name) const { return nullptr; }
};

}  // namespace sluice
