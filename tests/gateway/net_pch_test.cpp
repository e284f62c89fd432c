// The precompiled header (src/net_pch.h) must not change what the code after it sees. Every file of
// this test binary is built with it. A GCC 12 PCH that contained fmt's push_options/optimize("Og")
// pragmas made __OPTIMIZE__ appear in -O0 files (GCC bug 105120); simdjson then compiled its on-demand
// parser with one layout here and another in src/core/, and the parser's depth buffer leaked.
#include <gtest/gtest.h>

namespace {

TEST(NetPch, DoesNotLeakAnOptimizationLevel) {
  // At -O0 GCC defines __NO_INLINE__ and not __OPTIMIZE__; optimised builds define only __OPTIMIZE__.
  // Both at once means a pragma's optimisation state escaped the PCH.
#if defined(__OPTIMIZE__) && defined(__NO_INLINE__)
  constexpr bool leaked = true;
#else
  constexpr bool leaked = false;
#endif
  EXPECT_FALSE(leaked) << "a header in src/net_pch.h left '#pragma GCC optimize' state behind";
}

}  // namespace
