#include "gateway/tls/tls_bridge.h"

#include "core/time.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace sluice {

namespace asio = boost::asio;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

// Accepts on `acceptor` until it closes; each connection gets a strand of its own and runs
// `serve(socket)` there (both bridges, client side and engine side).
template <class Serve>
asio::awaitable<void> accept_each(tcp::acceptor& acceptor, Serve serve) {
  while (acceptor.is_open()) {
    auto strand = asio::make_strand(acceptor.get_executor());
    tcp::socket s(strand);
    auto [ec] = co_await acceptor.async_accept(s, use_tuple);
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) break;
      continue;
    }
    asio::co_spawn(strand, serve(std::move(s)), asio::detached);
  }
}

constexpr size_t kRelayBuffer = 16u << 10;
constexpr int kThreads = 2;

std::string ssl_error_text(const boost::system::error_code& ec) {
  std::string s = ec.message();
  if (ec.category() == asio::error::get_ssl_category()) {
    char buf[256];
    ::ERR_error_string_n(static_cast<unsigned long>(ec.value()), buf, sizeof buf);
    s = buf;
  }
  return s;
}

// One relay: bytes read on one side are written to the other, both ways, until both have ended.
// Each side's end is passed on (a TCP shutdown of the send side, a TLS close_notify).
template <class Tls>
struct Relay : std::enable_shared_from_this<Relay<Tls>> {
  Relay(Tls tls_, tcp::socket plain_) : tls(std::move(tls_)), plain(std::move(plain_)) {}
  Tls tls;
  tcp::socket plain;
  int open_directions = 2;
  std::function<void()> on_done;

  asio::awaitable<void> tls_to_plain() {
    auto self = this->shared_from_this();
    std::array<char, kRelayBuffer> buf;
    for (;;) {
      auto [ec, n] = co_await tls.async_read_some(asio::buffer(buf), use_tuple);
      if (ec || n == 0) break;
      auto [wec, wn] = co_await asio::async_write(plain, asio::buffer(buf.data(), n), use_tuple);
      if (wec) break;
    }
    boost::system::error_code ignored;
    plain.shutdown(tcp::socket::shutdown_send, ignored);
    end();
  }

  asio::awaitable<void> plain_to_tls() {
    auto self = this->shared_from_this();
    std::array<char, kRelayBuffer> buf;
    for (;;) {
      auto [ec, n] = co_await plain.async_read_some(asio::buffer(buf), use_tuple);
      if (ec || n == 0) break;
      auto [wec, wn] = co_await asio::async_write(tls, asio::buffer(buf.data(), n), use_tuple);
      if (wec) break;
    }
    // close_notify, waiting at most a second for the peer's.
    asio::steady_timer t(plain.get_executor());
    t.expires_after(std::chrono::seconds(1));
    t.async_wait([self](boost::system::error_code ec) {
      if (!ec) self->close();
    });
    co_await tls.async_shutdown(use_tuple);
    t.cancel();
    end();
  }

  void end() {
    if (--open_directions == 0) close();
  }
  void close() {
    boost::system::error_code ignored;
    tls.lowest_layer().close(ignored);
    plain.close(ignored);
    if (on_done) {
      auto f = std::move(on_done);
      on_done = nullptr;
      f();
    }
  }
  void start() {
    auto self = this->shared_from_this();
    asio::co_spawn(plain.get_executor(), tls_to_plain(), asio::detached);
    asio::co_spawn(plain.get_executor(), plain_to_tls(), asio::detached);
  }
};

using TlsStream = ssl::stream<tcp::socket>;

// Closes the stream's socket when the timer fires, unless disarmed first. The handler holds only
// a shared cell, so a wait completed just as the coroutine moved on (and its frame ended) closes
// nothing.
class HandshakeDeadline {
 public:
  HandshakeDeadline(const asio::any_io_executor& ex, TlsStream& s, Duration after)
      : timer_(ex), target_(std::make_shared<TlsStream*>(&s)) {
    timer_.expires_after(after);
    timer_.async_wait([cell = target_](boost::system::error_code ec) {
      if (!ec && *cell) {
        boost::system::error_code ignored;
        (*cell)->lowest_layer().close(ignored);
      }
    });
  }
  ~HandshakeDeadline() { disarm(); }
  void disarm() {
    *target_ = nullptr;
    timer_.cancel();
  }

 private:
  asio::steady_timer timer_;
  std::shared_ptr<TlsStream*> target_;
};

struct UpstreamTarget {
  std::string host;
  uint16_t port = 0;
  TlsClientConfig tls;
  std::string key() const {
    return fmt::format("{}|{}|{}|{}|{}", host, port, tls.ca_file, tls.verify, tls.server_name);
  }
};

class Bridges {
 public:
  static Bridges& get() {
    static Bridges b;
    return b;
  }

  Address upstream(const EndpointConfig& ep) {
    UpstreamTarget t{ep.address.host, ep.address.port, ep.tls};
    std::lock_guard lock(mu_);
    auto it = upstreams_.find(t.key());
    if (it != upstreams_.end()) return it->second->local;
    auto u = std::make_unique<Upstream>(io_, t);
    const Address local = u->local;
    u->start();
    upstreams_.emplace(t.key(), std::move(u));
    ensure_threads();
    return local;
  }

