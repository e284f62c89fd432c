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
#include <sys/resource.h>
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

// The same conversation from an asynchronous client: one thread and one completion queue drive
// `inflight` conversations over `conns` channels (HTTP/2 connections, as a proxy's workers hold),
// each a small state machine. Far less client CPU per pick than blocking threads (which hand the
// poller between them), so the shared cores measure the gateway rather than the load generator.
struct AsyncConversation {
  enum Step { start, wrote_headers, wrote_body, read_headers, read_body, wrote_resp_headers, read_resp_headers,
              wrote_resp_body, read_resp_body, closed, finished };
  pb::ExternalProcessor::Stub* stub = nullptr;
  grpc::CompletionQueue* cq = nullptr;
  std::unique_ptr<grpc::ClientContext> ctx;
  std::unique_ptr<grpc::ClientAsyncReaderWriter<pb::ProcessingRequest, pb::ProcessingResponse>> rw;
  pb::ProcessingRequest headers, body, resp_headers, resp_body;
  pb::ProcessingResponse in;
  grpc::Status status;
  Step step = start;
  bool failed = false;
  Clock::time_point t0;
  ~AsyncConversation() { rw.reset(); }

  void prepare() {
    auto* hm = headers.mutable_request_headers()->mutable_headers();
    header(hm, ":method", "POST");
    header(hm, ":path", "/v1/chat/completions");
    header(hm, ":authority", "bench");
    header(hm, "content-type", "application/json");
    header(hm, "content-length", std::to_string(kBody.size()));
    body.mutable_request_body()->set_body(kBody);
    body.mutable_request_body()->set_end_of_stream(true);
    auto* rh = resp_headers.mutable_response_headers()->mutable_headers();
    header(rh, ":status", "200");
    header(rh, "content-type", "application/json");
    resp_body.mutable_response_body()->set_body(kCompletion);
    resp_body.mutable_response_body()->set_end_of_stream(true);
  }
  void begin() {
    rw.reset();  // before its context (it lives in the call's arena)
    ctx = std::make_unique<grpc::ClientContext>();
    rw = stub->PrepareAsyncProcess(ctx.get(), cq);
    step = start;
    failed = false;
    t0 = Clock::now();
    rw->StartCall(this);
  }
  // One completed operation; returns 1 when a conversation ended ok, -1 on an error, 0 otherwise.
  int on(bool ok) {
    if (!ok && step == closed) ok = true;  // the server may have finished first: nothing to half-close
    if (!ok && step != finished) {  // the stream broke: collect the status
      step = finished;
      rw->Finish(&status, this);
      return 0;
    }
    switch (step) {
      case start: step = wrote_headers; rw->Write(headers, this); return 0;
      case wrote_headers: step = wrote_body; rw->Write(body, this); return 0;
      case wrote_body: step = read_headers; rw->Read(&in, this); return 0;
      case read_headers:
        if (!in.has_request_headers()) return fail();
        step = read_body; rw->Read(&in, this); return 0;
      case read_body:
        if (!in.has_request_body()) return fail();
        step = wrote_resp_headers; rw->Write(resp_headers, this); return 0;
      case wrote_resp_headers: step = read_resp_headers; rw->Read(&in, this); return 0;
      case read_resp_headers:
        if (!in.has_response_headers()) return fail();
        step = wrote_resp_body; rw->Write(resp_body, this); return 0;
      case wrote_resp_body: step = read_resp_body; rw->Read(&in, this); return 0;
      case read_resp_body:
        if (!in.has_response_body()) return fail();
        step = closed; rw->WritesDone(this); return 0;  // half-close, as Envoy does
      case closed: step = finished; rw->Finish(&status, this); return 0;
      case finished: return status.ok() && !failed ? 1 : -1;
    }
    return -1;
  }
  int fail() {  // an unexpected answer: cancel, collect the status (into a member: it is written later)
    failed = true;
    ctx->TryCancel();
    step = finished;
    rw->Finish(&status, this);
    return 0;
  }
};

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

