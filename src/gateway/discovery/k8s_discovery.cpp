#include "gateway/discovery/k8s_discovery.h"

#include <openssl/evp.h>
#include <sys/socket.h>
#include <yaml-cpp/yaml.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/epp/k8s_pods.h"
#include "gateway/discovery/discovered.h"
#include "gateway/gateway.h"
#include "gateway/reload.h"

namespace sluice {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string base64_decode(const std::string& in) {
  std::string out((in.size() / 4 + 1) * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()), reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  if (n < 0) return {};
  size_t len = static_cast<size_t>(n);
  for (size_t i = in.size(); i > 0 && in[i - 1] == '=' && len > 0; --i) --len;  // EVP_DecodeBlock counts padding
  out.resize(len);
  return out;
}

// Percent-encoding for a query value (label selectors carry '=' and ',').
std::string url_encode(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') out += static_cast<char>(c);
    else out += fmt::format("%{:02X}", c);
  }
  return out;
}

// Where the API server is and how to authenticate (resolved on every connect).
struct ApiTarget {
  bool tls = false;
  std::string host;
  std::string port;
  std::string token;
  std::string ca_pem;   // empty with TLS: the system's trust store
  std::string error;    // set: cannot connect (named)
};

ApiTarget resolve_target(const KubernetesDiscoveryConfig& d) {
  ApiTarget t;
  std::string server = d.api_server;
  std::string token_path = d.token_path;
  std::string ca_path = d.ca_path;
  if (!d.kubeconfig.empty()) {
    try {
      const YAML::Node kc = YAML::LoadFile(d.kubeconfig);
      const std::string current = kc["current-context"] ? kc["current-context"].as<std::string>() : "";
      YAML::Node ctx;
      for (const auto& c : kc["contexts"])
        if (current.empty() || c["name"].as<std::string>() == current) { ctx = c["context"]; break; }
      if (!ctx) throw std::runtime_error("no context " + current);
      const std::string cluster = ctx["cluster"].as<std::string>(), user = ctx["user"].as<std::string>();
      for (const auto& c : kc["clusters"])
        if (c["name"].as<std::string>() == cluster) {
          const auto& cl = c["cluster"];
          if (server.empty()) server = cl["server"].as<std::string>();
          if (cl["certificate-authority-data"]) t.ca_pem = base64_decode(cl["certificate-authority-data"].as<std::string>());
          else if (cl["certificate-authority"]) ca_path = cl["certificate-authority"].as<std::string>();
        }
      for (const auto& u : kc["users"])
        if (u["name"].as<std::string>() == user) {
          const auto& us = u["user"];
          if (us["token"]) t.token = us["token"].as<std::string>();
          else if (us["tokenFile"]) token_path = us["tokenFile"].as<std::string>();
        }
    } catch (const std::exception& e) {
      t.error = fmt::format("kubeconfig {}: {}", d.kubeconfig, e.what());
      return t;
    }
  }
  if (server.empty()) {
    const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
    const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
    if (!host || !port) {
      t.error = "no api_server, kubeconfig or in-cluster KUBERNETES_SERVICE_HOST/PORT";
      return t;
    }
    server = fmt::format("https://{}:{}", host, port);
  }
  std::string_view rest = server;
  if (rest.starts_with("https://")) {
    t.tls = true;
    rest.remove_prefix(8);
  } else if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else {
    t.error = "api server `" + server + "` is not an http(s) URL";
    return t;
  }
  rest = rest.substr(0, rest.find('/'));
  std::string error;
  if (auto hp = parse_host_port(rest, error)) {
    t.host = hp->host;
    t.port = std::to_string(hp->port);
  } else {
    t.host = std::string(rest);
    t.port = t.tls ? "443" : "80";
  }
  if (t.token.empty()) t.token = trim(read_file(token_path));
  if (t.tls && t.ca_pem.empty()) t.ca_pem = read_file(ca_path);
  return t;
}

std::string namespace_of(const KubernetesDiscoveryConfig& d) {
  if (!d.namespace_name.empty()) return d.namespace_name;
  std::string ns = trim(read_file("/var/run/secrets/kubernetes.io/serviceaccount/namespace"));
  return ns.empty() ? "default" : ns;
}

struct HttpFailure {
  int status = 0;  // 0: transport
  std::string message;
};

}  // namespace

struct KubernetesDiscovery::Watcher {
  Watcher(Gateway& g, const PoolConfig& pool, StartLoops sl)
      : gw(g), pool_name(pool.name), engine(pool.engine), cfg(*pool.discovery), start_loops(std::move(sl)),
        updates(g.registry().counter("sluice_discovery_updates_total",
                                     "Kubernetes discovery: endpoint-set changes applied and failures, by pool.",
                                     {"pool", "result"})) {}

  Gateway& gw;
  const std::string pool_name;
  const EngineKind engine;
  const KubernetesDiscoveryConfig cfg;
  StartLoops start_loops;
  CounterFamily& updates;
  std::thread thread;
  std::atomic<bool> stopping{false};
  std::atomic<int> fd{-1};
  std::mutex mu;
  std::condition_variable cv;

