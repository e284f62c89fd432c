/*
 * The ext_proc gRPC driver (see ext_proc_service.h): gRPC's asynchronous completion-queue API, one
 * completion queue per poller thread (`ext_proc.threads`, default 1), each polled by its own
 * thread; one conversation object per Process stream (Envoy opens one stream per HTTP request),
 * bound to one queue for its whole life: every read, write, finish and cancellation of a stream is
 * handled on that one thread, in order, with no lock and no hand-off. The thread that polls a
 * queue also does the socket I/O (gRPC's epoll poller runs in the thread that calls Next) and the
 * decision when it can be made at once (room in the admission layer: parse, admit, rank, dispatch
 * inline). Only a decision that must wait in the gateway queue runs on a gateway worker (the
 * queue's paired io_context); its answer comes back to the stream's queue through a grpc::Alarm.
 * (The callback API used before handed every message between gRPC's threads: ~43% of its CPU per
 * conversation was futex wake-ups and context switches; bench/results/ext_proc.txt.)
 *
 * Order (FULL_DUPLEX_STREAMED): request headers are answered only after the decision, at the end
 * of the request body (or at its trailers): HeadersResponse (destination header, Content-Length of
 * a rewritten body, envoy.lb dynamic metadata, clear_route_cache), then the body as
 * StreamedBodyResponse chunks (<= 1 MiB each, the last with end_of_stream), then the trailers
 * response. Response headers, each response body chunk (streamed back as it passes, the alias's
 * model name rewritten) and trailers are answered in order. A refusal is an ImmediateResponse.
 * When the response has ended (its last body chunk or its trailers) the last answer goes out with
 * the stream's OK status in one write (WriteAndFinish): nothing more is expected from the proxy.
 *
 * Bad clients: an empty message, a message out of order (a response before the request's end, a
 * body after the decision), a body mode other than FULL_DUPLEX_STREAMED announced in
 * protocol_config: counted in sluice_ext_proc_bad_messages_total{kind}, the request ends through
 * the completion path (rejected bad_http before the decision, client_cancelled after it) and the
 * stream is finished with INVALID_ARGUMENT / UNIMPLEMENTED. A stream that ends or is cancelled
 * before the response finished ends the request as client_cancelled (everything released).
 */
#include "extproc/ext_proc_service.h"

#include <atomic>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include <grpcpp/alarm.h>
#include <grpcpp/generic/async_generic_service.h>
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

struct Poller;

struct ExtProcService::Impl {
  Impl(Gateway& g, const ExtProcConfig& c, std::vector<boost::asio::any_io_executor> w)
      : gw(g), cfg(c), workers(std::move(w)),
        streams(g.registry().counter("sluice_ext_proc_streams_total",
                                     "ext_proc Process streams by how they ended (ok: finished cleanly; cancelled: "
                                     "the proxy cancelled or reset it; error: refused for bad input).",
                                     {"result"})),
        streams_ok(streams.with({"ok"})), streams_cancelled(streams.with({"cancelled"})), streams_error(streams.with({"error"})),
        bad(g.registry().counter("sluice_ext_proc_bad_messages_total",
                                 "ext_proc messages refused (the stream is finished with an error), by kind.", {"kind"})) {}

  Gateway& gw;
  const ExtProcConfig cfg;
  std::vector<boost::asio::any_io_executor> workers;
  pb::ExternalProcessor::AsyncService service;
  grpc::AsyncGenericService generic;  // grpc.health.v1.Health (HealthCall)
  std::vector<std::unique_ptr<Poller>> pollers;
  std::atomic<int64_t> active{0};
  std::atomic<int64_t> deciding{0};  // decisions running on a gateway worker (waiting in the queue)
  CounterFamily& streams;
  Counter &streams_ok, &streams_cancelled, &streams_error;  // resolved once: no family lock per stream
  CounterFamily& bad;
  std::unique_ptr<grpc::Server> server;
  uint16_t port = 0;
  std::atomic<bool> stopping{false};
  bool started = false;
};