// `inflight` concurrent conversations over `conns` channels from one client thread.
Figures run_async(int grpc_port, int conns, int inflight, double seconds) {
  std::vector<std::unique_ptr<pb::ExternalProcessor::Stub>> stubs;
  for (int i = 0; i < conns; ++i) {
    grpc::ChannelArguments a;
    a.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    stubs.push_back(pb::ExternalProcessor::NewStub(
        grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(grpc_port), grpc::InsecureChannelCredentials(), a)));
  }
  grpc::CompletionQueue cq;
  std::vector<AsyncConversation> convs(static_cast<size_t>(inflight));
  for (size_t i = 0; i < convs.size(); ++i) {
    convs[i].stub = stubs[i % stubs.size()].get();
    convs[i].cq = &cq;
    convs[i].prepare();
  }
  std::vector<double> lat;
  Figures f;
  const auto t_end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (auto& c : convs) c.begin();
  size_t live = convs.size();
  void* tag = nullptr;
  bool ok = false;
  while (live > 0) {
    const auto st = cq.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (st == grpc::CompletionQueue::SHUTDOWN) break;
    if (st == grpc::CompletionQueue::TIMEOUT) {  // a stuck conversation: say where, and give up
      for (auto& c : convs)
        if (c.step != AsyncConversation::finished) std::fprintf(stderr, "stuck conversation at step %d\n", static_cast<int>(c.step));
      std::exit(3);
    }
    auto* c = static_cast<AsyncConversation*>(tag);
    const int r = c->on(ok);
    if (r == 0) continue;
    const auto now = Clock::now();
    if (r > 0) lat.push_back(std::chrono::duration<double, std::micro>(now - c->t0).count());
    else ++f.errors;
    if (now < t_end) c->begin();
    else --live;
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  std::sort(lat.begin(), lat.end());
  f.rps = static_cast<double>(lat.size()) / seconds;
  if (!lat.empty()) {
    f.p50_us = lat[lat.size() / 2];
    f.p99_us = lat[std::min(lat.size() - 1, lat.size() * 99 / 100)];
  }
  return f;
}

}  // namespace

// This process's CPU time (user + system), seconds: the client's own share of the shared cores.
double self_cpu() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

template <typename F>
std::pair<Figures, double> with_cpu(double seconds, F f) {  // the figures and the client's CPU us per request
  const double c0 = self_cpu();
  Figures r = f();
  const double c1 = self_cpu();
  return {r, (c1 - c0) * 1e6 / std::max(1.0, r.rps * seconds)};
}

