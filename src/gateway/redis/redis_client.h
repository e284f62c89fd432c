/*
 * A small asynchronous Redis client on the gateway's own io_contexts: one connection per worker
 * io_context (reused by every request on that thread, so calls from one thread pipeline on one
 * socket and never take a lock), created on the first call from that thread.
 *
 * What is hiredis and what is written here. Commands are encoded by hiredis
 * (redisFormatCommandArgv) and replies decoded by hiredis's RESP reader (redisReader), the
 * maintained protocol code from Debian. The transport is an Asio socket (TCP or unix) driven by
 * this file, not hiredis's redisAsyncContext: its event hooks would need an adapter that calls
 * back into hiredis from Asio handlers (with hiredis's re-entrancy rules on disconnect and free),
 * while the gateway needs Asio's own things on this path anyway -- a per-call deadline on a
 * steady_timer, the connection bound to the calling io_context, and coroutines. Owning the socket
 * keeps those in one place; hiredis keeps the protocol.
 *
 * Pipelining: a call appends its command to the connection's output buffer and waits for its
 * reply; replies come back in order (FIFO of pending calls); writes coalesce while one is in
 * flight. Failure: a call that gets no reply within `timeout` fails with `timeout`, and the
 * connection is dropped (a late reply would misalign the FIFO): every pending call fails, the next
 * call reconnects after a short backoff (calls inside the backoff fail at once, `unavailable`). A
 * reply the reader cannot parse (garbage, a non-Redis peer) fails the connection the same way
 * (`protocol`). Nothing throws; every failure is a value the caller counts.
 * On connect, SCRIPT LOAD of the shared bucket script is pipelined first (EVALSHA needs it; a
 * NOSCRIPT reply reloads it).
 *
 * Lifetime: the connections belong to an io_context service, so they die with their io_context;
 * the client drops its connections (on their own threads) when it is destroyed first.
 */
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "core/time.h"

namespace sluice {

struct RedisTarget {
  std::string host;       // TCP host, or
  uint16_t port = 6379;
  std::string unix_path;  // a unix socket
  Duration timeout = std::chrono::milliseconds(100);
  Duration backoff = std::chrono::milliseconds(200);
};

struct RedisReply {
  enum class Status : uint8_t { ok, error_reply, timeout, io, protocol, unavailable };
  Status status = Status::ok;
  bool integers = false;        // the reply was an array of integers (in `values`)
  std::vector<int64_t> values;
  std::string text;             // error text, or a string/status reply
  bool ok() const { return status == Status::ok; }
};
std::string_view to_string(RedisReply::Status s);

// Counts kept by the client (read by the metrics layer).
struct RedisClientStats {
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> failures[6]{};  // by Status
  std::atomic<uint64_t> connects{0};
  std::atomic<uint64_t> script_loads{0};
};

class RedisClient {
 public:
  explicit RedisClient(RedisTarget target);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // One command on the calling executor's connection. Must be awaited on that executor.
  // timeout 0 = the target's.
  boost::asio::awaitable<RedisReply> call(const std::vector<std::string>& argv, Duration timeout = Duration::zero());

  const RedisClientStats& stats() const { return *stats_; }
  const RedisTarget& target() const { return target_; }

  class Connection;

 private:
  std::shared_ptr<Connection> connection_for(const boost::asio::any_io_executor& ex);

  const RedisTarget target_;
  const uint64_t id_;
  std::shared_ptr<RedisClientStats> stats_;
  std::mutex mu_;  // guards conns_ (taken when a thread first calls, and at destruction)
  std::vector<std::weak_ptr<Connection>> conns_;
};

}  // namespace sluice