// One completion queue and the thread that polls it; `worker` runs the decisions that must wait.
struct Poller {
  Poller(ExtProcService::Impl& s, std::unique_ptr<grpc::ServerCompletionQueue> q, boost::asio::any_io_executor w)
      : svc(s), cq(std::move(q)), worker(std::move(w)) {}
  ExtProcService::Impl& svc;
  std::unique_ptr<grpc::ServerCompletionQueue> cq;
  boost::asio::any_io_executor worker;
  std::thread thread;
  std::atomic<bool> closing{false};  // set before cq->Shutdown(): no new RequestProcess
  // Taken only on the queued-decision path (a worker hands the answer back): a late answer after
  // the queue closed is dropped instead of touching a shut-down queue.
  std::mutex wake_mu;
  bool closed = false;
  void run();
};

namespace {

constexpr int kPrePosted = 8;  // RequestProcess calls waiting per queue (new streams are matched at once)

// What a completion-queue tag points at: the call it belongs to and which of its operations ended.
class Handler {
 public:
  virtual ~Handler() = default;
  virtual void on(uint8_t op, bool ok) = 0;
};
struct Tag {
  Handler* handler;
  uint8_t op;
};

class Conversation final : public Handler {
 public:
  using Impl = ExtProcService::Impl;
  enum class Op : uint8_t { request, read, write, finish, done, wake };

  // Asks gRPC for the next Process stream on this poller's queue.
  explicit Conversation(Poller& home) : home_(home), svc_(home.svc), rw_(&ctx_) {
    ctx_.AsyncNotifyWhenDone(&t_done_);
    svc_.service.RequestProcess(&ctx_, &rw_, home_.cq.get(), home_.cq.get(), &t_request_);
  }
  ~Conversation() override {
    if (started_) svc_.active.fetch_sub(1, std::memory_order_relaxed);
  }

  void on(uint8_t raw_op, bool ok) override {
    switch (static_cast<Op>(raw_op)) {
      case Op::request:
        if (!ok) {  // the server is shutting down: this stream never started
          delete this;
          return;
        }
        if (!home_.closing.load(std::memory_order_relaxed)) new Conversation(home_);  // the next stream
        started_ = true;
        svc_.active.fetch_add(1, std::memory_order_relaxed);
        exchange_ = std::make_shared<EppExchange>(svc_.gw, svc_.cfg);
        start_read();
        break;
      case Op::read:
        reading_ = false;
        on_read(ok);
        break;
      case Op::write:
        writing_ = false;
        on_write(ok);
        break;
      case Op::finish:
        finish_pending_ = false;
        break;
      case Op::done:
        done_seen_ = true;
        if (ctx_.IsCancelled()) on_cancel();
        break;
      case Op::wake: {
        EppAnswer a;
        {
          std::lock_guard lock(home_.wake_mu);
          a = std::move(*answer_);
          answer_.reset();
          alarm_.reset();
        }
        svc_.deciding.fetch_sub(1, std::memory_order_relaxed);
        decided(std::move(a));
        break;
      }
    }
    if (done_seen_ && !reading_ && !writing_ && !finish_pending_ && !deciding_) {
      (cancelled_ || write_broken_ ? svc_.streams_cancelled : error_ ? svc_.streams_error : svc_.streams_ok).inc();
      delete this;
    }
  }

 private:
  enum class Phase { request_headers, request_body, deciding, request_done, response_body, response_done, immediate };

  void start_read() {
    reading_ = true;
    rw_.Read(&in_, &t_read_);
  }

  void on_read(bool ok) {
    if (!ok) {  // the proxy half-closed the stream, or it broke
      read_closed_ = true;
      if (deciding_) exchange_->cancel();
      else if (!exchange_->finished()) {
        exchange_->cancel();
        exchange_->stream_ended();
      }
      maybe_finish();
      return;
    }
    if (finishing_ || cancelled_) return;
    inline_ = true;
    try {
      handle();
    } catch (const std::exception& e) {  // never out of the poller: that would end the process
      deciding_ = false;
      refuse(Bad::invalid, e.what());
    }
    inline_ = false;
    // The next read: after this message unless a decision is pending (it reads on when made) or
    // the response has ended (nothing more comes: the stream finishes with the last answer).
    if (!deciding_ && !finishing_ && !error_ && phase_ != Phase::response_done) start_read();
    maybe_finish();
  }

  void on_write(bool ok) {
    if (!ok) {  // the proxy is gone
      write_broken_ = true;
      out_.clear();
      exchange_->cancel();
      if (!deciding_) exchange_->stream_ended();
    }
    pump();
    maybe_finish();
  }