  std::map<std::string, k8s::Pod> pods;
  std::vector<uint16_t> ports;
  std::map<std::string, std::string> selector;
  std::string resource_version;
  std::string applied;  // the endpoint set last applied, as text
  std::string last_error;

  void run();
  void sleep_for(std::chrono::milliseconds d) {
    std::unique_lock lock(mu);
    cv.wait_for(lock, d, [&] { return stopping.load(); });
  }
  void fail(const std::string& what) {
    updates.with({pool_name, "error"}).inc();
    if (what == last_error) return;  // once per distinct error
    last_error = what;
    spdlog::error("kubernetes discovery of pool {}: {}; keeping its last {} endpoint(s)", pool_name, what,
                  k8s::endpoints_of(pods, ports, engine).size());
  }
  void apply() {
    auto eps = k8s::endpoints_of(pods, ports, engine);
    std::string text;
    for (const auto& e : eps) text += e.name + "=" + e.address.str() + " ";
    if (text == applied) return;
    applied = text;
    set_discovered(pool_name, std::move(eps));
    apply_config(gw, gw.current()->config, "kubernetes discovery of pool " + pool_name, start_loops);
    updates.with({pool_name, "applied"}).inc();
  }

  // One GET; `on_line` receives each line of the body as it arrives (watch) and the body is also
  // returned whole when `stream` is false. Throws nothing.
  template <typename Stream>
  bool get(Stream& s, const ApiTarget& t, const std::string& target, bool stream, std::string& body, HttpFailure& f,
           const std::function<bool(std::string_view)>& on_line) {
    http::request<http::empty_body> req{http::verb::get, target, 11};
    req.set(http::field::host, t.host);
    req.set(http::field::accept, "application/json");
    req.set(http::field::user_agent, "sluice");
    if (!t.token.empty()) req.set(http::field::authorization, "Bearer " + t.token);
    beast::error_code ec;
    http::write(s, req, ec);
    if (ec) {
      f = {0, "write: " + ec.message()};
      return false;
    }
    beast::flat_buffer buf;
    http::response_parser<http::string_body> p;
    p.body_limit(boost::none);
    http::read_header(s, buf, p, ec);
    if (ec) {
      f = {0, "read: " + ec.message()};
      return false;
    }
    const int status = p.get().result_int();
    size_t used = 0;
    while (!p.is_done()) {
      http::read_some(s, buf, p, ec);
      if (ec) break;
      if (stream && status == 200) {
        auto& b = p.get().body();
        for (size_t nl; (nl = b.find('\n', used)) != std::string::npos; used = nl + 1)
          if (nl > used && !on_line(std::string_view(b).substr(used, nl - used))) return true;
        if (used > (1u << 20)) {
          b.erase(0, used);
          used = 0;
        }
      }
    }
    body = p.get().body().substr(used);
    if (status != 200) {
      f = {status, fmt::format("HTTP {} for {}: {}", status, target, body.substr(0, 200))};
      return false;
    }
    if (ec && ec != http::error::end_of_stream && ec != asio::error::eof && !stream) {
      f = {0, "read: " + ec.message()};
      return false;
    }
    if (stream && !body.empty()) on_line(body);
    return true;
  }

  template <typename Stream>
  void session(Stream& s, const ApiTarget& t, const std::string& ns);
};

