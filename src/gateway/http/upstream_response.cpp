#include "gateway/http/upstream_response.h"

#include <cstring>

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/status.hpp>

namespace sluice {

namespace http = boost::beast::http;

UpstreamResponse::Field UpstreamResponse::field(size_t i) const {
  const Entry& e = fields_[i];
  return {e.name, std::string_view(text_).substr(e.name_at, e.name_len), std::string_view(text_).substr(e.value_at, e.value_len)};
}

std::string_view UpstreamResponse::reason() const {
  if (!reason_.empty()) return reason_;
  const auto r = http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status_)));
  return {r.data(), r.size()};
}

std::string_view UpstreamResponse::value(http::field name) const {
  for (size_t i = 0; i < fields_.size(); ++i)
    if (fields_[i].name == name) return field(i).value;
  return {};
}

std::string_view UpstreamResponse::value(std::string_view name) const {
  for (size_t i = 0; i < fields_.size(); ++i) {
    const Field f = field(i);
    if (boost::beast::iequals(boost::beast::string_view(f.name_string.data(), f.name_string.size()),
                              boost::beast::string_view(name.data(), name.size())))
      return f.value;
  }
  return {};
}

void UpstreamResponse::on_response_impl(int code, boost::beast::string_view reason, int, boost::system::error_code& ec) {
  status_ = code;
  reason_.assign(reason.data(), reason.size());
  ec = {};
}

void UpstreamResponse::on_field_impl(http::field name, boost::beast::string_view name_string,
                                     boost::beast::string_view value, boost::system::error_code& ec) {
  // The head is at most basic_parser's header_limit (UpstreamExchange sets 64 KiB), so offsets fit.
  if (fields_.empty()) {  // one allocation each for a typical head, not a vector grown 1, 2, 4, 8
    text_.reserve(512);
    fields_.reserve(16);
  }
  const auto at = static_cast<uint32_t>(text_.size());
  text_.append(name_string.data(), name_string.size()).append(value.data(), value.size());
  fields_.push_back({name, at, static_cast<uint32_t>(name_string.size()), static_cast<uint32_t>(at + name_string.size()),
                     static_cast<uint32_t>(value.size())});
  ec = {};
}

// As buffer_body's reader: into the caller's buffer; need_buffer when it is full (or not set), so a
// read returns what it holds and the relay passes the next buffer.
size_t UpstreamResponse::copy_body(boost::beast::string_view body, boost::system::error_code& ec) {
  if (data_ == nullptr) {
    ec = http::error::need_buffer;
    return 0;
  }
  const size_t n = std::min(body.size(), size_);
  std::memcpy(data_, body.data(), n);
  data_ += n;
  size_ -= n;
  if (n == body.size()) ec = {};
  else ec = http::error::need_buffer;
  return n;
}

}  // namespace sluice
