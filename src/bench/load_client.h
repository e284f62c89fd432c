// The live load generator's client side: one io_context, one coroutine per request, a fresh
// loopback/TCP connection each, streaming the response and recording TTFT (first content chunk),
// E2E, output tokens (the usage chunk when present, else content chunks) and status.
// Open loop: requests start at their workload offsets whatever the server does (Poisson/gamma);
// closed loop (concurrency): N workers each send their next request when the last one ends.
// `time_scale` compresses the schedule for a simulator running faster than real time: offsets are
// divided by it and the recorded times multiplied by it, so figures read in engine time.
#pragma once
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "core/time.h"
#include "model/workload/stats.h"
#include "model/workload/workload.h"

namespace sluice::bench {

struct HttpTarget {
  std::string host;
  uint16_t port = 80;
  std::string path_prefix;  // prepended to /v1/...
};

// http://host[:port][/prefix] (core/url.h's parse_http_url, trailing slashes dropped from the
// prefix); an error message on failure (https is not supported).
std::variant<HttpTarget, std::string> http_target(const std::string& url);

struct LoadOptions {
  HttpTarget target;
  Duration timeout = std::chrono::seconds(600);   // per request, connect to last byte
  double time_scale = 1.0;
  bool tenant_as_api_key = false;   // Authorization: Bearer <tenant> (for gateways with tenants)
  std::string api_key;              // Authorization: Bearer <key> for every request
  std::string model;                // replaces the workload's base-model name when set
  // > 0: a line on stderr every this many seconds while the run lasts (requests finished, ok)
  double progress_every_s = 0;
};

struct LoadResult {
  std::vector<workload::RequestRecord> records;
  double wall_seconds = 0;
};

// Sends every request of `wl` and waits for all of them.
LoadResult run_load(workload::Workload& wl, const LoadOptions& opt);

// GET http://host:port/path (small bodies, e.g. /metrics); empty on failure, with `error` set.
// `api_key` non-empty: sent as `Authorization: Bearer <key>` (a gateway with tenants).
std::string http_get(const std::string& url, std::string& error, Duration timeout = std::chrono::seconds(5),
                     const std::string& api_key = {});

}  // namespace sluice::bench
