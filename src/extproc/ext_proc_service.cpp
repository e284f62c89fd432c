/*
 * The ext_proc gRPC driver (see ext_proc_service.h): one reactor per Process stream (Envoy opens
 * one stream per HTTP request), gRPC's callback API on gRPC's own threads. It converts protobuf to
 * the plain EppExchange calls and back and keeps the protocol's order; the decision itself runs
 * on a gateway worker (EppExchange::decide) with the same picker, admission and completion path
 * as the standalone proxy.
 *
 * Order (FULL_DUPLEX_STREAMED): request headers are answered only after the decision, at the end
 * of the request body (or at its trailers): HeadersResponse (destination header, Content-Length of
 * a rewritten body, envoy.lb dynamic metadata, clear_route_cache), then the body as
 * StreamedBodyResponse chunks (<= 1 MiB each, the last with end_of_stream), then the trailers
 * response. Response headers, each response body chunk (streamed back as it passes, the alias's
 * model name rewritten) and trailers are answered in order. A refusal is an ImmediateResponse.
 *
 * Bad clients: an empty message, a message out of order (a response before the request's end, a
 * body after the decision), a body mode other than FULL_DUPLEX_STREAMED announced in
 * protocol_config: counted in sluice_ext_proc_bad_messages_total{kind}, the request ends through
 * the completion path (rejected bad_http before the decision, client_cancelled after it) and the
 * stream is finished with INVALID_ARGUMENT / UNIMPLEMENTED. A stream that ends or is cancelled
 * before the response finished ends the request as client_cancelled (everything released).
 *
 * Threading: a stream's handlers run on gRPC threads and the decision's answer on a worker; one
 * mutex per stream orders them (nothing shared across streams but atomics and the metrics).
 */
#include "extproc/ext_proc_service.h"

#include <atomic>
#include <deque>
#include <mutex>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include "core/epp/epp_protocol.h"
#include "core/prom_writer.h"
#include "envoy/service/ext_proc/v3/external_processor.grpc.pb.h"
#include "gateway/extproc/epp_exchange.h"
#include "gateway/gateway.h"

namespace sluice {

namespace pb = envoy::service::ext_proc::v3;
namespace corepb = envoy::config::core::v3;
using envoy::extensions::filters::http::ext_proc::v3::ProcessingMode;

namespace {
constexpr size_t kBodyChunk = 1u << 20;
constexpr int kMaxMessageBytes = 64 << 20;

// The kinds of bad client input, counted once each (bounded label values).
enum class Bad : uint8_t { empty_message, out_of_order, unsupported_mode, body_too_large, invalid };
constexpr std::string_view bad_name(Bad b) {
  switch (b) {
    case Bad::empty_message: return "empty_message";
    case Bad::out_of_order: return "out_of_order";
    case Bad::unsupported_mode: return "unsupported_mode";
    case Bad::body_too_large: return "body_too_large";
    case Bad::invalid: return "invalid";
  }
  return "out_of_order";
}

std::string header_value(const corepb::HeaderValue& h) { return h.raw_value().empty() ? h.value() : h.raw_value(); }

EppHeaders convert(const corepb::HeaderMap& m) {
  EppHeaders out;
  out.reserve(static_cast<size_t>(m.headers_size()));
  for (const auto& h : m.headers()) out.emplace_back(h.key(), header_value(h));
  return out;
}

void set_header(pb::HeaderMutation* m, std::string_view k, std::string_view v) {
  auto* o = m->add_set_headers();
  o->mutable_header()->set_key(std::string(k));
  o->mutable_header()->set_raw_value(std::string(v));
  o->set_append_action(corepb::HeaderValueOption::OVERWRITE_IF_EXISTS_OR_ADD);
}

// A string or list value as strings (the subset hint is a list; be lenient with a string).
std::vector<std::string> strings_of(const google::protobuf::Value& v) {
  std::vector<std::string> out;
  if (v.has_list_value()) {
    for (const auto& e : v.list_value().values())
      if (e.has_string_value()) out.push_back(e.string_value());
  } else if (v.has_string_value()) {
    out.push_back(v.string_value());
  }
  return out;
}

const google::protobuf::Value* metadata_field(const pb::ProcessingRequest& m, std::string_view ns, std::string_view key) {
  if (!m.has_metadata_context()) return nullptr;
  const auto& fm = m.metadata_context().filter_metadata();
  auto it = fm.find(std::string(ns));
  if (it == fm.end()) return nullptr;
  auto f = it->second.fields().find(std::string(key));
  return f == it->second.fields().end() ? nullptr : &f->second;
}
}  // namespace

struct ExtProcService::Impl final : public pb::ExternalProcessor::CallbackService {
  Impl(Gateway& g, const ExtProcConfig& c, std::vector<boost::asio::any_io_executor> w)
      : gw(g), cfg(c), workers(std::move(w)),
        streams(g.registry().counter("sluice_ext_proc_streams_total",
                                     "ext_proc Process streams by how they ended (ok: finished cleanly; cancelled: "
                                     "the proxy cancelled or reset it; error: refused for bad input).",
                                     {"result"})),
        bad(g.registry().counter("sluice_ext_proc_bad_messages_total",
                                 "ext_proc messages refused (the stream is finished with an error), by kind.", {"kind"})) {}

