// A real redis-server for tests: started on a unix socket in a fresh temp dir (no TCP port, no
// persistence), stopped by the destructor. `restart()` kills it and starts a new one on the same
// socket (an empty Redis, as after a crash without persistence).
#pragma once
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace sluice::testing {

class RedisServer {
 public:
  RedisServer() {
    char tmpl[] = "/tmp/sluice-redis-XXXXXX";
    dir_ = mkdtemp(tmpl) ? tmpl : "";
    socket_ = dir_ + "/redis.sock";
    start();
  }
  ~RedisServer() {
    stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  bool ok() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  const std::string& socket() const { return socket_; }
  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int st = 0;
    waitpid(pid_, &st, 0);
    pid_ = -1;
    ::unlink(socket_.c_str());
  }
  bool restart() {
    stop();
    return start();
  }
  // A synchronous hiredis connection (caller frees).
  redisContext* connect() const { return redisConnectUnix(socket_.c_str()); }

 private:
  bool start() {
    std::vector<std::string> args = {"redis-server", "--port", "0", "--unixsocket", socket_, "--save", "",
                                     "--appendonly", "no", "--dir", dir_, "--logfile", dir_ + "/redis.log"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawnp(&pid_, "redis-server", nullptr, nullptr, argv.data(), environ) != 0) {
      pid_ = -1;
      return false;
    }
    for (int i = 0; i < 500; ++i) {  // up to 5 s
      if (redisContext* c = redisConnectUnix(socket_.c_str()); c && !c->err) {
        auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
        const bool up = r && r->type == REDIS_REPLY_STATUS;
        if (r) freeReplyObject(r);
        redisFree(c);
        if (up) return true;
      } else if (c) {
        redisFree(c);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    stop();
    return false;
  }
  std::string dir_, socket_;
  pid_t pid_ = -1;
};

// Runs argv synchronously; integer array (or single integer) reply in `out`; false on anything else.
inline bool redis_ints(redisContext* c, const std::vector<std::string>& argv, std::vector<int64_t>& out,
                       std::string* error = nullptr) {
  std::vector<const char*> p;
  std::vector<size_t> l;
  for (auto& a : argv) {
    p.push_back(a.data());
    l.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(argv.size()), p.data(), l.data()));
  if (!r) return false;
  out.clear();
  bool ok = true;
  if (r->type == REDIS_REPLY_INTEGER) {
    out.push_back(r->integer);
  } else if (r->type == REDIS_REPLY_ARRAY) {
    for (size_t i = 0; i < r->elements; ++i) {
      if (r->element[i]->type != REDIS_REPLY_INTEGER) ok = false;
      else out.push_back(r->element[i]->integer);
    }
  } else {
    ok = false;
    if (error && r->str) *error = std::string(r->str, r->len);
  }
  freeReplyObject(r);
  return ok;
}

}  // namespace sluice::testing
