// aligned_alloc as the sluice binary links it (src/app/alloc/jemalloc_aligned_alloc.cpp, also linked
// into this test binary outside the sanitizer builds): every result is aligned as asked, usable for
// its whole size and freed by free(), on the malloc path (alignment <= 16) and the posix_memalign one.
#include <stdlib.h>

#include <cstdint>
#include <cstring>

#include <gtest/gtest.h>

namespace {

bool aligned(const void* p, size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

TEST(AlignedAlloc, EveryAlignmentIsHonouredAndTheBlockIsUsable) {
  for (size_t alignment : {8u, 16u, 32u, 64u, 128u, 4096u}) {
    for (size_t size : {16u, 48u, 720u, 1104u, 3840u, 70000u}) {  // Asio's frame sizes among them
      const size_t n = (size + alignment - 1) / alignment * alignment;  // C11: a multiple of the alignment
      void* p = aligned_alloc(alignment, n);
      ASSERT_NE(p, nullptr) << alignment << " " << n;
      EXPECT_TRUE(aligned(p, alignment)) << alignment << " " << n;
      std::memset(p, 0xab, n);  // the whole block is ours (ASan/valgrind would object otherwise)
      free(p);
    }
  }
}

TEST(AlignedAlloc, BlocksUnderSixteenBytesKeepTheirAlignment) {
  // Under 16 bytes jemalloc's smallest class is only 8-aligned: the shim sends these to posix_memalign.
  for (size_t alignment : {1u, 2u, 4u, 8u}) {
    void* p = aligned_alloc(alignment, 8);
    ASSERT_NE(p, nullptr) << alignment;
    EXPECT_TRUE(aligned(p, alignment));
    std::memset(p, 0xcd, 8);
    free(p);
  }
}

}  // namespace
