// Hand-written scans over raw JSON text, for the few places that must see structure simdjson's On
// Demand front end skips (request.cpp: nesting depth and trailing content) or that look for one member
// without parsing the document (response_fields.cpp: the usage object at a completion's end).
#pragma once
#include <cstdint>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace sluice {

// The end of the JSON string whose contents start at `start` (just after its opening quote): a pointer
// just past the closing quote, or nullptr if it is unterminated before `end`. A quote ends the string
// unless it is escaped: preceded by an odd run of backslashes (each pair is an escaped backslash).
//
// Two ways through a string, chosen by what it holds:
// - Prose: its closing quote is found with glibc's vectorised memchr and checked by counting the
//   backslashes just before it. A 220 KB message costs ~10k instructions instead of ~2M byte by byte.
// - Code pasted into a prompt (an escaped quote every ~10-30 bytes), from its first escaped quote on:
//   a memchr call per escaped quote was ~80 us of a 220 KB code prompt's ~270 us parse (sluice_microbench
//   BM_ParseChatRenderCode). The rest is read 64 bytes at a time: a mask of its quotes and one of its
//   backslashes (SSE2 compares); a backslash that is not itself escaped escapes the byte after it
//   (which can be the next block's first, carried), and the first quote not escaped ends the string.
//   (This block scan throughout was ~35% slower than memchr on prose.)
// Hand-written because simdjson's On Demand front end does not expose the string bounds its stage 1
// finds.
namespace json_scan_detail {
// From `p`, whose byte is not escaped: the block scan above, then byte by byte for the last < 64.
inline const char* string_end_blocks(const char* p, const char* end) {
  bool carry = false;  // the block's first byte is escaped (a backslash ended the block before)
#if defined(__SSE2__)
  const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
  for (; end - p >= 64; p += 64) {
    uint64_t quotes = 0, backslashes = 0;
    for (int i = 0; i < 4; ++i) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i));
      quotes |= static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, quote)))) << (16 * i);
      backslashes |= static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, backslash)))) << (16 * i);
    }
    uint64_t escaped = carry ? 1 : 0;
    carry = false;
    // Each backslash in order: one that is not escaped escapes the next byte.
    for (; backslashes != 0; backslashes &= backslashes - 1) {
      const int i = __builtin_ctzll(backslashes);
      if ((escaped >> i) & 1) continue;
      if (i == 63) carry = true;
      else escaped |= uint64_t{2} << i;
    }
    if (const uint64_t ends = quotes & ~escaped; ends != 0) return p + __builtin_ctzll(ends) + 1;
  }
#endif
  for (; p < end; ++p) {
    if (carry) carry = false;
    else if (*p == '\\') carry = true;
    else if (*p == '"') return p + 1;
  }
  return nullptr;
}
}  // namespace json_scan_detail

inline const char* json_string_end(const char* start, const char* end) {
  const auto* quote = static_cast<const char*>(std::memchr(start, '"', static_cast<size_t>(end - start)));
  if (quote == nullptr) return nullptr;
  const char* b = quote;
  while (b > start && b[-1] == '\\') --b;
  if (((quote - b) & 1) == 0) return quote + 1;  // not escaped
  // An escaped quote (it took its escape: the byte after it is not escaped): code, likely.
  return json_scan_detail::string_end_blocks(quote + 1, end);
}

}  // namespace sluice
