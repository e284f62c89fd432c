// The bytes a TCP peer has acknowledged on a socket, over its life (Linux's tcpi_bytes_acked):
// a count that only grows while the peer reads, whatever the sender adds to its queue meanwhile.
// Apart from the socket code because it needs <linux/tcp.h>'s struct tcp_info (glibc's
// <netinet/tcp.h>, which Asio includes, declares an older one of the same name).
#pragma once
#include <cstdint>

namespace sluice {

// -1 when the kernel does not say (not a TCP socket, an error).
int64_t tcp_bytes_acked(int fd);

}  // namespace sluice
