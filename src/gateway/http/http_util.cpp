#include "gateway/http/http_util.h"

#include <boost/beast/http/status.hpp>
#include <fmt/format.h>

#include <random>

#include "core/admission/outcome.h"

namespace sluice {

std::string response_head(int status, std::string_view content_type, size_t content_length, bool keep_alive,
                          const ResponseHeaders& extra) {
  std::string out;
  out.reserve(160);
  auto reason = boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(status));
  out += fmt::format("HTTP/1.1 {} {}\r\n", status, std::string_view(reason.data(), reason.size()));
  if (!content_type.empty()) out += fmt::format("Content-Type: {}\r\n", content_type);
  for (const auto& [k, v] : extra) out += fmt::format("{}: {}\r\n", k, v);
  out += fmt::format("Content-Length: {}\r\n", content_length);
  if (!keep_alive) out += "Connection: close\r\n";
  out += "\r\n";
  return out;
}

std::string simple_response(int status, std::string_view content_type, std::string_view body, bool keep_alive,
                            const ResponseHeaders& extra) {
  std::string out = response_head(status, content_type, body.size(), keep_alive, extra);
  out.append(body);
  return out;
}

ApiError api_error(int status, std::string message, std::string type, std::string param, std::string code) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

std::string error_response(const ApiError& e, bool keep_alive, const ResponseHeaders& extra) {
  return simple_response(e.status, "application/json", error_json(e), keep_alive, extra);
}

bool is_hop_by_hop(std::string_view name) {
  static constexpr std::string_view names[] = {"connection", "keep-alive", "proxy-connection", "transfer-encoding",
                                               "te", "trailer", "upgrade", "host", "content-length", "expect",
                                               "x-request-id", "proxy-authorization", "proxy-authenticate"};
  for (auto n : names)
    if (n.size() == name.size() &&
        std::equal(n.begin(), n.end(), name.begin(), [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); }))
      return true;
  return false;
}

bool is_hop_by_hop(boost::beast::http::field f, std::string_view name) {
  using boost::beast::http::field;
  switch (f) {
    case field::connection:
    case field::keep_alive:
    case field::proxy_connection:
    case field::transfer_encoding:
    case field::te:
    case field::trailer:
    case field::upgrade:
    case field::host:
    case field::content_length:
    case field::expect:
    case field::proxy_authorization:
    case field::proxy_authenticate:
      return true;
    case field::unknown:
      return is_hop_by_hop(name);  // x-request-id
    default:
      return false;
  }
}

std::string new_request_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char hex[] = "0123456789abcdef";
  std::string id(32, '0');
  for (int half = 0; half < 2; ++half) {
    uint64_t v = rng();
    for (int i = 15; i >= 0; --i, v >>= 4) id[half * 16 + i] = hex[v & 15];
  }
  return id;
}

ResponseHeaders jittered_retry_after() {
  thread_local AdmissionRng rng{std::random_device{}()};
  const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(jittered(std::chrono::seconds(1), rng));
  return {{"retry-after", std::to_string((wait.count() + 999) / 1000)}, {"retry-after-ms", std::to_string(wait.count())}};
}

std::string stream_error_event(const ApiError& e) { return "data: " + error_json(e) + "\n\n"; }

}  // namespace sluice
