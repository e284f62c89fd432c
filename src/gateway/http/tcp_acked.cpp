#include "gateway/http/tcp_acked.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>

namespace sluice {

int64_t tcp_bytes_acked(int fd) {
  tcp_info info{};
  socklen_t len = sizeof info;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return -1;
  // An older kernel fills a shorter struct: the field is then not there.
  if (len < offsetof(tcp_info, tcpi_bytes_acked) + sizeof info.tcpi_bytes_acked) return -1;
  return static_cast<int64_t>(info.tcpi_bytes_acked);
}

}  // namespace sluice
