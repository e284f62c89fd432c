#include "gateway/redis/redis_client.h"

#include <hiredis/hiredis.h>

#include <deque>
#include <map>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include "core/admission/shared_bucket_script.h"

namespace sluice {

namespace asio = boost::asio;
using Status = RedisReply::Status;

std::string_view to_string(RedisReply::Status s) {
  switch (s) {
    case Status::ok: return "ok";
    case Status::error_reply: return "error_reply";
    case Status::timeout: return "timeout";
    case Status::io: return "io";
    case Status::protocol: return "protocol";
    case Status::unavailable: return "unavailable";
  }
  return "unknown";
}

namespace {

std::atomic<uint64_t> next_client_id{1};

std::string format_command(const std::vector<std::string>& argv) {
  std::vector<const char*> ptrs;
  std::vector<size_t> lens;
  ptrs.reserve(argv.size());
  lens.reserve(argv.size());
  for (const auto& a : argv) {
    ptrs.push_back(a.data());
    lens.push_back(a.size());
  }
  char* cmd = nullptr;
  const int n = redisFormatCommandArgv(&cmd, static_cast<int>(argv.size()), ptrs.data(), lens.data());
  if (n < 0 || cmd == nullptr) return {};
  std::string out(cmd, static_cast<size_t>(n));
  redisFreeCommand(cmd);
  return out;
}

RedisReply convert(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_ERROR:
      out.status = Status::error_reply;
      out.text.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS: out.text.assign(r->str, r->len); break;
    case REDIS_REPLY_INTEGER:
      out.integers = true;
      out.values.push_back(r->integer);
      break;
    case REDIS_REPLY_ARRAY:
      out.integers = true;
      for (size_t i = 0; i < r->elements; ++i) {
        if (r->element[i]->type != REDIS_REPLY_INTEGER) {
          out.integers = false;
          out.values.clear();
          break;
        }
        out.values.push_back(r->element[i]->integer);
      }
      break;
    default: break;
  }
  return out;
}

}  // namespace