  grpc::ServerBidiReactor<pb::ProcessingRequest, pb::ProcessingResponse>* Process(grpc::CallbackServerContext* ctx) override;

  boost::asio::any_io_executor next_worker() {
    return workers[next.fetch_add(1, std::memory_order_relaxed) % workers.size()];
  }

  Gateway& gw;
  const ExtProcConfig cfg;
  std::vector<boost::asio::any_io_executor> workers;
  std::atomic<size_t> next{0};
  std::atomic<int64_t> active{0};
  CounterFamily& streams;
  CounterFamily& bad;
  std::unique_ptr<grpc::Server> server;
  uint16_t port = 0;
  std::thread health_thread;
  std::atomic<bool> stopping{false};
};

namespace {

class ProcessStream final : public grpc::ServerBidiReactor<pb::ProcessingRequest, pb::ProcessingResponse>,
                            public std::enable_shared_from_this<ProcessStream> {
 public:
  using Impl = ExtProcService::Impl;
  explicit ProcessStream(Impl& svc) : svc_(svc), exchange_(std::make_shared<EppExchange>(svc.gw, svc.cfg)) {
    svc_.active.fetch_add(1, std::memory_order_relaxed);
  }
  ~ProcessStream() override { svc_.active.fetch_sub(1, std::memory_order_relaxed); }

  void begin(std::shared_ptr<ProcessStream> self) {
    std::lock_guard lock(mu_);
    self_ = std::move(self);
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    std::lock_guard lock(mu_);
    if (!ok) {  // the proxy half-closed the stream, or it broke
      read_closed_ = true;
      if (!exchange_->finished() && !deciding_) {
        exchange_->cancel();
        exchange_->stream_ended();
      } else if (deciding_) {
        exchange_->cancel();
      }
      maybe_finish();
      return;
    }
    if (finishing_) return;
    inline_ = true;
    try {
      handle();
    } catch (const std::exception& e) {  // never out of a gRPC callback: that would end the process
      deciding_ = false;
      refuse(Bad::invalid, e.what());
    }
    inline_ = false;
    // The next read: after this message unless a decision is pending (it reads on when made).
    if (!deciding_ && !finishing_ && !error_) read_next_ = true;
    flush_read();
    maybe_finish();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    writing_ = false;
    if (!ok) {  // the proxy is gone
      write_broken_ = true;
      out_.clear();
      exchange_->cancel();
      if (!deciding_) exchange_->stream_ended();
    }
    pump();
    maybe_finish();
  }

  void OnCancel() override {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    exchange_->cancel();
    if (!deciding_) exchange_->stream_ended();
    out_.clear();
    maybe_finish();
  }

  void OnDone() override {
    std::shared_ptr<ProcessStream> keep;
    {
      std::lock_guard lock(mu_);
      done_ = true;
      svc_.streams.with({cancelled_ || write_broken_ ? "cancelled" : error_ ? "error" : "ok"}).inc();
      keep = std::move(self_);  // freed when the last reference (a pending decision) lets go
    }
  }

 private:
  enum class Phase { request_headers, request_body, deciding, request_done, response_body, response_done, immediate };

  void handle() {
    const pb::ProcessingRequest& m = in_;
    if (phase_ == Phase::immediate) return;  // the proxy ignores us after an immediate response
    switch (m.request_case()) {
      case pb::ProcessingRequest::kRequestHeaders: {
        if (phase_ != Phase::request_headers) return refuse(Bad::out_of_order, "request_headers twice");
        if (m.has_protocol_config()) {
          const auto req_mode = m.protocol_config().request_body_mode();
          const auto resp_mode = m.protocol_config().response_body_mode();
          if ((req_mode != ProcessingMode::FULL_DUPLEX_STREAMED && req_mode != ProcessingMode::NONE) ||
              (resp_mode != ProcessingMode::FULL_DUPLEX_STREAMED && resp_mode != ProcessingMode::NONE))
            return refuse(Bad::unsupported_mode, "sluice's Endpoint Picker needs FULL_DUPLEX_STREAMED body modes",
                          grpc::StatusCode::UNIMPLEMENTED);
        }
        exchange_->set_request_headers(convert(m.request_headers().headers()));
        if (const auto* subset = metadata_field(m, epp::kSubsetNamespace, epp::kSubsetKey)) exchange_->set_subset(strings_of(*subset));
        if (m.request_headers().end_of_stream()) return start_decision(/*body_eos=*/false, /*trailers=*/false, /*no_body=*/true);
        phase_ = Phase::request_body;
        return;
      }
      case pb::ProcessingRequest::kRequestBody: {
        if (phase_ != Phase::request_body) return refuse(Bad::out_of_order, "request_body outside the request body");
        if (!exchange_->append_request_body(m.request_body().body())) {
          svc_.bad.with({bad_name(Bad::body_too_large)}).inc();
          return send_immediate(exchange_->answer_too_large());
        }
        if (m.request_body().end_of_stream()) start_decision(true, false, false);
        return;
      }
      case pb::ProcessingRequest::kRequestTrailers: {
        if (phase_ != Phase::request_body) return refuse(Bad::out_of_order, "request_trailers outside the request");
        return start_decision(false, true, false);
      }
      case pb::ProcessingRequest::kResponseHeaders: {
        if (phase_ != Phase::request_done) return refuse(Bad::out_of_order, "response_headers before the request's end");
        served(m);
        const bool eos = m.response_headers().end_of_stream();
        auto r = exchange_->on_response_headers(convert(m.response_headers().headers()), eos);
        pb::ProcessingResponse resp;
        auto* mut = resp.mutable_response_headers()->mutable_response()->mutable_header_mutation();
        for (const auto& [k, v] : r.set_headers) set_header(mut, k, v);
        for (const auto& k : r.remove_headers) mut->add_remove_headers(k);
        queue(std::move(resp));
        phase_ = eos ? Phase::response_done : Phase::response_body;
        return;
      }
      case pb::ProcessingRequest::kResponseBody: {
        if (phase_ != Phase::response_body) return refuse(Bad::out_of_order, "response_body outside the response body");
        served(m);
        const bool eos = m.response_body().end_of_stream();
        std::string out;
        exchange_->on_response_body(m.response_body().body(), eos, out);
        pb::ProcessingResponse resp;
        auto* sr = resp.mutable_response_body()->mutable_response()->mutable_body_mutation()->mutable_streamed_response();
        sr->set_body(std::move(out));
        sr->set_end_of_stream(eos);
        queue(std::move(resp));
        if (eos) phase_ = Phase::response_done;
        return;
      }
      case pb::ProcessingRequest::kResponseTrailers: {
        if (phase_ != Phase::response_body) return refuse(Bad::out_of_order, "response_trailers outside the response");
        exchange_->on_response_trailers();
        pb::ProcessingResponse resp;
        resp.mutable_response_trailers();
        queue(std::move(resp));
        phase_ = Phase::response_done;
        return;
      }
      case pb::ProcessingRequest::REQUEST_NOT_SET:
        return refuse(Bad::empty_message, "a ProcessingRequest without a request");
    }
  }

  void served(const pb::ProcessingRequest& m) {
    if (const auto* v = metadata_field(m, epp::kLbNamespace, epp::kServedKey); v && v->has_string_value())
      exchange_->on_served(v->string_value());
  }

  void start_decision(bool body_eos, bool trailers, bool no_body) {
    phase_ = Phase::deciding;
    deciding_ = true;
    auto self = shared_from_this();
    auto now = exchange_->decide(svc_.next_worker(), [self, body_eos, trailers, no_body](EppAnswer a) {
      std::lock_guard lock(self->mu_);
      self->decided(std::move(a), body_eos, trailers, no_body);
    });
    if (now) decided(std::move(*now), body_eos, trailers, no_body);  // decided at once, on this thread
  }

  // The decision is made (mu_ held): at once, or later on a gateway worker.
  void decided(EppAnswer a, bool body_eos, bool trailers, bool no_body) {
    deciding_ = false;
    if (done_) return;
    if (cancelled_ || read_closed_ || write_broken_) {
      exchange_->stream_ended();
      maybe_finish();
      return;
    }
    if (a.stream_gone) {
      maybe_finish();
      return;
    }
    if (a.immediate) {
      send_immediate(std::move(a));
    } else {
      pb::ProcessingResponse h;
      auto* common = h.mutable_request_headers()->mutable_response();
      auto* mut = common->mutable_header_mutation();
      for (const auto& [k, v] : a.set_headers) set_header(mut, k, v);
      for (const auto& k : a.remove_headers) mut->add_remove_headers(k);
      common->set_clear_route_cache(true);
      auto& lb = (*h.mutable_dynamic_metadata()->mutable_fields())[std::string(epp::kLbNamespace)];
      (*lb.mutable_struct_value()->mutable_fields())[std::string(epp::kDestinationHeader)].set_string_value(a.destination);
      queue(std::move(h));
      if (!no_body) {
        const std::string& body = a.body_replacement ? *a.body_replacement : exchange_->request_body();
        size_t at = 0;
        do {  // at least one message, even for an empty body
          const size_t n = std::min(kBodyChunk, body.size() - at);
          pb::ProcessingResponse b;
          auto* sr = b.mutable_request_body()->mutable_response()->mutable_body_mutation()->mutable_streamed_response();
          sr->set_body(body.substr(at, n));
          at += n;
          sr->set_end_of_stream(body_eos && at == body.size());
          queue(std::move(b));
        } while (at < body.size());
      }
      if (trailers) {
        pb::ProcessingResponse t;
        t.mutable_request_trailers();
        queue(std::move(t));
      }
      phase_ = Phase::request_done;
    }
    if (!inline_ && !finishing_ && !error_ && !read_closed_) {  // decided on a worker: read on
      read_next_ = true;
      flush_read();
    }
    maybe_finish();
  }

  void flush_read() {
    if (read_next_ && !finishing_ && !done_) {
      read_next_ = false;
      StartRead(&in_);
    }
  }

  void send_immediate(EppAnswer a) {
    pb::ProcessingResponse r;
    auto* im = r.mutable_immediate_response();
    im->mutable_status()->set_code(static_cast<envoy::type::v3::StatusCode>(a.status));
    for (const auto& [k, v] : a.reply_headers) set_header(im->mutable_headers(), k, v);
    im->set_body(std::move(a.body));
    im->set_details(std::move(a.details));
    queue(std::move(r));
    phase_ = Phase::immediate;
  }

  void refuse(Bad kind, std::string_view why, grpc::StatusCode code = grpc::StatusCode::INVALID_ARGUMENT) {
    svc_.bad.with({bad_name(kind)}).inc();
    spdlog::debug("ext_proc: refusing a stream: {}", why);
    exchange_->protocol_error();
    error_ = true;
    status_ = grpc::Status(code, std::string(why));
  }

  void queue(pb::ProcessingResponse r) {
    if (write_broken_ || finishing_) return;
    out_.push_back(std::move(r));
    pump();
  }

  void pump() {
    if (writing_ || out_.empty() || finishing_ || write_broken_) return;
    current_ = std::move(out_.front());
    out_.pop_front();
    writing_ = true;
    // More answers queued behind this one (the header and body answers of a decision): let gRPC
    // coalesce them into one write.
    grpc::WriteOptions options;
    if (!out_.empty()) options.set_buffer_hint();
    StartWrite(&current_, options);
  }

  // Finish once nothing is pending: on an error, a cancellation, or when the proxy closed its
  // side (Envoy half-closes when the request is done) and every answer is written.
  void maybe_finish() {
    if (finishing_ || deciding_ || writing_) return;
    const bool drained = out_.empty() || write_broken_ || cancelled_;
    if (!drained) return;
    if (error_ || cancelled_ || read_closed_ || write_broken_) {
      finishing_ = true;
      if (!exchange_->finished()) exchange_->stream_ended();
      Finish(error_ ? status_ : cancelled_ ? grpc::Status::CANCELLED : grpc::Status::OK);
    }
  }

  Impl& svc_;
  std::shared_ptr<EppExchange> exchange_;
  std::mutex mu_;
  std::shared_ptr<ProcessStream> self_;
  pb::ProcessingRequest in_;
  pb::ProcessingResponse current_;
  std::deque<pb::ProcessingResponse> out_;
  Phase phase_ = Phase::request_headers;
  grpc::Status status_;
  bool deciding_ = false, writing_ = false, finishing_ = false, done_ = false;
  bool inline_ = false, read_next_ = false;  // in OnReadDone; the next StartRead is due
  bool read_closed_ = false, write_broken_ = false, cancelled_ = false, error_ = false;
};

}  // namespace

grpc::ServerBidiReactor<pb::ProcessingRequest, pb::ProcessingResponse>* ExtProcService::Impl::Process(
    grpc::CallbackServerContext*) {
  auto stream = std::make_shared<ProcessStream>(*this);
  ProcessStream* raw = stream.get();
  raw->begin(std::move(stream));
  return raw;
}

ExtProcService::ExtProcService(Gateway& gateway, const ExtProcConfig& config,
                               std::vector<boost::asio::any_io_executor> workers)
    : impl_(std::make_unique<Impl>(gateway, config, std::move(workers))) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(format_host_port(config.listen_host, config.listen_port), grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.RegisterService(impl_.get());
  impl_->server = builder.BuildAndStart();
  if (!impl_->server || port == 0)
    throw std::runtime_error("ext_proc: cannot listen on " + format_host_port(config.listen_host, config.listen_port));
  impl_->port = static_cast<uint16_t>(port);
  Impl* impl = impl_.get();
  gateway.registry().add_collector([impl](std::string& out) {
    PromWriter w(out);
    w.family("sluice_ext_proc_active_streams", "gauge", "Open ext_proc Process streams (one per HTTP request through the proxy).");
    w.sample("sluice_ext_proc_active_streams", "", static_cast<double>(impl->active.load()));
  });
}

ExtProcService::~ExtProcService() { stop(); }

uint16_t ExtProcService::port() const { return impl_->port; }

void ExtProcService::start() {
  spdlog::info("sluice ext_proc (Endpoint Picker) listening on grpc://{}", format_host_port(impl_->cfg.listen_host, impl_->port));
  // Health: liveness always serving; readiness and the ext_proc service name follow the
  // gateway's readiness (every pool has a healthy endpoint, not draining).
  Impl* impl = impl_.get();
  impl_->health_thread = std::thread([impl] {
    auto* health = impl->server->GetHealthCheckService();
    if (!health) return;
    health->SetServingStatus("liveness", true);
    while (!impl->stopping.load()) {
      const bool ready = impl->gw.ready();
      health->SetServingStatus("readiness", ready);
      health->SetServingStatus(std::string(epp::kServiceName), ready);
      health->SetServingStatus(ready);
      for (int i = 0; i < 10 && !impl->stopping.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
}

void ExtProcService::stop() {
  if (impl_->stopping.exchange(true)) return;
  if (impl_->health_thread.joinable()) impl_->health_thread.join();
  if (impl_->server) {
    impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    impl_->server->Wait();
  }
}

}  // namespace sluice
