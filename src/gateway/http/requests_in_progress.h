// The requests in progress on this thread: a worker is one thread running its own io_context, so this
// is the worker's count, kept without a lock or an atomic. A request counts from its read to its
// answer (Session::run holds a RequestInProgress). The data path reads it where it chooses between
// waiting behind the worker's other ready handlers (asio::post: a burst's sends to the engine batched,
// a read put off until its bytes have likely come) and going at once: with nothing else in progress
// there is nothing to batch with and nothing to wait behind, and a post would cost a turn of the
// scheduler (a zero-timeout epoll_wait) for nothing.
#pragma once

namespace sluice {

class RequestInProgress {
 public:
  RequestInProgress() { ++count_; }
  ~RequestInProgress() { --count_; }
  RequestInProgress(const RequestInProgress&) = delete;
  RequestInProgress& operator=(const RequestInProgress&) = delete;
  // Requests in progress on this thread (the caller's own included, if it is one).
  static int count() { return count_; }

 private:
  static inline thread_local int count_ = 0;
};

}  // namespace sluice
