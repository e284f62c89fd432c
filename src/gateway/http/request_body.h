// RequestBody: Beast's string_body with a reader made for large request bodies. Written by hand
// because Beast's own string_body reader grows the string with resize() (zero-filling every byte
// before copying it in: ~5% of the gateway's CPU at 220 KB prompts, perf) and reserves exactly the
// Content-Length, so the JSON parser must copy the body again to get simdjson's padding.
// This reader appends (one copy, no fill) and reserves kBodyPadding bytes past the declared length,
// zeroed when the body is complete, so parse_request can read the body in place (request.h).
//
// In place: a reader of a Content-Length body may be handed bytes that already sit where they
// belong, at body.data() + the bytes put so far, inside the string's size (the session grows the
// string ahead of the data and reads from the socket straight into it; see read_body_in_place in
// session.cpp). Those are taken without a copy; finish() cuts the string back to the bytes put.
#pragma once
#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/optional.hpp>
#include <cstdint>
#include <string>

#include "core/openai/request.h"

namespace sluice {

struct RequestBody : boost::beast::http::string_body {
  class reader {
   public:
    template <bool isRequest, class Fields>
    explicit reader(boost::beast::http::header<isRequest, Fields>&, value_type& body) : body_(body) {}

    void init(const boost::optional<std::uint64_t>& length, boost::system::error_code& ec) {
      ec = {};
      if (!length) return;
      if (*length > body_.max_size() - kBodyPadding) {
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
        if (data == body_.data() + put_ && put_ + b.size() <= body_.size()) {
          put_ += b.size();  // already in place
        } else {
          body_.resize(put_);  // (a no-op unless in-place bytes were offered before)
          body_.append(data, b.size());
          put_ = body_.size();
        }
        n += b.size();
      }
      return n;
    }

    void finish(boost::system::error_code& ec) {
      ec = {};
      body_.resize(put_);  // what was grown ahead of in-place reads and not filled
      // Zero the padding (initialised bytes for the parser to read past the end), keeping the size.
      const size_t size = body_.size();
      if (body_.capacity() >= size + kBodyPadding) {
        body_.append(kBodyPadding, '\0');
        body_.resize(size);
      }
    }

   private:
    value_type& body_;
    size_t put_ = 0;  // body bytes put (the string may be longer while in-place reads are under way)
  };
};

}  // namespace sluice
