// The upstream response's parser: Beast's HTTP/1.1 parser (basic_parser<false>: framing, chunked
// coding, limits) with the gateway's own callbacks instead of http::response_parser<buffer_body>.
// The difference is where the head goes. response_parser stores every field as its own node of
// basic_fields (one allocation and a case-insensitive tree insert per header, freed again at the end
// of the exchange); here the names and values are appended to one string and indexed by a small
// vector, which the relay walks in order (-2.0k instructions per small request, callgrind:
// bench/results/overhead.txt run 15). The body is read as buffer_body reads it: straight into the
// caller's buffer. Written by hand because Beast has no body-less message type that skips the fields.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <boost/beast/core/string_type.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/field.hpp>

namespace sluice {

class UpstreamResponse final : public boost::beast::http::basic_parser<false> {
 public:
  struct Field {
    boost::beast::http::field name;
    std::string_view name_string;
    std::string_view value;
  };

  UpstreamResponse() = default;

  int status() const { return status_; }
  // The reason-phrase as sent, or the status's standard one when the server sent none.
  std::string_view reason() const;
  size_t field_count() const { return fields_.size(); }
  Field field(size_t i) const;
  // The first value of a field (by Beast's enum for known names, else by name, case-insensitively);
  // empty when absent.
  std::string_view value(boost::beast::http::field name) const;
  std::string_view value(std::string_view name) const;

  // Where the next body bytes go (buffer_body's data and size): what is left of it after a read.
  void set_target(char* data, size_t size) {
    data_ = data;
    size_ = size;
  }
  size_t target_left() const { return size_; }

 private:
  struct Entry {
    boost::beast::http::field name;
    uint32_t name_at, name_len, value_at, value_len;
  };
  int status_ = 0;
  std::string reason_;
  std::string text_;  // every field's name and value, back to back
  std::vector<Entry> fields_;
  char* data_ = nullptr;
  size_t size_ = 0;

  size_t copy_body(boost::beast::string_view body, boost::system::error_code& ec);

  void on_request_impl(boost::beast::http::verb, boost::beast::string_view, boost::beast::string_view, int,
                       boost::system::error_code&) override {}
  void on_response_impl(int code, boost::beast::string_view reason, int version, boost::system::error_code& ec) override;
  void on_field_impl(boost::beast::http::field name, boost::beast::string_view name_string, boost::beast::string_view value,
                     boost::system::error_code& ec) override;
  void on_header_impl(boost::system::error_code& ec) override { ec = {}; }
  void on_body_init_impl(boost::optional<std::uint64_t> const&, boost::system::error_code& ec) override { ec = {}; }
  size_t on_body_impl(boost::beast::string_view body, boost::system::error_code& ec) override { return copy_body(body, ec); }
  void on_chunk_header_impl(std::uint64_t, boost::beast::string_view, boost::system::error_code& ec) override { ec = {}; }
  size_t on_chunk_body_impl(std::uint64_t, boost::beast::string_view body, boost::system::error_code& ec) override {
    return copy_body(body, ec);
  }
  void on_finish_impl(boost::system::error_code& ec) override { ec = {}; }
};

}  // namespace sluice
