#include "sim/replica.h"

#include <simdjson.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "sim/openai_format.h"
#include "sim/replica_internal.h"

namespace sluice::sim {

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

Replica::Replica(asio::io_context& io, ReplicaConfig cfg)
    : io_(io),
      cfg_(std::move(cfg)),
      engine_(cfg_.engine),
      acceptor_(io),
      step_timer_(io),
      idle_timer_(io),
      epoch_(std::chrono::steady_clock::now()),
      created_unix_(std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count()),
      rng_(cfg_.seed),
      adapters_(cfg_.adapters),
      faults_(cfg_.faults) {}

Replica::~Replica() = default;

Time Replica::now() const {
  const auto real = std::chrono::steady_clock::now() - epoch_;
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double, std::nano>(real) * cfg_.time_scale);
}

std::chrono::steady_clock::duration Replica::real(Duration engine_time) const {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double, std::nano>(engine_time) / cfg_.time_scale);
}

std::optional<std::string> Replica::listen() {
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(cfg_.host, ec);
  if (ec) return "invalid host '" + cfg_.host + "'";
  tcp::endpoint ep(addr, cfg_.port);
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return "cannot listen on " + cfg_.host + ":" + std::to_string(cfg_.port) + ": " + ec.message();
  port_ = acceptor_.local_endpoint().port();
  if (cfg_.kv_events.enabled) {
    kv_ = std::make_unique<KvPublisher>(io_, cfg_.kv_events, cfg_.index);
    if (auto err = kv_->open()) return *err;
    engine_.enable_kv_events(true);
  }
  return std::nullopt;
}

void Replica::publish_kv_events() {
  if (kv_) kv_->publish(engine_.take_kv_events());
}

void Replica::start() {
  asio::co_spawn(io_, accept_loop(), asio::detached);
  asio::co_spawn(io_, step_loop(), asio::detached);
  if (cfg_.exit_after_s > 0) {
    auto t = std::make_shared<asio::steady_timer>(io_);
    t->expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(cfg_.exit_after_s)));
    t->async_wait([this, t](boost::system::error_code ec) {
      if (!ec) {
        spdlog::warn("replica {}: exit fault after {} s", cfg_.index, cfg_.exit_after_s);
        stop();
      }
    });
  }
}

void Replica::stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  for (Connection* c : connections_) c->sock.close(ec);
  for (auto& [id, st] : streams_) {
    engine_.abort(id, now());
    st->client_gone = true;
    st->notify();
  }
  step_timer_.cancel();
  idle_timer_.cancel();
  if (kv_) kv_->close();
}

void Replica::wake_step_loop() {
  if (idle_) idle_timer_.cancel();
}

asio::awaitable<void> Replica::accept_loop() {
  while (!stopped_) {
    auto [ec, sock] = co_await acceptor_.async_accept(tuple_awaitable);
    if (ec) {
      if (stopped_ || ec == asio::error::operation_aborted) co_return;
      // Out of file descriptors and the like: back off briefly instead of spinning.
      asio::steady_timer t(io_);
      t.expires_after(std::chrono::milliseconds(50));
      co_await t.async_wait(tuple_awaitable);
      continue;
    }
    sock.set_option(tcp::no_delay(true), ec);
    asio::co_spawn(io_, session(std::move(sock)), asio::detached);
  }
}