template <typename Stream>
void KubernetesDiscovery::Watcher::session(Stream& s, const ApiTarget& t, const std::string& ns) {
  std::string body;
  HttpFailure f;
  auto no_lines = [](std::string_view) { return true; };
  if (ports.empty()) {  // the InferencePool names the selector and the ports (read once)
    if (!cfg.selector.empty()) {
      selector = cfg.selector;
      ports = cfg.target_ports;
    } else {
      const auto target = fmt::format("/apis/inference.networking.k8s.io/v1/namespaces/{}/inferencepools/{}", ns, cfg.inference_pool);
      if (!get(s, t, target, false, body, f, no_lines)) {
        fail(f.status == 401 || f.status == 403
                 ? fmt::format("the API server refused the credentials ({}): check the service account token and its RBAC "
                               "(get inferencepools)", f.status)
                 : "reading the InferencePool: " + f.message);
        return;
      }
      std::string error;
      auto spec = k8s::parse_inference_pool(body, error);
      if (!spec) {
        fail(error);
        return;
      }
      selector = spec->selector;
      ports = spec->target_ports;
    }
  }
  const std::string sel = url_encode(k8s::label_selector(selector));
  if (resource_version.empty()) {  // LIST
    if (!get(s, t, fmt::format("/api/v1/namespaces/{}/pods?labelSelector={}", ns, sel), false, body, f, no_lines)) {
      fail(f.status == 401 || f.status == 403
               ? fmt::format("the API server refused the credentials ({}): check the service account token and its RBAC "
                             "(list/watch pods)", f.status)
               : "listing pods: " + f.message);
      return;
    }
    std::string error;
    auto list = k8s::parse_pod_list(body, error);
    if (!list) {
      fail(error);
      return;
    }
    pods.clear();
    for (auto& p : list->pods) pods[p.name] = std::move(p);
    resource_version = list->resource_version;
    last_error.clear();
    apply();
    return;  // the watch on a fresh connection
  }
  // WATCH from the last version seen.
  bool relist = false;
  const auto target = fmt::format("/api/v1/namespaces/{}/pods?labelSelector={}&watch=true&resourceVersion={}"
                                  "&allowWatchBookmarks=true&timeoutSeconds=60", ns, sel, url_encode(resource_version));
  const bool ok = get(s, t, target, true, body, f, [&](std::string_view line) {
    std::string error;
    auto ev = k8s::parse_watch_event(line, error);
    if (!ev) {
      updates.with({pool_name, "bad_event"}).inc();
      spdlog::warn("kubernetes discovery of pool {}: {} (skipped)", pool_name, error);
      return true;
    }
    if (ev->type == k8s::EventType::error) {
      if (ev->error_code == 410) relist = true;
      else fail(fmt::format("watch error {}: {}", ev->error_code, ev->error_message));
      return false;
    }
    if (!ev->resource_version.empty()) resource_version = ev->resource_version;
    if (ev->type == k8s::EventType::deleted) pods.erase(ev->pod.name);
    else if (ev->type != k8s::EventType::bookmark) pods[ev->pod.name] = ev->pod;
    last_error.clear();
    apply();
    return !stopping.load();
  });
  if (!ok) {
    if (f.status == 410) relist = true;
    else if (f.status == 401 || f.status == 403)
      fail(fmt::format("the API server refused the credentials ({}): check the service account token and its RBAC "
                       "(list/watch pods)", f.status));
    else fail("watch: " + f.message);
  }
  if (relist) resource_version.clear();
}

void KubernetesDiscovery::Watcher::run() {
  auto backoff = std::chrono::milliseconds(100);
  while (!stopping.load()) {
    const ApiTarget t = resolve_target(cfg);
    const std::string ns = namespace_of(cfg);
    if (!t.error.empty()) {
      fail(t.error);
    } else {
      try {
        asio::io_context io;
        tcp::resolver resolver(io);
        beast::error_code ec;
        auto results = resolver.resolve(t.host, t.port, ec);
        if (ec) throw std::runtime_error("resolving " + t.host + ": " + ec.message());
        auto timeouts = [&](int native) {
          fd = native;
          timeval tv{90, 0};  // a silent API server: the watch is re-established
          ::setsockopt(native, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        };
        if (t.tls) {
          ssl::context ctx(ssl::context::tls_client);
          if (!t.ca_pem.empty()) ctx.add_certificate_authority(asio::buffer(t.ca_pem));
          else ctx.set_default_verify_paths();
          ctx.set_verify_mode(ssl::verify_peer);
          beast::ssl_stream<beast::tcp_stream> s(io, ctx);
          SSL_set_tlsext_host_name(s.native_handle(), t.host.c_str());
          beast::get_lowest_layer(s).connect(results);
          timeouts(beast::get_lowest_layer(s).socket().native_handle());
          s.handshake(ssl::stream_base::client);
          session(s, t, ns);
        } else {
          beast::tcp_stream s(io);
          s.connect(results);
          timeouts(s.socket().native_handle());
          session(s, t, ns);
        }
      } catch (const std::exception& e) {
        fail(std::string("connecting to the API server: ") + e.what());
      }
      fd = -1;
    }
    if (last_error.empty()) {  // served (a list, or a watch that ended): go on from where it stopped
      backoff = std::chrono::milliseconds(100);
      sleep_for(std::chrono::milliseconds(20));
    } else {
      sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
    }
  }
}

KubernetesDiscovery::KubernetesDiscovery(Gateway& gateway, StartLoops start_loops) {
  for (const auto& p : gateway.startup_config().pools)
    if (p.discovery) watchers_.push_back(std::make_unique<Watcher>(gateway, p, start_loops));
}

KubernetesDiscovery::~KubernetesDiscovery() { stop(); }

void KubernetesDiscovery::start() {
  for (auto& w : watchers_) {
    spdlog::info("kubernetes discovery of pool {}: watching {}", w->pool_name,
                 w->cfg.inference_pool.empty() ? "pods by selector" : "InferencePool " + w->cfg.inference_pool);
    w->thread = std::thread([wp = w.get()] { wp->run(); });
  }
}

void KubernetesDiscovery::stop() {
  for (auto& w : watchers_) {
    w->stopping = true;
    w->cv.notify_all();
    if (int fd = w->fd.load(); fd >= 0) ::shutdown(fd, SHUT_RDWR);  // unblocks a waiting read
  }
  for (auto& w : watchers_)
    if (w->thread.joinable()) w->thread.join();
}

}  // namespace sluice
