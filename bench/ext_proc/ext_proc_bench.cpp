// sluice_ext_proc_bench: the Endpoint Picker path against the standalone path, side by side on one
// gateway (scripts/bench-ext-proc.sh starts it in front of nginx's canned completion).
//
//   ext_proc: each request is one Process stream played as Envoy plays it in FULL_DUPLEX_STREAMED
//             (request headers, the small body with end_of_stream -> the picker's header and body
//             answers; response headers, the canned body with end_of_stream -> their answers;
//             half-close, status): the whole conversation a proxy has with the picker per request,
//             i.e. what the ext_proc path adds. The request is dispatched, accounted and completed
//             by the gateway as a served request.
//   standalone: POST through the gateway's HTTP listener to nginx, and straight to nginx (direct),
//             keep-alive connections; added = gateway - direct.
// Each measured with `--threads` closed-loop clients for `--seconds`, and with one client (latency).
// gRPC sync API: plain and blocking, this is a load generator, not part of the gateway.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "envoy/service/ext_proc/v3/external_processor.grpc.pb.h"

namespace pb = envoy::service::ext_proc::v3;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kModel = "meta-llama/Llama-3.1-8B-Instruct";
const std::string kBody = R"({"model":")" + kModel +
                          R"(","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"What is the capital of France?"}],"max_tokens":16,"temperature":0})";
const std::string kCompletion = R"({"id":"chatcmpl-bench","object":"chat.completion","model":")" + kModel +
                                R"(","choices":[{"index":0,"message":{"role":"assistant","content":"The capital of France is Paris."},"finish_reason":"stop"}],"usage":{"prompt_tokens":24,"completion_tokens":8,"total_tokens":32}})";

void header(envoy::config::core::v3::HeaderMap* m, const std::string& k, const std::string& v) {
  auto* h = m->add_headers();
  h->set_key(k);
  h->set_raw_value(v);
}

// One full picker conversation; false on any failure.
bool ext_proc_request(pb::ExternalProcessor::Stub& stub) {
  grpc::ClientContext ctx;
  auto stream = stub.Process(&ctx);
  pb::ProcessingRequest req;
  auto* hm = req.mutable_request_headers()->mutable_headers();
  header(hm, ":method", "POST");
  header(hm, ":path", "/v1/chat/completions");
  header(hm, ":authority", "bench");
  header(hm, "content-type", "application/json");
  header(hm, "content-length", std::to_string(kBody.size()));
  if (!stream->Write(req)) return false;
  req.Clear();
  req.mutable_request_body()->set_body(kBody);
  req.mutable_request_body()->set_end_of_stream(true);
  if (!stream->Write(req)) return false;
  pb::ProcessingResponse resp;
  if (!stream->Read(&resp) || !resp.has_request_headers()) return false;
  if (!stream->Read(&resp) || !resp.has_request_body()) return false;
  req.Clear();
  auto* rh = req.mutable_response_headers()->mutable_headers();
  header(rh, ":status", "200");
  header(rh, "content-type", "application/json");
  if (!stream->Write(req) || !stream->Read(&resp) || !resp.has_response_headers()) return false;
  req.Clear();
  req.mutable_response_body()->set_body(kCompletion);
  req.mutable_response_body()->set_end_of_stream(true);
  if (!stream->Write(req) || !stream->Read(&resp) || !resp.has_response_body()) return false;
  stream->WritesDone();
  return stream->Finish().ok();
}

// A keep-alive HTTP/1.1 client (blocking socket): POST, read the Content-Length body.
struct Http {
  int fd = -1;
  std::string buf;
  explicit Http(int port) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      fd = -1;
    }
    int one = 1;
    if (fd >= 0) ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Http() {
    if (fd >= 0) ::close(fd);
  }
  bool post() {
    if (fd < 0) return false;
    const std::string req = "POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: " +
                            std::to_string(kBody.size()) + "\r\n\r\n" + kBody;
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) return false;
    buf.clear();
    char tmp[16384];
    size_t need = std::string::npos;
    while (true) {
      const ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
      if (n <= 0) return false;
      buf.append(tmp, static_cast<size_t>(n));
      if (need == std::string::npos) {
        const auto end = buf.find("\r\n\r\n");
        if (end == std::string::npos) continue;
        auto cl = buf.find("ontent-Length: ");
        if (cl == std::string::npos || cl > end) cl = buf.find("ontent-length: ");
        if (cl == std::string::npos || cl > end) return false;
        need = end + 4 + std::stoul(buf.substr(cl + 15));
        if (buf.compare(9, 3, "200") != 0) return false;
      }
      if (buf.size() >= need) return true;
    }
  }
};

struct Figures {
  double rps = 0;
  double p50_us = 0, p99_us = 0;
  long errors = 0;
};

