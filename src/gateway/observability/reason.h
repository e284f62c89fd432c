// Why a request ended the way it did: the `reason` of the access log and the label of
// sluice_rejects_total. An enum, so every ending names one of a closed set (bounded label values,
// no typo'd strings); to_string gives the stable names that logs, metrics and docs use.
#pragma once
#include <cstdint>
#include <string_view>

#include "core/admission/outcome.h"

namespace sluice {

enum class Reason : uint8_t {
  none,  // served (ok), or an upstream status passed on without a gateway reason
  // the request itself
  bad_http, header_timeout, body_timeout, body_too_large, headers_too_large, bad_request, not_found,
  method_not_allowed, unknown_model, model_not_allowed, wrong_api, too_many_connections, buffer_full, bad_framing, bad_host,
  unsupported_transfer_coding,
  // admission (core/admission/outcome.h)
  unauthorized, rate_limit, too_large, queue_full, queue_timeout, shed, over_slo,
  // routing and the upstream exchange
  no_endpoint, connect_timeout, connect_error, first_byte_timeout, idle_timeout, total_timeout, upstream_io,
  upstream_status, response_too_large, internal,
  // the client left, or took no byte of its answer for timeouts.idle_ms (the gateway cut it)
  cancelled_queued, client_closed, client_write_timeout,
};

constexpr std::string_view to_string(Reason r) {
  switch (r) {
    case Reason::none: return "";
    case Reason::bad_http: return "bad_http";
    case Reason::header_timeout: return "header_timeout";
    case Reason::body_timeout: return "body_timeout";
    case Reason::body_too_large: return "body_too_large";
    case Reason::headers_too_large: return "headers_too_large";
    case Reason::bad_request: return "bad_request";
    case Reason::not_found: return "not_found";
    case Reason::method_not_allowed: return "method_not_allowed";
    case Reason::unknown_model: return "unknown_model";
    case Reason::model_not_allowed: return "model_not_allowed";  // the client sees model_not_found
    case Reason::wrong_api: return "wrong_api";
    case Reason::too_many_connections: return "too_many_connections";
    case Reason::buffer_full: return "body_budget";
    case Reason::bad_framing: return "bad_framing";
    case Reason::bad_host: return "bad_host";
    case Reason::unsupported_transfer_coding: return "unsupported_transfer_coding";
    case Reason::unauthorized: return "unauthorized";
    case Reason::rate_limit: return "rate_limit";
    case Reason::too_large: return "too_large";
    case Reason::queue_full: return "queue_full";
    case Reason::queue_timeout: return "queue_timeout";
    case Reason::shed: return "shed";
    case Reason::over_slo: return "over_slo";
    case Reason::no_endpoint: return "no_endpoint";
    case Reason::connect_timeout: return "connect_timeout";
    case Reason::connect_error: return "connect_error";
    case Reason::first_byte_timeout: return "first_byte_timeout";
    case Reason::idle_timeout: return "idle_timeout";
    case Reason::total_timeout: return "total_timeout";
    case Reason::upstream_io: return "upstream_io";
    case Reason::upstream_status: return "upstream_status";
    case Reason::response_too_large: return "response_too_large";
    case Reason::internal: return "internal";
    case Reason::cancelled_queued: return "cancelled_queued";
    case Reason::client_closed: return "client_closed";
    case Reason::client_write_timeout: return "client_write_timeout";
  }
  return "internal";
}

constexpr Reason reason_of(RejectReason r) {
  switch (r) {
    case RejectReason::rate_limit: return Reason::rate_limit;
    case RejectReason::too_large: return Reason::too_large;
    case RejectReason::queue_full: return Reason::queue_full;
    case RejectReason::queue_timeout: return Reason::queue_timeout;
    case RejectReason::shed: return Reason::shed;
    case RejectReason::over_slo: return Reason::over_slo;
    case RejectReason::unauthorized: return Reason::unauthorized;
  }
  return Reason::internal;
}

}  // namespace sluice
