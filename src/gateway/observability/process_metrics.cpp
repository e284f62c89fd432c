#include "gateway/observability/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/build_info.h"
#include "core/prom_writer.h"

namespace sluice {

namespace {

// Fields of /proc/self/stat after the command name: utime (14), stime (15), starttime (22),
// vsize (23), rss (24) in proc(5)'s 1-based numbering.
struct ProcStat {
  double cpu_seconds = 0, start_ticks = 0, vsize = 0, rss_pages = 0;
  bool ok = false;
};

ProcStat read_stat() {
  ProcStat s;
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return s;
  const auto close = line.rfind(')');  // the command name may contain spaces and parentheses
  if (close == std::string::npos) return s;
  std::istringstream rest(line.substr(close + 2));
  std::string f;
  // rest starts at field 3 (state).
  double utime = 0, stime = 0;
  for (int field = 3; rest >> f; ++field) {
    if (field == 14) utime = std::stod(f);
    else if (field == 15) stime = std::stod(f);
    else if (field == 22) s.start_ticks = std::stod(f);
    else if (field == 23) s.vsize = std::stod(f);
    else if (field == 24) {
      s.rss_pages = std::stod(f);
      s.ok = true;
      break;
    }
  }
  const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
  s.cpu_seconds = (utime + stime) / hz;
  return s;
}

double boot_time_seconds() {
  std::ifstream in("/proc/stat");
  std::string key;
  double v = 0;
  while (in >> key) {
    if (key == "btime") {
      in >> v;
      return v;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

double open_fds() {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return 0;
  double n = 0;
  while (const dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n - 1;  // the directory stream's own descriptor
}

}  // namespace

void append_process_metrics(std::string& out) {
  PromWriter w(out);
  w.family("sluice_build_info", "gauge", "Always 1; the labels say which build is running.");
  w.sample("sluice_build_info",
           {{"version", build_version()}, {"revision", build_revision()}, {"build_type", build_type()}}, 1);
  const ProcStat s = read_stat();
  if (!s.ok) return;
  w.family("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.");
  w.sample("process_cpu_seconds_total", "", s.cpu_seconds);
  w.family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
  w.sample("process_resident_memory_bytes", "", s.rss_pages * static_cast<double>(sysconf(_SC_PAGESIZE)));
  w.family("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
  w.sample("process_virtual_memory_bytes", "", s.vsize);
  w.family("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.");
  w.sample("process_start_time_seconds", "", boot_time_seconds() + s.start_ticks / static_cast<double>(sysconf(_SC_CLK_TCK)));
  w.family("process_open_fds", "gauge", "Number of open file descriptors.");
  w.sample("process_open_fds", "", open_fds());
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0) {
    w.family("process_max_fds", "gauge", "Maximum number of open file descriptors.");
    w.sample("process_max_fds", "", static_cast<double>(lim.rlim_cur));
  }
}

}  // namespace sluice
