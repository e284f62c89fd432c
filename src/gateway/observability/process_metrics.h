// The process's own series, as the Prometheus client libraries export them (process_cpu_seconds_total,
// process_resident_memory_bytes, process_virtual_memory_bytes, process_open_fds, process_max_fds,
// process_start_time_seconds, read from /proc/self at scrape time), and sluice_build_info{version,
// revision, build_type} 1. Written by hand: no Debian C++ Prometheus client; /proc is the same
// source the Go and Python clients read.
#pragma once
#include <string>

namespace sluice {

void append_process_metrics(std::string& out);

}  // namespace sluice