// ---- one connection, bound to one io_context ------------------------------------------------
class RedisClient::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(asio::any_io_executor ex, const RedisTarget& target, std::shared_ptr<RedisClientStats> stats)
      : ex_(std::move(ex)), target_(target), stats_holder_(std::move(stats)), stats_(*stats_holder_), sock_(ex_) {}
  ~Connection() {
    if (reader_) redisReaderFree(reader_);
  }
  const asio::any_io_executor& executor() const { return ex_; }

  asio::awaitable<RedisReply> call(std::string cmd, Duration timeout) {
    auto self = shared_from_this();
    stats_.calls.fetch_add(1, std::memory_order_relaxed);
    if (cmd.empty()) co_return fail_one(Status::protocol, "command could not be encoded");
    if (state_ == State::failed) {
      if (std::chrono::steady_clock::now() < retry_at_) co_return fail_one(Status::unavailable, "reconnect backoff after: " + last_error_);
      state_ = State::idle;
    }
    if (state_ == State::idle) begin_connect();
    auto p = std::make_shared<Pending>();
    pending_.push_back(p);
    out_ += cmd;
    start_write();
    asio::steady_timer timer(ex_, timeout > Duration::zero() ? timeout : target_.timeout);
    p->timer = &timer;
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    p->timer = nullptr;
    if (!p->done) {
      reset(Status::timeout, "no reply within the deadline");
      // reset completed p too (its timer pointer was already cleared)
    }
    if (p->reply.status != Status::ok) stats_.failures[static_cast<size_t>(p->reply.status)].fetch_add(1, std::memory_order_relaxed);
    co_return std::move(p->reply);
  }

  void close() { reset(Status::unavailable, "client closed"); }

 private:
  enum class State { idle, connecting, ready, failed };
  struct Pending {
    RedisReply reply;
    bool done = false;
    bool script_load = false;
    asio::steady_timer* timer = nullptr;
  };

  RedisReply fail_one(Status s, std::string why) {
    stats_.failures[static_cast<size_t>(s)].fetch_add(1, std::memory_order_relaxed);
    RedisReply r;
    r.status = s;
    r.text = std::move(why);
    return r;
  }

  void queue_script_load() {
    auto p = std::make_shared<Pending>();
    p->script_load = true;
    pending_.push_back(p);
    out_ += format_command({"SCRIPT", "LOAD", std::string(shared_bucket_script())});
    stats_.script_loads.fetch_add(1, std::memory_order_relaxed);
  }

  void begin_connect() {
    state_ = State::connecting;
    const uint64_t epoch = ++epoch_;
    queue_script_load();  // the first command on every connection
    stats_.connects.fetch_add(1, std::memory_order_relaxed);
    asio::co_spawn(ex_, connect_and_read(shared_from_this(), epoch), asio::detached);
  }

  static asio::awaitable<void> connect_and_read(std::shared_ptr<Connection> self, uint64_t epoch) {
    boost::system::error_code ec;
    asio::steady_timer deadline(self->ex_, self->target_.timeout);
    deadline.async_wait([w = std::weak_ptr<Connection>(self), epoch](const boost::system::error_code& e) {
      auto c = w.lock();
      if (!e && c && c->epoch_ == epoch && c->state_ == State::connecting) c->reset(Status::timeout, "connect timed out");
    });
    if (!self->target_.unix_path.empty()) {
      asio::local::stream_protocol::endpoint ep(self->target_.unix_path);
      std::tie(ec) = co_await self->sock_.async_connect(ep, asio::as_tuple(asio::use_awaitable));
    } else {
      asio::ip::tcp::resolver resolver(self->ex_);
      auto [rec, results] = co_await resolver.async_resolve(self->target_.host, std::to_string(self->target_.port),
                                                           asio::as_tuple(asio::use_awaitable));
      ec = rec;
      if (!ec && self->epoch_ == epoch) {
        ec = asio::error::host_not_found;
        for (const auto& r : results) {
          self->sock_.close();
          std::tie(ec) = co_await self->sock_.async_connect(r.endpoint(), asio::as_tuple(asio::use_awaitable));
          if (!ec || self->epoch_ != epoch) break;
        }
      }
    }
    deadline.cancel();
    if (self->epoch_ != epoch) co_return;  // timed out or closed meanwhile
    if (ec) {
      self->reset(Status::io, "connect: " + ec.message());
      co_return;
    }
    if (self->target_.unix_path.empty()) {
      boost::system::error_code ignored;
      self->sock_.set_option(asio::ip::tcp::no_delay(true), ignored);
    }
    self->state_ = State::ready;
    if (self->reader_) redisReaderFree(self->reader_);
    self->reader_ = redisReaderCreate();
    self->start_write();
    std::array<char, 16384> buf;
    while (self->epoch_ == epoch) {
      auto [rec, n] = co_await self->sock_.async_read_some(asio::buffer(buf), asio::as_tuple(asio::use_awaitable));
      if (self->epoch_ != epoch) co_return;
      if (rec) {
        self->reset(Status::io, "read: " + rec.message());
        co_return;
      }
      if (redisReaderFeed(self->reader_, buf.data(), n) != REDIS_OK) {
        self->reset(Status::protocol, "reader: feed failed");
        co_return;
      }
      for (;;) {
        void* raw = nullptr;
        if (redisReaderGetReply(self->reader_, &raw) != REDIS_OK) {
          self->reset(Status::protocol, std::string("unparseable reply: ") + self->reader_->errstr);
          co_return;
        }
        if (raw == nullptr) break;
        auto* reply = static_cast<redisReply*>(raw);
        const bool delivered = self->deliver(convert(reply));
        freeReplyObject(reply);
        if (!delivered) {
          self->reset(Status::protocol, "a reply nobody asked for");
          co_return;
        }
      }
    }
  }

  bool deliver(RedisReply r) {
    if (pending_.empty()) return false;
    auto p = std::move(pending_.front());
    pending_.pop_front();
    if (p->script_load) {
      if (!r.ok() || r.text != shared_bucket_script_sha1())
        spdlog::warn("redis: SCRIPT LOAD answered '{}' (expected the script's SHA-1)", r.text.substr(0, 120));
      return true;
    }
    if (r.status == Status::error_reply && r.text.rfind("NOSCRIPT", 0) == 0) {
      queue_script_load();  // flushed by someone: load it again for the next calls
      start_write();
    }
    p->reply = std::move(r);
    p->done = true;
    if (p->timer) p->timer->cancel();
    return true;
  }

  void start_write() {
    if (state_ != State::ready || writing_ || out_.empty()) return;
    writing_ = true;
    wbuf_.swap(out_);
    out_.clear();
    asio::async_write(sock_, asio::buffer(wbuf_),
                      [self = shared_from_this(), epoch = epoch_](const boost::system::error_code& ec, size_t) {
                        if (self->epoch_ != epoch) return;
                        self->writing_ = false;
                        self->wbuf_.clear();
                        if (ec) {
                          self->reset(Status::io, "write: " + ec.message());
                          return;
                        }
                        self->start_write();
                      });
  }

  // Drops the connection: every pending call fails with `s`; the next call reconnects after the backoff.
  void reset(Status s, const std::string& why) {
    ++epoch_;
    if (state_ != State::failed || !pending_.empty())
      spdlog::debug("redis: connection to {} dropped: {}", target_.unix_path.empty() ? target_.host : target_.unix_path, why);
    last_error_ = why;
    state_ = State::failed;
    retry_at_ = std::chrono::steady_clock::now() + target_.backoff;
    boost::system::error_code ignored;
    sock_.close(ignored);
    sock_ = asio::generic::stream_protocol::socket(ex_);
    writing_ = false;
    out_.clear();
    wbuf_.clear();
    auto pending = std::move(pending_);
    pending_.clear();
    for (auto& p : pending) {
      if (p->script_load) continue;
      p->reply = RedisReply{};
      p->reply.status = s;
      p->reply.text = why;
      p->done = true;
      if (p->timer) p->timer->cancel();
    }
  }

  asio::any_io_executor ex_;
  const RedisTarget target_;
  std::shared_ptr<RedisClientStats> stats_holder_;
  RedisClientStats& stats_;
  asio::generic::stream_protocol::socket sock_;
  redisReader* reader_ = nullptr;
  State state_ = State::idle;
  uint64_t epoch_ = 0;
  std::deque<std::shared_ptr<Pending>> pending_;
  std::string out_, wbuf_;
  bool writing_ = false;
  std::chrono::steady_clock::time_point retry_at_{};
  std::string last_error_;
};

