// TLS for the gateway, on both sides, with OpenSSL through Boost.Asio's ssl::stream, as byte
// bridges beside the plain HTTP code (which stays one code path over tcp::socket):
//
//   downstream (`tls:`): the frontend accepts TLS on `listen`, completes the handshake and relays
//     the plaintext to the workers' listener, which then binds an ephemeral loopback port only.
//     The client's real address is handed to its Session through a table keyed by the relay
//     connection's loopback port (tls_client_of), so the access log names the client.
//   upstream (`https://host:port` endpoints): each distinct target (host, port, CA, verify, name)
//     gets a loopback listener; the endpoint's address in the running config becomes that
//     listener's (route_tls_upstreams), so requests, health checks and metric scrapes all pass
//     through it. Each accepted connection opens a TCP connection to the engine, handshakes (SNI,
//     peer verification against ca_file or the system store and the endpoint's name) and relays.
//     A failed handshake closes the relayed connection (the gateway sees a failed attempt: retry,
//     outlier and health accounting as for a refused connection) and logs why, e.g.
//     "upstream TLS to 10.0.0.5:8443: handshake failed: certificate verify failed", at most once
//     per 10 s per target.
//
// Why bridges: the per-connection code (session.cpp, upstream_exchange.cpp) would otherwise be
// templated on the stream type; the relay costs one extra loopback hop per TLS connection (kernel
// copies, no parsing; not benchmarked yet). Bridges run on their own
// threads (one io_context, one strand per connection). They live for the process (a reload reuses
// a target's bridge, so its address and the pool runtime that uses it stay the same).
#pragma once
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/ip/tcp.hpp>

#include "core/config.h"

namespace sluice {

// The endpoints written https:// now point at their loopback bridges (started on first use);
// the same pointer when there are none. Throws std::runtime_error on a bad CA file.
std::shared_ptr<const Config> route_tls_upstreams(std::shared_ptr<const Config> config);

// Starts the TLS frontend on `public_at`, relaying to `internal`; returns the bound port. Throws
// std::runtime_error naming the file on a bad certificate or key.
uint16_t start_tls_frontend(const TlsServerConfig& tls, const boost::asio::ip::tcp::endpoint& public_at,
                            const boost::asio::ip::tcp::endpoint& internal);
// Drain: the frontend stops accepting (connections already relayed go on).
void stop_tls_frontend_accepting();
// Stops every bridge and joins its threads (at exit).
void stop_tls_bridges();

// The real client address behind a relayed loopback connection from `loopback_port`, taken once.
std::optional<std::string> tls_client_of(uint16_t loopback_port);
bool tls_frontend_active();

}  // namespace sluice