  void on_cancel() {
    cancelled_ = true;
    exchange_->cancel();
    if (!deciding_) exchange_->stream_ended();
    out_.clear();
    maybe_finish();
  }

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
        pb::ProcessingResponse& resp = next_out();
        auto* mut = resp.mutable_response_headers()->mutable_response()->mutable_header_mutation();
        for (auto& [k, v] : r.set_headers) set_header(mut, k, v);
        for (auto& k : r.remove_headers) mut->add_remove_headers(std::move(k));
        phase_ = eos ? Phase::response_done : Phase::response_body;
        pump();
        return;
      }
      case pb::ProcessingRequest::kResponseBody: {
        if (phase_ != Phase::response_body) return refuse(Bad::out_of_order, "response_body outside the response body");
        served(m);
        const bool eos = m.response_body().end_of_stream();
        pb::ProcessingResponse& resp = next_out();
        auto* sr = resp.mutable_response_body()->mutable_response()->mutable_body_mutation()->mutable_streamed_response();
        exchange_->on_response_body(m.response_body().body(), eos, *sr->mutable_body());  // written in place
        sr->set_end_of_stream(eos);
        if (eos) phase_ = Phase::response_done;
        pump();
        return;
      }
      case pb::ProcessingRequest::kResponseTrailers: {
        if (phase_ != Phase::response_body) return refuse(Bad::out_of_order, "response_trailers outside the response");
        exchange_->on_response_trailers();
        next_out().mutable_response_trailers();
        phase_ = Phase::response_done;
        pump();
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
    body_eos_ = body_eos;
    trailers_ = trailers;
    no_body_ = no_body;
    // The callback runs on the worker when the decision had to wait; this stream is kept alive
    // by deciding_ until the answer has come back through the alarm.
    svc_.deciding.fetch_add(1, std::memory_order_relaxed);
    std::optional<EppAnswer> now;
    try {
      now = exchange_->decide(home_.worker, [this](EppAnswer a) { wake(std::move(a)); });
    } catch (...) {
      svc_.deciding.fetch_sub(1, std::memory_order_relaxed);
      throw;
    }
    if (now) {  // decided at once, on this thread
      svc_.deciding.fetch_sub(1, std::memory_order_relaxed);
      decided(std::move(*now));
    }
  }

  // On the gateway worker: hand the answer to this stream's own queue.
  void wake(EppAnswer a) {
    std::lock_guard lock(home_.wake_mu);
    if (home_.closed) {  // shutting down and the queue is gone: the process is exiting
      svc_.deciding.fetch_sub(1, std::memory_order_relaxed);
      return;
    }
    answer_.emplace(std::move(a));
    alarm_.emplace();
    alarm_->Set(home_.cq.get(), gpr_now(GPR_CLOCK_MONOTONIC), &t_wake_);
  }