template <typename MakeClient>
Figures run(int threads, double seconds, MakeClient make) {
  std::atomic<bool> stop{false};
  std::vector<std::vector<double>> lat(threads);
  std::vector<long> errs(threads, 0);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      auto one = make();
      while (!stop.load(std::memory_order_relaxed)) {
        const auto t0 = Clock::now();
        const bool ok = one();
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        if (ok) lat[t].push_back(us);
        else ++errs[t];
      }
    });
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& th : ts) th.join();
  std::vector<double> all;
  Figures f;
  for (int t = 0; t < threads; ++t) {
    all.insert(all.end(), lat[t].begin(), lat[t].end());
    f.errors += errs[t];
  }
  std::sort(all.begin(), all.end());
  f.rps = static_cast<double>(all.size()) / seconds;
  if (!all.empty()) {
    f.p50_us = all[all.size() / 2];
    f.p99_us = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  int grpc_port = 0, gateway_port = 0, direct_port = 0, threads = 8;
  double seconds = 5;
  bool only_ext_proc = false;  // --only ext_proc: the throughput run alone (for CPU-per-pick sampling)
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const std::string v = argv[i + 1];
    if (k == "--ext-proc-port") grpc_port = std::stoi(v);
    else if (k == "--gateway-port") gateway_port = std::stoi(v);
    else if (k == "--direct-port") direct_port = std::stoi(v);
    else if (k == "--threads") threads = std::stoi(v);
    else if (k == "--seconds") seconds = std::stod(v);
    else if (k == "--only") only_ext_proc = v == "ext_proc";
  }
  if (!grpc_port || !gateway_port || !direct_port) {
    std::fprintf(stderr, "usage: sluice_ext_proc_bench --ext-proc-port P --gateway-port P --direct-port P [--threads N] [--seconds S]\n");
    return 2;
  }
  // One channel per client thread (separate HTTP/2 connections, as a proxy's workers would hold).
  auto ext_proc = [&] {
    auto stub = pb::ExternalProcessor::NewStub(grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(grpc_port), grpc::InsecureChannelCredentials(), [] {
          grpc::ChannelArguments a;
          a.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
          return a;
        }()));
    return [s = std::shared_ptr<pb::ExternalProcessor::Stub>(std::move(stub))] { return ext_proc_request(*s); };
  };
  auto http = [](int port) {
    return [port] {
      auto c = std::make_shared<Http>(port);
      return [c] { return c->post(); };
    };
  };
  ext_proc_request(*pb::ExternalProcessor::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(grpc_port),
                                                                        grpc::InsecureChannelCredentials())));  // warm-up
  if (only_ext_proc) {
    const Figures en = run(threads, seconds, ext_proc);
    std::printf("ext_proc alone, %d clients: %.0f picks/s, %ld picks, errors %ld\n", threads, en.rps,
                static_cast<long>(en.rps * seconds + 0.5), en.errors);
    return en.errors > 0 ? 1 : 0;
  }
  const double lat_s = std::max(1.0, seconds / 2);
  const Figures e1 = run(1, lat_s, ext_proc), g1 = run(1, lat_s, http(gateway_port)), d1 = run(1, lat_s, http(direct_port));
  const Figures en = run(threads, seconds, ext_proc), gn = run(threads, seconds, http(gateway_port)),
                dn = run(threads, seconds, http(direct_port));
  std::printf("one client (latency; p50 / p99 per request):\n");
  std::printf("  ext_proc conversation (what the picker adds)  %8.0f us / %8.0f us   errors %ld\n", e1.p50_us, e1.p99_us, e1.errors);
  std::printf("  standalone gateway -> nginx                   %8.0f us / %8.0f us   errors %ld\n", g1.p50_us, g1.p99_us, g1.errors);
  std::printf("  direct -> nginx                               %8.0f us / %8.0f us   errors %ld\n", d1.p50_us, d1.p99_us, d1.errors);
  std::printf("  added per request at p50: ext_proc %.0f us, standalone %.0f us (ratio ext_proc/standalone %.2f)\n",
              e1.p50_us, g1.p50_us - d1.p50_us, e1.p50_us / std::max(1.0, g1.p50_us - d1.p50_us));
  std::printf("%d clients (throughput):\n", threads);
  std::printf("  ext_proc picks (full conversations) per second  %8.0f   p50 %6.0f us  p99 %6.0f us  errors %ld\n", en.rps, en.p50_us, en.p99_us, en.errors);
  std::printf("  standalone requests per second                  %8.0f   p50 %6.0f us  p99 %6.0f us  errors %ld\n", gn.rps, gn.p50_us, gn.p99_us, gn.errors);
  std::printf("  direct requests per second                      %8.0f   p50 %6.0f us  p99 %6.0f us  errors %ld\n", dn.rps, dn.p50_us, dn.p99_us, dn.errors);
  std::printf("  ratio ext_proc / standalone requests per second: %.2f\n", en.rps / std::max(1.0, gn.rps));
  std::printf("  goal >= 5000 picks/s: %s\n", en.rps >= 5000 ? "met" : "NOT met");
  return en.errors + gn.errors > 0 ? 1 : 0;
}