int main(int argc, char** argv) {
  int grpc_port = 0, gateway_port = 0, direct_port = 0, threads = 8, conns = 4, inflight = 32;
  double seconds = 5;
  bool only_ext_proc = false;  // --only ext_proc: the throughput run alone (for CPU-per-pick sampling)
  bool sync_client = false;    // --client sync: that run with the blocking clients instead
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const std::string v = argv[i + 1];
    if (k == "--ext-proc-port") grpc_port = std::stoi(v);
    else if (k == "--gateway-port") gateway_port = std::stoi(v);
    else if (k == "--direct-port") direct_port = std::stoi(v);
    else if (k == "--threads") threads = std::stoi(v);
    else if (k == "--conns") conns = std::stoi(v);
    else if (k == "--inflight") inflight = std::stoi(v);
    else if (k == "--seconds") seconds = std::stod(v);
    else if (k == "--only") only_ext_proc = v == "ext_proc";
    else if (k == "--client") sync_client = v == "sync";
  }
  if (!grpc_port || !gateway_port || !direct_port) {
    std::fprintf(stderr, "usage: sluice_ext_proc_bench --ext-proc-port P --gateway-port P --direct-port P [--threads N] "
                         "[--conns C] [--inflight K] [--seconds S] [--only ext_proc [--client sync|async]]\n");
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
    const auto [en, client_us] = with_cpu(seconds, [&] { return sync_client ? run(threads, seconds, ext_proc) : run_async(grpc_port, conns, inflight, seconds); });
    if (sync_client) std::printf("ext_proc alone, sync client (%d threads):", threads);
    else std::printf("ext_proc alone, async client (1 thread, %d connections, %d in flight):", conns, inflight);
    std::printf(" %.0f picks/s, %ld picks, errors %ld, client CPU %.0f us per pick\n", en.rps,
                static_cast<long>(en.rps * seconds + 0.5), en.errors, client_us);
    return en.errors > 0 ? 1 : 0;
  }
  const double lat_s = std::max(1.0, seconds / 2);
  const Figures e1 = run(1, lat_s, ext_proc), g1 = run(1, lat_s, http(gateway_port)), d1 = run(1, lat_s, http(direct_port));
  const auto [ea, ea_cpu] = with_cpu(seconds, [&] { return run_async(grpc_port, conns, inflight, seconds); });
  const auto [en, en_cpu] = with_cpu(seconds, [&] { return run(threads, seconds, ext_proc); });
  const auto [gn, gn_cpu] = with_cpu(seconds, [&] { return run(threads, seconds, http(gateway_port)); });
  const auto [dn, dn_cpu] = with_cpu(seconds, [&] { return run(threads, seconds, http(direct_port)); });
  std::printf("one client (latency; p50 / p99 per request):\n");
  std::printf("  ext_proc conversation (what the picker adds)  %8.0f us / %8.0f us   errors %ld\n", e1.p50_us, e1.p99_us, e1.errors);
  std::printf("  standalone gateway -> nginx                   %8.0f us / %8.0f us   errors %ld\n", g1.p50_us, g1.p99_us, g1.errors);
  std::printf("  direct -> nginx                               %8.0f us / %8.0f us   errors %ld\n", d1.p50_us, d1.p99_us, d1.errors);
  std::printf("  added per request at p50: ext_proc %.0f us, standalone %.0f us (ratio ext_proc/standalone %.2f)\n",
              e1.p50_us, g1.p50_us - d1.p50_us, e1.p50_us / std::max(1.0, g1.p50_us - d1.p50_us));
  std::printf("throughput (closed loop; the client's own CPU per request beside it):\n");
  std::printf("  ext_proc picks/s, async client (1 thread, %d conns, %d in flight) %7.0f   p50 %6.0f us  p99 %6.0f us  errors %ld  client %4.0f us/pick\n",
              conns, inflight, ea.rps, ea.p50_us, ea.p99_us, ea.errors, ea_cpu);
  std::printf("  ext_proc picks/s, sync client (%d threads)                      %7.0f   p50 %6.0f us  p99 %6.0f us  errors %ld  client %4.0f us/pick\n",
              threads, en.rps, en.p50_us, en.p99_us, en.errors, en_cpu);
  std::printf("  standalone requests/s (%d threads)                              %7.0f   p50 %6.0f us  p99 %6.0f us  errors %ld  client %4.0f us/req\n",
              threads, gn.rps, gn.p50_us, gn.p99_us, gn.errors, gn_cpu);
  std::printf("  direct requests/s (%d threads)                                  %7.0f   p50 %6.0f us  p99 %6.0f us  errors %ld  client %4.0f us/req\n",
              threads, dn.rps, dn.p50_us, dn.p99_us, dn.errors, dn_cpu);
  const double best = std::max(ea.rps, en.rps);
  std::printf("  ratio ext_proc (async client) / standalone requests per second: %.2f\n", ea.rps / std::max(1.0, gn.rps));
  std::printf("  goal >= 5000 picks/s: %s (%.0f)\n", best >= 5000 ? "met" : "NOT met", best);
  return ea.errors + en.errors + gn.errors > 0 ? 1 : 0;
}