// Steps follow the cost model's schedule: a step starts where the previous one was planned to end
// and its timer fires at an absolute deadline, so a late wake-up (a loaded machine) is caught up
// by the next steps instead of stretching every inter-token latency. After an idle period, or when
// more than kMaxLag behind, the schedule restarts from the current time.
asio::awaitable<void> Replica::step_loop() {
  const Duration kMaxLag = std::chrono::milliseconds(50);
  Time planned_end = now();
  while (!stopped_) {
    const Time t_now = now();
    const bool restart = t_now - planned_end > kMaxLag;
    const Time t_start = restart ? t_now : std::max(planned_end, Time{0});
    if (restart && engine_.has_work()) lag_dropped_ += t_now - planned_end;
    std::optional<Duration> d;
    if (engine_.has_work()) d = engine_.begin_step(std::min(t_start, t_now));
    if (!d) {
      // Idle (or blocked): sleep until a submit wakes us; poll slowly if work is blocked.
      idle_ = true;
      if (engine_.has_work()) idle_timer_.expires_after(std::chrono::milliseconds(5));
      else idle_timer_.expires_at(asio::steady_timer::time_point::max());
      co_await idle_timer_.async_wait(tuple_awaitable);
      idle_ = false;
      planned_end = now();
      continue;
    }
    planned_end = std::min(t_start, t_now) + *d;
    step_timer_.expires_at(epoch_ + real(planned_end));
    co_await step_timer_.async_wait(tuple_awaitable);
    if (stopped_) co_return;
    dispatch(engine_.end_step(planned_end));
    publish_kv_events();  // the step's evictions (begin) and stores (end), in order
    duty_.record(planned_end, engine_.busy_time(planned_end));
  }
}

void Replica::dispatch(const engine::StepResult& r) {
  for (const auto& o : r.outputs) {
    auto it = streams_.find(o.id);
    if (it == streams_.end()) continue;
    Stream& st = *it->second;
    Stream::Choice& ch = st.choice(o.id);
    if (o.new_tokens > 0) ch.pending.push_back(o.token);
    if (o.id == st.first_id) {  // n > 1: the prompt is counted once, as vLLM does
      st.prompt_tokens = o.prompt_tokens;
      st.cached_tokens = o.cached_tokens;
    }
    ch.output_tokens = o.output_tokens;
    if (o.finished) ch.finished = o.finished;
    st.notify();
  }
}

std::string Replica::metrics_text() {
  const Time t = now();
  const auto stats = engine_.stats(t);
  if (cfg_.engine.max_loras > 0) {
    auto join = [](const std::vector<std::string>& v) {
      std::string s;
      for (const auto& a : v) s += (s.empty() ? "" : ",") + a;
      return s;
    };
    const double unix_now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    lora_info_.update(join(stats.running_adapters), join(stats.waiting_adapters), unix_now);
  }
  MetricsInput in;
  in.stats = &stats;
  in.model_name = cfg_.model_name;
  in.gpu_index = cfg_.index;
  in.block_size = cfg_.engine.block_size;
  in.prefix_caching = cfg_.engine.prefix_caching && !cfg_.engine.embedding;
  in.max_loras = cfg_.engine.max_loras;
  in.lora = &lora_info_;
  in.duty_cycle = duty_.fraction(t, stats.busy_time);
  in.lag_dropped_s = to_seconds(lag_dropped_);
  return render_metrics(cfg_.metrics_flavor, in);
}

std::pair<int, std::string> Replica::handle_lora(bool load, const std::string& body) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  std::string_view name;
  if (parser.parse(body).get(doc) || doc["lora_name"].get_string().get(name) || name.empty())
    return {400, error_body("lora_name is required", "BadRequestError", 400)};
  const std::string n(name);
  auto it = std::find(adapters_.begin(), adapters_.end(), n);
  if (load) {
    if (cfg_.engine.max_loras == 0)
      return {400, error_body("LoRA is not enabled (start the simulator with --max-loras > 0).", "BadRequestError", 400)};
    if (n == cfg_.model_name || it != adapters_.end())
      return {400, error_body("The lora adapter '" + n + "' has already been loaded.", "BadRequestError", 400)};
    adapters_.push_back(n);
    return {200, "Success: LoRA adapter '" + n + "' added successfully."};
  }
  if (it == adapters_.end())
    return {404, error_body("The lora adapter '" + n + "' cannot be found.", "NotFoundError", 404)};
  adapters_.erase(it);
  engine_.unload_adapter(n);
  return {200, "Success: LoRA adapter '" + n + "' removed successfully."};
}

}  // namespace sluice::sim
