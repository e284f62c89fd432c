// MessagePack over msgpuck (Debian's libmsgpuck-dev): a bounds-checked reader for payloads that come
// from peers (the engines' KV events, other gateways' load reports), and an appending writer. The
// two wire formats that use them (core/prefix/kv_events.cpp, core/picker/peer_report.cpp) build
// their own fields on these primitives; the checks a hostile payload needs are written once, here.
//
// Why by hand over msgpuck rather than msgpack-cxx's object unpacker: the payloads are walked once,
// in place, without building an object tree per message (KV event batches arrive thousands a
// second), and every length is checked against the bytes left before anything is read. msgpuck's own
// mp_check on a whole container is not used: it counts the values still to check in an int, which a
// hostile 2^32-1 element header wraps, taking the header alone for the whole value.
#pragma once
#include <msgpuck.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace sluice {

// Every read checks the bytes left first (msgpuck's mp_check_* for headers); a container's element
// count is checked against the bytes left (each element takes at least one byte, a map's two), so
// no count can exceed the buffer. A failed read returns false; the position is then unspecified.
class MsgpackReader {
 public:
  MsgpackReader(const char* p, const char* end) : p_(p), end_(end) {}
  bool at_end() const { return p_ >= end_; }
  const char* pos() const { return p_; }
  bool is(mp_type t) const { return !at_end() && mp_typeof(*p_) == t; }

  bool array(uint32_t& n) {
    if (!is(MP_ARRAY) || mp_check_array(p_, end_) > 0) return false;
    n = mp_decode_array(&p_);
    return n <= static_cast<size_t>(end_ - p_);
  }
  bool map(uint32_t& n) {
    if (!is(MP_MAP) || mp_check_map(p_, end_) > 0) return false;
    n = mp_decode_map(&p_);
    return n <= static_cast<size_t>(end_ - p_) / 2;
  }
  bool nil() {
    if (!is(MP_NIL)) return false;
    mp_decode_nil(&p_);
    return true;
  }
  // A string of at most `max` bytes.
  bool str(std::string_view& s, size_t max = SIZE_MAX) {
    if (!is(MP_STR) || mp_check_strl(p_, end_) > 0) return false;
    const char* q = p_;
    const uint32_t len = mp_decode_strl(&q);
    if (len > static_cast<size_t>(end_ - q) || len > max) return false;
    s = {q, len};
    p_ = q + len;
    return true;
  }
  bool bin(std::string_view& s) {
    if (!is(MP_BIN) || mp_check_binl(p_, end_) > 0) return false;
    const char* q = p_;
    const uint32_t len = mp_decode_binl(&q);
    if (len > static_cast<size_t>(end_ - q)) return false;
    s = {q, len};
    p_ = q + len;
    return true;
  }
  // A non-negative integer.
  bool uint(uint64_t& v) {
    if (!is(MP_UINT) || mp_check_uint(p_, end_) > 0) return false;
    v = mp_decode_uint(&p_);
    return true;
  }
  // Any integer's 64 bits: a negative one as its two's complement.
  bool bits64(uint64_t& v) {
    if (is(MP_UINT)) return uint(v);
    if (!is(MP_INT) || mp_check_int(p_, end_) > 0) return false;
    v = static_cast<uint64_t>(mp_decode_int(&p_));
    return true;
  }
  // A signed integer (a positive one over INT64_MAX fails).
  bool sint(int64_t& v) {
    const bool neg = is(MP_INT);
    uint64_t u = 0;
    if (!bits64(u)) return false;
    if (!neg && u > static_cast<uint64_t>(INT64_MAX)) return false;
    v = static_cast<int64_t>(u);
    return true;
  }
  // A double, a float or an integer.
  bool number(double& v) {
    if (is(MP_DOUBLE)) {
      if (mp_check_double(p_, end_) > 0) return false;
      v = mp_decode_double(&p_);
      return true;
    }
    if (is(MP_FLOAT)) {
      if (mp_check_float(p_, end_) > 0) return false;
      v = mp_decode_float(&p_);
      return true;
    }
    int64_t i = 0;
    if (!sint(i)) return false;
    v = static_cast<double>(i);
    return true;
  }
  // Past one value of any type (a later version's field), nested containers included, without
  // recursion: containers are walked with a 64-bit count of the values still to step over, which
  // never exceeds the bytes left; a scalar is checked by mp_check (its own counter never exceeds 1).
  bool skip() {
    uint64_t pending = 1;
    while (pending > 0) {
      if (at_end()) return false;
      --pending;
      uint32_t n = 0;
      if (is(MP_ARRAY)) {
        if (!array(n)) return false;
        pending += n;
      } else if (is(MP_MAP)) {
        if (!map(n)) return false;
        pending += 2ull * n;
      } else {
        const char* q = p_;
        if (mp_check(&q, end_) != 0) return false;
        p_ = q;
      }
      if (pending > static_cast<uint64_t>(end_ - p_)) return false;  // each value takes a byte at least
    }
    return true;
  }
  bool skip(uint64_t n) {
    for (uint64_t i = 0; i < n; ++i)
      if (!skip()) return false;
    return true;
  }

 private:
  const char* p_;
  const char* end_;
};

// Appends MessagePack values to a string.
class MsgpackWriter {
 public:
  explicit MsgpackWriter(std::string& out) : out_(out) {}
  void array(uint32_t n) { put(mp_sizeof_array(n), [&](char* d) { mp_encode_array(d, n); }); }
  void map(uint32_t n) { put(mp_sizeof_map(n), [&](char* d) { mp_encode_map(d, n); }); }
  void nil() { put(mp_sizeof_nil(), [&](char* d) { mp_encode_nil(d); }); }
  void uint(uint64_t v) { put(mp_sizeof_uint(v), [&](char* d) { mp_encode_uint(d, v); }); }
  void sint(int64_t v) {
    if (v >= 0) uint(static_cast<uint64_t>(v));
    else put(mp_sizeof_int(v), [&](char* d) { mp_encode_int(d, v); });
  }
  void dbl(double v) { put(mp_sizeof_double(v), [&](char* d) { mp_encode_double(d, v); }); }
  void str(std::string_view s) {
    const auto n = static_cast<uint32_t>(s.size());
    put(mp_sizeof_str(n), [&](char* d) { mp_encode_str(d, s.data(), n); });
  }

 private:
  template <class F>
  void put(size_t n, F&& f) {
    const size_t at = out_.size();
    out_.resize(at + n);
    f(out_.data() + at);
  }
  std::string& out_;
};

}  // namespace sluice
