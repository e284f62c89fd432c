// RequestBody: a Beast body type made for large request bodies. Written by hand because Beast's
// string_body grows its string with resize(), which zero-fills every byte before the data is
// copied in, and reserves exactly the Content-Length, so the JSON parser would have to copy the
// body again to get simdjson's padding.
//
// Its value is BodyBytes, a byte buffer that grows without writing the new bytes (a std::string
// cannot: its resize() zero-fills them, ~10% of the gateway's CPU at 220 KB prompts, perf, once the
// socket reads straight into the body). The reader appends (one copy, no fill) and reserves
// kBodyPadding bytes past the declared length, zeroed when the body is complete, so parse_request
// can read the body in place (request.h).
//
// In place: a reader of a Content-Length body may be handed bytes that already sit where they
// belong, at data() + the bytes put so far, inside the buffer's size (the session grows the buffer
// ahead of the data and reads from the socket straight into it, session.cpp). Those are taken
// without a copy; finish() cuts the buffer back to the bytes put.
#pragma once
#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/optional.hpp>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>

#include "core/openai/request.h"

namespace sluice {

class BodyBytes {
 public:
  BodyBytes() = default;
  BodyBytes(BodyBytes&&) noexcept = default;
  BodyBytes& operator=(BodyBytes&&) noexcept = default;
  BodyBytes(const BodyBytes& o) { assign(o.view()); }
  BodyBytes& operator=(const BodyBytes& o) {
    if (this != &o) assign(o.view());
    return *this;
  }

  const char* data() const { return buf_.get(); }
  char* data() { return buf_.get(); }
  size_t size() const { return size_; }
  size_t capacity() const { return cap_; }
  std::string_view view() const { return {buf_.get(), size_}; }
  operator std::string_view() const { return view(); }  // NOLINT: used as text everywhere

  // Capacity for n bytes, keeping the contents (never shrinks).
  void reserve(size_t n) {
    if (n <= cap_) return;
    auto grown = std::make_unique_for_overwrite<char[]>(n);
    if (size_ > 0) std::memcpy(grown.get(), buf_.get(), size_);
    buf_ = std::move(grown);
    cap_ = n;
  }
  // Grows (or cuts) the size to n; new bytes are not written (the caller fills them).
  void resize_for_overwrite(size_t n) {
    if (n > cap_) reserve(std::max(n, cap_ + cap_ / 2));
    size_ = n;
  }
  void append(const char* p, size_t n) {
    if (n == 0) return;
    const size_t at = size_;
    resize_for_overwrite(size_ + n);
    std::memcpy(buf_.get() + at, p, n);
  }
  void assign(std::string_view s) {
    size_ = 0;
    append(s.data(), s.size());
  }

 private:
  std::unique_ptr<char[]> buf_;
  size_t size_ = 0, cap_ = 0;
};

struct RequestBody {
  using value_type = BodyBytes;

  static std::uint64_t size(const value_type& body) { return body.size(); }

  class reader {
   public:
    template <bool isRequest, class Fields>
    explicit reader(boost::beast::http::header<isRequest, Fields>&, value_type& body) : body_(body) {}

    void init(const boost::optional<std::uint64_t>& length, boost::system::error_code& ec) {
      ec = {};
      if (!length) return;
      if (*length > (std::uint64_t{1} << 40)) {
        ec = boost::beast::http::error::buffer_overflow;
        return;
      }
      body_.reserve(static_cast<size_t>(*length) + kBodyPadding);
    }

    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::system::error_code& ec) {
      ec = {};
      std::size_t n = 0;
      for (const auto b : boost::beast::buffers_range_ref(buffers)) {
        const char* data = static_cast<const char*>(b.data());
        if (b.size() > 0 && data == body_.data() + put_ && put_ + b.size() <= body_.size()) {
          put_ += b.size();  // already in place
        } else {
          body_.resize_for_overwrite(put_);  // (a no-op unless in-place bytes were offered before)
          body_.append(data, b.size());
          put_ = body_.size();
        }
        n += b.size();
      }
      return n;
    }

    void finish(boost::system::error_code& ec) {
      ec = {};
      body_.resize_for_overwrite(put_);  // what was grown ahead of in-place reads and not filled
      // Zero the padding (initialised bytes for the parser to read past the end), keeping the size.
      if (body_.capacity() >= put_ + kBodyPadding) std::memset(body_.data() + put_, 0, kBodyPadding);
    }

   private:
    value_type& body_;
    size_t put_ = 0;  // body bytes put (the buffer may be longer while in-place reads are under way)
  };
};

}  // namespace sluice