namespace {

// Owns the connections of one io_context, so they are destroyed with it (a socket must not
// outlive its io_context).
class ConnectionService : public asio::execution_context::service {
 public:
  using key_type = ConnectionService;
  static inline asio::execution_context::id id;
  explicit ConnectionService(asio::execution_context& ctx) : asio::execution_context::service(ctx) {}
  void shutdown() override {
    std::lock_guard lock(mu_);
    conns_.clear();
  }
  void add(uint64_t client, std::shared_ptr<RedisClient::Connection> c) {
    std::lock_guard lock(mu_);
    conns_[client] = std::move(c);
  }
  void remove(uint64_t client) {
    std::lock_guard lock(mu_);
    conns_.erase(client);
  }

 private:
  std::mutex mu_;  // taken once per thread per client (creation) and at shutdown
  std::map<uint64_t, std::shared_ptr<RedisClient::Connection>> conns_;
};

struct ThreadConn {
  uint64_t client;
  std::weak_ptr<RedisClient::Connection> conn;
};
thread_local std::vector<ThreadConn> t_conns;

}  // namespace

RedisClient::RedisClient(RedisTarget target)
    : target_(std::move(target)), id_(next_client_id.fetch_add(1)), stats_(std::make_shared<RedisClientStats>()) {}

RedisClient::~RedisClient() {
  std::lock_guard lock(mu_);
  for (auto& w : conns_)
    if (auto c = w.lock()) {
      const uint64_t id = id_;
      asio::post(c->executor(), [c, id] {
        c->close();
        asio::use_service<ConnectionService>(asio::query(c->executor(), asio::execution::context)).remove(id);
      });
    }
}

std::shared_ptr<RedisClient::Connection> RedisClient::connection_for(const asio::any_io_executor& ex) {
  for (auto it = t_conns.begin(); it != t_conns.end();) {
    if (it->client == id_) {
      if (auto c = it->conn.lock()) return c;
      it = t_conns.erase(it);
      continue;
    }
    if (it->conn.expired()) {
      it = t_conns.erase(it);
      continue;
    }
    ++it;
  }
  auto c = std::make_shared<Connection>(ex, target_, stats_);
  asio::use_service<ConnectionService>(asio::query(ex, asio::execution::context)).add(id_, c);
  {
    std::lock_guard lock(mu_);
    conns_.push_back(c);
  }
  t_conns.push_back({id_, c});
  return c;
}

asio::awaitable<RedisReply> RedisClient::call(const std::vector<std::string>& argv, Duration timeout) {
  auto ex = co_await asio::this_coro::executor;
  auto conn = connection_for(ex);
  co_return co_await conn->call(format_command(argv), timeout);
}

}  // namespace sluice