  uint16_t frontend(const TlsServerConfig& cfg, const tcp::endpoint& at, const tcp::endpoint& internal) {
    std::lock_guard lock(mu_);
    frontend_ = std::make_unique<Frontend>(io_, cfg, at, internal, *this);
    const uint16_t port = frontend_->acceptor.local_endpoint().port();
    frontend_->start();
    active_ = true;
    ensure_threads();
    return port;
  }

  void stop_accepting() {
    std::lock_guard lock(mu_);
    if (frontend_) asio::post(io_, [f = frontend_.get()] {
      boost::system::error_code ignored;
      f->acceptor.close(ignored);
    });
  }

  void stop() {
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mu_);
      threads.swap(threads_);
    }
    if (threads.empty()) return;
    work_.reset();
    io_.stop();
    for (auto& t : threads) t.join();
  }

  void remember(uint16_t port, std::string client) {
    std::lock_guard lock(peers_mu_);
    peers_[port] = std::move(client);
  }
  void forget(uint16_t port) {
    std::lock_guard lock(peers_mu_);
    peers_.erase(port);
  }
  std::optional<std::string> take(uint16_t port) {
    std::lock_guard lock(peers_mu_);
    auto it = peers_.find(port);
    if (it == peers_.end()) return std::nullopt;
    auto s = std::move(it->second);
    peers_.erase(it);
    return s;
  }
  bool active() const { return active_.load(); }

 private:
  Bridges() : work_(asio::make_work_guard(io_)) {}
  ~Bridges() { stop(); }

  void ensure_threads() {
    if (!threads_.empty()) return;
    for (int i = 0; i < kThreads; ++i) threads_.emplace_back([this] { io_.run(); });
  }

  // ---- downstream: TLS in, plaintext to the workers' loopback listener ----
  struct Frontend {
    Frontend(asio::io_context& io, const TlsServerConfig& cfg, const tcp::endpoint& at, const tcp::endpoint& internal_,
             Bridges& owner_)
        : ctx(ssl::context::tls_server), acceptor(io), internal(internal_), owner(owner_) {
      ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                      ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
      boost::system::error_code ec;
      ctx.use_certificate_chain_file(cfg.cert_file, ec);
      if (ec) throw std::runtime_error("tls.cert_file: cannot use '" + cfg.cert_file + "': " + ssl_error_text(ec));
      ctx.use_private_key_file(cfg.key_file, ssl::context::pem, ec);
      if (ec) throw std::runtime_error("tls.key_file: cannot use '" + cfg.key_file + "': " + ssl_error_text(ec));
      if (::SSL_CTX_check_private_key(ctx.native_handle()) != 1)
        throw std::runtime_error("tls.key_file: '" + cfg.key_file + "' does not match the certificate in '" + cfg.cert_file + "'");
      acceptor.open(at.protocol());
      acceptor.set_option(asio::socket_base::reuse_address(true));
      acceptor.bind(at);
      acceptor.listen(asio::socket_base::max_listen_connections);
    }
    void start() {
      asio::co_spawn(acceptor.get_executor(),
                     accept_each(acceptor, [this](tcp::socket s) { return serve(std::move(s)); }), asio::detached);
    }

    asio::awaitable<void> serve(tcp::socket s) {
      boost::system::error_code ec;
      const auto peer = s.remote_endpoint(ec);
      const std::string client = ec ? std::string("-") : format_host_port(peer.address().to_string(), peer.port());
      s.set_option(tcp::no_delay(true), ec);
      TlsStream tls(std::move(s), ctx);
      // A client that never completes the handshake is dropped after 10 s.
      HandshakeDeadline deadline(tls.get_executor(), tls, std::chrono::seconds(10));
      auto [hec] = co_await tls.async_handshake(ssl::stream_base::server, use_tuple);
      deadline.disarm();
      if (hec) {
        spdlog::debug("TLS handshake from {} failed: {}", client, ssl_error_text(hec));
        co_return;
      }
      tcp::socket plain(tls.get_executor());
      plain.open(internal.protocol(), ec);
      if (!ec) plain.bind(tcp::endpoint(internal.address(), 0), ec);
      if (ec) co_return;
      const uint16_t local_port = plain.local_endpoint(ec).port();
      owner.remember(local_port, client);  // before connecting: the worker's Session reads it on accept
      auto [cec] = co_await plain.async_connect(internal, use_tuple);
      if (cec) {
        owner.forget(local_port);
        co_return;
      }
      plain.set_option(tcp::no_delay(true), ec);
      auto relay = std::make_shared<Relay<TlsStream>>(std::move(tls), std::move(plain));
      relay->on_done = [&o = owner, local_port] { o.forget(local_port); };
      relay->start();
    }

    ssl::context ctx;
    tcp::acceptor acceptor;
    tcp::endpoint internal;
    Bridges& owner;
  };

  // ---- upstream: plaintext from the gateway on loopback, TLS to the engine ----
  struct Upstream {
    Upstream(asio::io_context& io, UpstreamTarget t) : target(std::move(t)), ctx(ssl::context::tls_client), acceptor(io) {
      ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                      ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
      boost::system::error_code ec;
      if (!target.tls.ca_file.empty()) ctx.load_verify_file(target.tls.ca_file, ec);
      else ctx.set_default_verify_paths(ec);
      if (ec)
        throw std::runtime_error("upstream_tls.ca_file: cannot use '" + target.tls.ca_file + "': " + ssl_error_text(ec));
      ctx.set_verify_mode(target.tls.verify ? ssl::verify_peer : ssl::verify_none);
      name = target.tls.server_name.empty() ? target.host : target.tls.server_name;
      acceptor.open(tcp::v4());
      acceptor.bind(tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
      acceptor.listen(asio::socket_base::max_listen_connections);
      local = Address{"127.0.0.1", acceptor.local_endpoint().port()};
    }
    void start() {
      asio::co_spawn(acceptor.get_executor(),
                     accept_each(acceptor, [this](tcp::socket s) { return serve(std::move(s)); }), asio::detached);
    }

    asio::awaitable<void> serve(tcp::socket plain) {
      auto ex = plain.get_executor();
      tcp::resolver resolver(ex);
      auto [rec, results] = co_await resolver.async_resolve(target.host, std::to_string(target.port), use_tuple);
      if (rec) {
        complain(fmt::format("cannot resolve {}: {}", target.host, rec.message()));
        co_return;
      }
      TlsStream tls(tcp::socket(ex), ctx);
      // The gateway's own connect deadline closes `plain`; this one bounds the engine side.
      HandshakeDeadline deadline(ex, tls, std::chrono::seconds(10));
      auto [cec, ep] = co_await asio::async_connect(tls.lowest_layer(), results, use_tuple);
      if (cec) {
        co_return;  // a refused connection: the gateway sees its relay close, as with a plain endpoint
      }
      boost::system::error_code ec;
      tls.lowest_layer().set_option(tcp::no_delay(true), ec);
      plain.set_option(tcp::no_delay(true), ec);
      if (!::SSL_set_tlsext_host_name(tls.native_handle(), name.c_str())) {
        complain("cannot set the TLS server name '" + name + "'");
        co_return;
      }
      if (target.tls.verify) tls.set_verify_callback(ssl::host_name_verification(name));
      auto [hec] = co_await tls.async_handshake(ssl::stream_base::client, use_tuple);
      deadline.disarm();
      if (hec) {
        std::string why = ssl_error_text(hec);
        const long verify = ::SSL_get_verify_result(tls.native_handle());
        if (verify != X509_V_OK) why += std::string(" (") + ::X509_verify_cert_error_string(verify) + ")";
        complain("handshake failed: " + why);
        co_return;
      }
      auto relay = std::make_shared<Relay<TlsStream>>(std::move(tls), std::move(plain));
      relay->start();
    }

    // One warning per 10 s per target: a broken engine certificate is seen at once, not spammed.
    void complain(const std::string& what) {
      const auto now = std::chrono::steady_clock::now();
      std::lock_guard lock(complain_mu);
      if (now - last_complaint < std::chrono::seconds(10) && complained) return;
      complained = true;
      last_complaint = now;
      spdlog::warn("upstream TLS to {}: {}", format_host_port(target.host, target.port), what);
    }

    UpstreamTarget target;
    std::string name;
    ssl::context ctx;
    tcp::acceptor acceptor;
    Address local;
    std::mutex complain_mu;
    bool complained = false;
    std::chrono::steady_clock::time_point last_complaint{};
  };

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::mutex mu_;
  std::vector<std::thread> threads_;
  std::unique_ptr<Frontend> frontend_;
  std::map<std::string, std::unique_ptr<Upstream>> upstreams_;
  std::atomic<bool> active_{false};
  std::mutex peers_mu_;
  std::unordered_map<uint16_t, std::string> peers_;
};

}  // namespace

std::shared_ptr<const Config> route_tls_upstreams(std::shared_ptr<const Config> config) {
  bool any = false;
  for (const auto& p : config->pools)
    for (const auto& e : p.endpoints) any |= e.tls.enabled;
  if (!any) return config;
  auto copy = std::make_shared<Config>(*config);
  for (auto& p : copy->pools)
    for (auto& e : p.endpoints)
      if (e.tls.enabled) {  // e.name keeps the engine's address; Host names the engine too
        e.host_header = e.address.str();
        e.address = Bridges::get().upstream(e);
      }
  return copy;
}

uint16_t start_tls_frontend(const TlsServerConfig& tls, const tcp::endpoint& public_at, const tcp::endpoint& internal) {
  return Bridges::get().frontend(tls, public_at, internal);
}

void stop_tls_frontend_accepting() { Bridges::get().stop_accepting(); }
void stop_tls_bridges() { Bridges::get().stop(); }
std::optional<std::string> tls_client_of(uint16_t loopback_port) { return Bridges::get().take(loopback_port); }
bool tls_frontend_active() { return Bridges::get().active(); }

}  // namespace sluice
