// HugePageAllocator: a std::allocator for the prefix index's big flat arrays (its slot table and
// node array: ~90 MB at 64 endpoints x 31,250 blocks) that asks Linux for transparent huge pages.
// A lookup probes one slot per prompt block at a random place in the table: with 4 KiB pages
// nearly every probe also misses the TLB and walks the page table, which costs as much as the probe.
// 2 MiB pages make the whole table fit the TLB. Debian's default THP mode is `madvise`, so the
// memory must be advised explicitly (MADV_HUGEPAGE); where THP is off this is a plain aligned
// allocation. Allocations under 2 MiB use the ordinary allocator. No library does this
// (Boost.Interprocess and libhugetlbfs target hugetlbfs mounts, not THP).
#pragma once
#include <cstddef>
#include <cstdlib>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace sluice {

template <class T>
struct HugePageAllocator {
  using value_type = T;
  static constexpr size_t kHuge = size_t{2} << 20;

  HugePageAllocator() noexcept = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHuge) return static_cast<T*>(::operator new(bytes));
    const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
    void* p = std::aligned_alloc(kHuge, rounded);
    if (!p) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure leaves ordinary pages
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) noexcept {
    if (n * sizeof(T) < kHuge) ::operator delete(p);
    else std::free(p);
  }
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const noexcept { return true; }
};

}  // namespace sluice