  // The decision is made: at once, or later on a gateway worker (back on this thread by now).
  void decided(EppAnswer a) {
    deciding_ = false;
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
      pb::ProcessingResponse& h = next_out();
      auto* common = h.mutable_request_headers()->mutable_response();
      auto* mut = common->mutable_header_mutation();
      for (const auto& [k, v] : a.set_headers) set_header(mut, k, v);
      for (auto& k : a.remove_headers) mut->add_remove_headers(std::move(k));
      common->set_clear_route_cache(true);
      auto& lb = (*h.mutable_dynamic_metadata()->mutable_fields())[std::string(epp::kLbNamespace)];
      (*lb.mutable_struct_value()->mutable_fields())[std::string(epp::kDestinationHeader)].set_string_value(std::move(a.destination));
      if (!no_body_) {
        const std::string& body = a.body_replacement ? *a.body_replacement : exchange_->request_body();
        size_t at = 0;
        do {  // at least one message, even for an empty body
          const size_t n = std::min(kBodyChunk, body.size() - at);
          auto* sr = next_out().mutable_request_body()->mutable_response()->mutable_body_mutation()->mutable_streamed_response();
          sr->set_body(body.data() + at, n);
          at += n;
          sr->set_end_of_stream(body_eos_ && at == body.size());
        } while (at < body.size());
      }
      if (trailers_) next_out().mutable_request_trailers();
      phase_ = Phase::request_done;
      pump();
    }
    if (!inline_ && !finishing_ && !error_ && !reading_) start_read();  // decided on a worker: read on
    maybe_finish();
  }

  void send_immediate(EppAnswer a) {
    auto* im = next_out().mutable_immediate_response();
    im->mutable_status()->set_code(static_cast<envoy::type::v3::StatusCode>(a.status));
    for (const auto& [k, v] : a.reply_headers) set_header(im->mutable_headers(), k, v);
    im->set_body(std::move(a.body));
    im->set_details(std::move(a.details));
    phase_ = Phase::immediate;
    pump();
  }

  void refuse(Bad kind, std::string_view why, grpc::StatusCode code = grpc::StatusCode::INVALID_ARGUMENT) {
    svc_.bad.with({bad_name(kind)}).inc();
    spdlog::debug("ext_proc: refusing a stream: {}", why);
    exchange_->protocol_error();
    error_ = true;
    status_ = grpc::Status(code, std::string(why));
  }

  // A new answer at the back of the queue, built in place (pump() sends it).
  pb::ProcessingResponse& next_out() { return out_.emplace_back(); }

  void pump() {
    if (writing_ || finishing_ || write_broken_ || cancelled_) {
      if (write_broken_ || cancelled_) out_.clear();
      return;
    }
    if (out_.empty()) return;
    current_ = std::move(out_.front());
    out_.pop_front();
    // No buffer hint for the answers queued behind this one: gRPC holds a hinted write's
    // completion until something flushes the connection, and the next write waits for that
    // completion (a stream alone on its connection then stalls).
    grpc::WriteOptions options;
    if (out_.empty() && phase_ == Phase::response_done && !reading_ && !deciding_ && !error_) {
      // The response's last answer: with the status, in one write.
      finishing_ = true;
      finish_pending_ = true;
      rw_.WriteAndFinish(current_, options, grpc::Status::OK, &t_finish_);
      return;
    }
    writing_ = true;
    rw_.Write(current_, options, &t_write_);
  }

  // Finish once nothing is pending: on an error, or when the proxy closed its side and every
  // answer is written. A cancelled stream is not finished (gRPC has ended it).
  void maybe_finish() {
    if (finishing_ || deciding_ || writing_ || reading_) return;
    if (cancelled_) {
      finishing_ = true;
      if (!exchange_->finished()) exchange_->stream_ended();
      return;
    }
    const bool drained = out_.empty() || write_broken_;
    if (!drained) return;
    if (error_ || read_closed_ || write_broken_ || phase_ == Phase::response_done) {
      finishing_ = true;
      if (!exchange_->finished()) exchange_->stream_ended();
      finish_pending_ = true;
      rw_.Finish(error_ ? status_ : grpc::Status::OK, &t_finish_);
    }
  }

  Poller& home_;
  Impl& svc_;
  grpc::ServerContext ctx_;
  grpc::ServerAsyncReaderWriter<pb::ProcessingResponse, pb::ProcessingRequest> rw_;
  static constexpr uint8_t op(Op o) { return static_cast<uint8_t>(o); }
  Tag t_request_{this, op(Op::request)}, t_read_{this, op(Op::read)}, t_write_{this, op(Op::write)},
      t_finish_{this, op(Op::finish)}, t_done_{this, op(Op::done)}, t_wake_{this, op(Op::wake)};
  std::shared_ptr<EppExchange> exchange_;
  pb::ProcessingRequest in_;
  pb::ProcessingResponse current_;
  std::deque<pb::ProcessingResponse> out_;
  Phase phase_ = Phase::request_headers;
  grpc::Status status_;
  std::optional<EppAnswer> answer_;  // from the worker (under home_.wake_mu)
  std::optional<grpc::Alarm> alarm_;
  bool body_eos_ = false, trailers_ = false, no_body_ = false;
  bool started_ = false, reading_ = false, writing_ = false, finish_pending_ = false, done_seen_ = false;
  bool deciding_ = false, finishing_ = false, inline_ = false;
  bool read_closed_ = false, write_broken_ = false, cancelled_ = false, error_ = false;
};


