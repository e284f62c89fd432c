// aligned_alloc for the sluice binary when it is linked with jemalloc (CMakeLists.txt): a request for
// no more than malloc's own alignment goes to malloc; anything stricter to posix_memalign.
//
// Why: Asio allocates every coroutine frame and operation it cannot recycle with
// aligned_alloc(16, size) (detail/memory.hpp, aligned_new; alignof(max_align_t) is 16 here), ~14 per
// proxied small request. jemalloc serves aligned_alloc through its general allocation path (~125
// instructions a call, callgrind), not the thread-cache fast path malloc takes (~20), although every
// jemalloc allocation of 16 bytes or more is 16-byte aligned already. glibc's aligned_alloc does this
// itself (it calls malloc when the alignment is malloc's), so this file is linked only with jemalloc.
// Sizes under 16 keep the real path: jemalloc's 8-byte class is only 8-aligned.
#include <stdlib.h>

#include <cstddef>

extern "C" void* aligned_alloc(size_t alignment, size_t size) noexcept {
  if (alignment <= alignof(std::max_align_t) && size >= alignof(std::max_align_t)) return malloc(size);
  void* p = nullptr;
  // posix_memalign wants a power of two multiple of sizeof(void*); aligned_alloc's alignment is a
  // power of two (or it fails, as here).
  const size_t a = alignment < sizeof(void*) ? sizeof(void*) : alignment;
  return posix_memalign(&p, a, size) == 0 ? p : nullptr;
}
