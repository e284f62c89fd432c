// The Endpoint Picker's gRPC listener: `envoy.service.ext_proc.v3.ExternalProcessor/Process`
// (Envoy ext_proc, FULL_DUPLEX_STREAMED request and response bodies, headers and trailers SEND)
// and the gRPC health service (liveness, readiness, the ext_proc service name), beside the
// gateway's HTTP listeners (`ext_proc: {listen: HOST:PORT}`). The only place that includes gRPC
// or protobuf headers: the per-request logic is gateway/extproc/epp_exchange.h.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include <boost/asio/any_io_executor.hpp>

#include "core/epp/epp_config.h"
#include "gateway/server.h"

namespace sluice {

class Gateway;

class ExtProcService final : public GatewayService {
 public:
  // Binds the listener (throws std::runtime_error when it cannot); decisions run on `workers`.
  ExtProcService(Gateway& gateway, const ExtProcConfig& config, std::vector<boost::asio::any_io_executor> workers);
  ~ExtProcService() override;
  uint16_t port() const;
  void start() override;
  void stop() override;

  struct Impl;  // the gRPC service and its streams (the .cpp)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