// grpc.health.v1.Health on the same completion queues (Check and Watch), through gRPC's async
// generic service: gRPC's default health service uses the callback API, whose own polling threads
// ("nexting" threads) took part in every stream's I/O and cost ~75 us of CPU per ext_proc
// conversation in hand-offs. The two messages have one field each (HealthCheckRequest.service = 1,
// a string; HealthCheckResponse.status = 1, an enum), encoded here by hand rather than generating
// grpc's health.proto into another translation unit. Statuses: "liveness" always SERVING;
// "readiness", "" and the ext_proc service name follow the gateway's readiness; another name is
// NOT_FOUND (Check) or SERVICE_UNKNOWN (Watch). Any other method of the generic service is
// UNIMPLEMENTED. Watch sends the status at once and again when it changes (checked every 200 ms).
class HealthCall final : public Handler {
 public:
  enum Op : uint8_t { request, read, write, finish, done, tick };
  explicit HealthCall(Poller& home) : home_(home), rw_(&ctx_) {
    ctx_.AsyncNotifyWhenDone(&t_done_);
    home_.svc.generic.RequestCall(&ctx_, &rw_, home_.cq.get(), home_.cq.get(), &t_request_);
  }

  void on(uint8_t op, bool ok) override {
    pending_ &= ~(1u << op);
    switch (op) {
      case request:
        if (!ok) {
          delete this;
          return;
        }
        if (!home_.closing.load(std::memory_order_relaxed)) new HealthCall(home_);
        started_ = true;
        if (ctx_.method() != "/grpc.health.v1.Health/Check" && ctx_.method() != "/grpc.health.v1.Health/Watch") {
          end_with(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "unknown method " + ctx_.method()));
          break;
        }
        watch_ = ctx_.method() == "/grpc.health.v1.Health/Watch";
        start(read);
        rw_.Read(&buf_, &t_read_);
        break;
      case read:
        if (!ok) {
          end_with(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no HealthCheckRequest"));
          break;
        }
        if (!parse_service()) {
          end_with(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a malformed HealthCheckRequest"));
          break;
        }
        if (!watch_) {
          const int st = status();
          if (st == kUnknown) end_with(grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service"));
          else {
            response(st);
            start(finish);
            rw_.WriteAndFinish(out_, grpc::WriteOptions(), grpc::Status::OK, &t_finish_);
            finishing_ = true;
          }
          break;
        }
        last_ = status();
        response(last_);
        start(write);
        rw_.Write(out_, &t_write_);
        break;
      case write:
        if (!ok || cancelled_) break;
        arm();
        break;
      case tick:
        alarm_.reset();
        if (!ok || cancelled_ || home_.closing.load(std::memory_order_relaxed)) {
          if (!cancelled_ && !finishing_) end_with(grpc::Status::OK);
          break;
        }
        if (const int st = status(); st != last_) {
          last_ = st;
          response(st);
          start(write);
          rw_.Write(out_, &t_write_);
        } else {
          arm();
        }
        break;
      case finish:
        break;
      case done:
        done_ = true;
        cancelled_ = ctx_.IsCancelled();
        if (alarm_) alarm_->Cancel();
        break;
    }
    if (done_ && pending_ == 0) delete this;
  }

 private:
  static constexpr int kServing = 1, kNotServing = 2, kUnknown = 3;

  void start(uint8_t op) { pending_ |= 1u << op; }
  void end_with(const grpc::Status& st) {
    finishing_ = true;
    start(finish);
    rw_.Finish(st, &t_finish_);
  }
  void arm() {
    alarm_.emplace();
    start(tick);
    alarm_->Set(home_.cq.get(), std::chrono::system_clock::now() + std::chrono::milliseconds(200), &t_tick_);
  }
  int status() const {
    if (service_ == "liveness") return kServing;
    if (service_.empty() || service_ == "readiness" || service_ == epp::kServiceName)
      return home_.svc.gw.ready() && !home_.svc.stopping.load() ? kServing : kNotServing;
    return kUnknown;
  }
  // HealthCheckRequest: field 1 (length-delimited) is the service; other fields are skipped.
  bool parse_service() {
    grpc::Slice slice;
    if (!buf_.DumpToSingleSlice(&slice).ok()) return false;
    const auto* p = slice.begin();
    const auto* end = slice.end();
    auto varint = [&](uint64_t& v) {
      v = 0;
      for (int shift = 0; p < end && shift < 64; shift += 7) {
        const uint8_t b = *p++;
        v |= static_cast<uint64_t>(b & 0x7f) << shift;
        if (!(b & 0x80)) return true;
      }
      return false;
    };
    while (p < end) {
      uint64_t key = 0, v = 0;
      if (!varint(key)) return false;
      switch (key & 7) {
        case 0: if (!varint(v)) return false; break;
        case 1: if (end - p < 8) return false; p += 8; break;
        case 5: if (end - p < 4) return false; p += 4; break;
        case 2:
          if (!varint(v) || v > static_cast<uint64_t>(end - p)) return false;
          if ((key >> 3) == 1) service_.assign(reinterpret_cast<const char*>(p), v);
          p += v;
          break;
        default: return false;
      }
    }
    return true;
  }
  // HealthCheckResponse{status}: field 1, varint.
  void response(int st) {
    const char bytes[2] = {0x08, static_cast<char>(st)};
    grpc::Slice slice(bytes, sizeof bytes);
    out_ = grpc::ByteBuffer(&slice, 1);
  }

  Poller& home_;
  grpc::GenericServerContext ctx_;
  grpc::GenericServerAsyncReaderWriter rw_;
  Tag t_request_{this, request}, t_read_{this, read}, t_write_{this, write}, t_finish_{this, finish}, t_done_{this, done},
      t_tick_{this, tick};
  grpc::ByteBuffer buf_, out_;
  std::string service_;
  std::optional<grpc::Alarm> alarm_;
  uint32_t pending_ = 0;  // one bit per operation in flight
  int last_ = 0;
  bool started_ = false, watch_ = false, done_ = false, cancelled_ = false, finishing_ = false;
};

}  // namespace

void Poller::run() {
  void* tag = nullptr;
  bool ok = false;
  while (cq->Next(&tag, &ok)) {
    auto* t = static_cast<Tag*>(tag);
    t->handler->on(t->op, ok);
  }
}

ExtProcService::ExtProcService(Gateway& gateway, const ExtProcConfig& config,
                               std::vector<boost::asio::any_io_executor> workers)
    : impl_(std::make_unique<Impl>(gateway, config, std::move(workers))) {
  grpc::EnableDefaultHealthCheckService(false);  // ours: HealthCall, on the same queues
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(format_host_port(config.listen_host, config.listen_port), grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // No bandwidth-delay probes: they add a PING and its ACK to the connection as data arrives,
  // for window sizing that picker messages (a few KiB) never need.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  builder.RegisterService(&impl_->service);
  builder.RegisterAsyncGenericService(&impl_->generic);
  const size_t n = static_cast<size_t>(std::max(1, config.threads));
  for (size_t i = 0; i < n; ++i) {
    impl_->pollers.push_back(std::make_unique<Poller>(*impl_, builder.AddCompletionQueue(), impl_->workers[i % impl_->workers.size()]));
  }
  impl_->server = builder.BuildAndStart();
  if (!impl_->server || port == 0) {
    for (auto& p : impl_->pollers) p->cq->Shutdown();
    for (auto& p : impl_->pollers) p->run();
    throw std::runtime_error("ext_proc: cannot listen on " + format_host_port(config.listen_host, config.listen_port));
  }
  impl_->port = static_cast<uint16_t>(port);
  for (auto& p : impl_->pollers) {
    for (int i = 0; i < kPrePosted; ++i) new Conversation(*p);
    new HealthCall(*p);
  }
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
  // (Tests and scripts read the port at the end of this line.)
  spdlog::info("sluice ext_proc (Endpoint Picker) with {} poller thread{}", impl_->pollers.size(), impl_->pollers.size() == 1 ? "" : "s");
  spdlog::info("sluice ext_proc (Endpoint Picker) listening on grpc://{}", format_host_port(impl_->cfg.listen_host, impl_->port));
  Impl* impl = impl_.get();
  impl->started = true;
  for (auto& p : impl->pollers) p->thread = std::thread([p = p.get()] { p->run(); });
}

void ExtProcService::stop() {
  Impl& s = *impl_;
  if (s.stopping.exchange(true)) return;
  for (auto& p : s.pollers) p->closing = true;
  // Ends every stream (the pollers still run: cancellations reach the conversations, and a
  // decision waiting in the gateway queue is cancelled and answers through its alarm).
  if (s.server) s.server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  for (int i = 0; i < 200 && s.deciding.load() > 0 && s.started; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  for (auto& p : s.pollers) {
    std::lock_guard lock(p->wake_mu);
    p->closed = true;
  }
  for (auto& p : s.pollers) p->cq->Shutdown();
  for (auto& p : s.pollers) {
    if (p->thread.joinable()) p->thread.join();
    else p->run();  // never started: drain here
  }
}

}  // namespace sluice
