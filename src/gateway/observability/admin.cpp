#include "gateway/observability/admin.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include "gateway/observability/dashboard_assets.h"
#include "gateway/gateway.h"
#include "gateway/http/http_util.h"
#include "gateway/pick_request.h"
#include "gateway/render_client.h"
#include "core/json_escape.h"

namespace sluice {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

AdminListener::AdminListener(asio::io_context& io, Gateway& gateway, const tcp::endpoint& at)
    : gateway_(gateway), acceptor_(io) {
  acceptor_.open(at.protocol());
  acceptor_.set_option(asio::socket_base::reuse_address(true));
  acceptor_.bind(at);
  acceptor_.listen();
}

uint16_t AdminListener::port() const { return acceptor_.local_endpoint().port(); }

void AdminListener::start() { asio::co_spawn(acceptor_.get_executor(), accept_loop(), asio::detached); }

void AdminListener::stop() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
}

asio::awaitable<void> AdminListener::accept_loop() {
  while (acceptor_.is_open()) {
    auto [ec, socket] = co_await acceptor_.async_accept(use_tuple);
    if (ec) {
      if (ec == asio::error::operation_aborted) co_return;
      continue;
    }
    asio::co_spawn(acceptor_.get_executor(), serve(std::move(socket)), asio::detached);
  }
}

// POST /debug/pick with an OpenAI request body (chat messages, or a prompt / input): how the pool's
// policy ranks its endpoints for it, with every score term, without dispatching anything.
asio::awaitable<std::string> AdminListener::explain_pick(bool is_post, std::string_view body, bool keep_alive) {
  if (!is_post)
    co_return error_response(api_error(405, "Use POST with a request body.", "invalid_request_error", {}, "method_not_allowed"),
                          keep_alive, {{"Allow", "POST"}});
  ApiKind kind = ApiKind::chat;
  auto parsed = parse_request(kind, body);
  if (!parsed.ok()) {
    kind = body.find("\"input\"") != std::string_view::npos ? ApiKind::embedding : ApiKind::completion;
    auto other = parse_request(kind, body);
    if (other.ok()) parsed = std::move(other);
  }
  if (!parsed.ok()) co_return error_response(parsed.error, keep_alive);
  const RequestModel& model = *parsed.request;
  const auto gen = gateway_.current();
  const ModelRoute* route = gen->config->find_model(model.model);
  if (!route)
    co_return error_response(api_error(404, fmt::format("The model `{}` does not exist.", model.model),
                                    "invalid_request_error", "model", "model_not_found"), keep_alive);
  PoolRouter* router = gen->router(route->pool);
  if (!router)
    co_return error_response(api_error(503, "The model's pool has no router.", "server_error", {}, {}), keep_alive);
  // Token ids as the request would get them: the pool's render cache or its engines' render route
  // (a connection of this listener's own), else the estimate; the explanation names the source.
  PickRequest pick = make_pick_request(kind, *route, model);
  std::string source = "estimate", render_error;
  RenderResult rendered;
  if (PoolRuntime* pool = gen->pool(route->pool); pool && pool->render &&
                                                  (kind == ApiKind::chat || kind == ApiKind::completion)) {
    std::string alias_body;
    RenderCall call;
    call.kind = kind;
    call.model = route->target;
    call.adapter = route->adapter_of.empty() ? std::string_view() : std::string_view(route->name);
    if (route->is_alias()) {
      BodyRewrite rw;
      rw.model = route->target;
      alias_body = rewrite_body(body, model, rw);
    }
    call.body = route->is_alias() ? std::string_view(alias_body) : body;
    call.forward_client_auth = false;  // the admin listener has no client key to forward
    const std::string id = new_request_id();
    call.request_id = id;
    UpstreamPool upstreams(co_await asio::this_coro::executor, 1);
    rendered = co_await render_token_ids(upstreams, *pool, call, asio::cancellation_slot());
    source = std::string(token_ids_source(rendered.outcome));
    render_error = rendered.error;
    if (rendered.ids) {
      pick.token_ids = *rendered.ids;
      if (model.num_inputs <= 1) pick.input_tokens = static_cast<int64_t>(rendered.ids->size());
    }
  }
  std::string json = router->explain_json(pick, gateway_.now());
  std::string head = fmt::format("{{\"token_ids_source\":\"{}\"", source);
  if (!render_error.empty()) {
    head += ",\"render_error\":";
    append_json_string(head, render_error);
  }
  json = head + "," + json.substr(1);
  co_return simple_response(200, "application/json", json, keep_alive);
}

asio::awaitable<void> AdminListener::serve(tcp::socket socket) {
  boost::beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(16 << 10);
    parser.body_limit(64 << 10);
    auto [ec, n] = co_await http::async_read(socket, buffer, parser, use_tuple);
    if (ec) break;
    auto& req = parser.get();
    const bool keep_alive = req.keep_alive();
    std::string_view path = req.target();
    if (auto q = path.find('?'); q != std::string_view::npos) path = path.substr(0, q);
    std::string out;
    if (path == "/debug/pick") {
      out = co_await explain_pick(req.method() == http::verb::post, req.body(), keep_alive);
    } else if (req.method() != http::verb::get && req.method() != http::verb::head) {
      out = error_response(api_error(405, "Use GET.", "invalid_request_error", {}, "method_not_allowed"), keep_alive,
                           {{"Allow", "GET"}});
    } else if (path == "/metrics") {
      out = simple_response(200, "text/plain; version=0.0.4; charset=utf-8", gateway_.registry().render(), keep_alive);
    } else if (const StaticAsset* asset = path.starts_with("/dashboard") ? find_dashboard_asset(path) : nullptr) {
      out = simple_response(200, asset->content_type, asset->body, keep_alive);
    } else if (path == "/healthz") {
      out = simple_response(200, "application/json", "{\"status\":\"ok\"}", keep_alive);
    } else if (path == "/readyz") {
      bool ready = gateway_.ready();
      out = simple_response(ready ? 200 : 503, "application/json",
                            ready ? "{\"status\":\"ready\"}" : "{\"status\":\"not ready\"}", keep_alive);
    } else {
      out = error_response(api_error(404, fmt::format("Unknown path {}.", path), "invalid_request_error", {}, "not_found"),
                           keep_alive);
    }
    auto [wec, wn] = co_await asio::async_write(socket, asio::buffer(out), use_tuple);
    {  // the one completion path (Gateway::complete), with a bounded path label
      RequestRecord r;
      r.listener = "admin";
      r.id = new_request_id();
      r.status = out.size() > 12 ? std::atoi(out.c_str() + 9) : 0;
      r.outcome = wec ? Outcome::client_cancelled : r.status < 400 ? Outcome::ok : Outcome::rejected;
      r.reason = r.status == 404 ? Reason::not_found : r.status == 405 ? Reason::method_not_allowed : Reason::none;
      r.path = path == "/metrics" || path == "/debug/pick" || path == "/healthz" || path == "/readyz" ? std::string(path)
               : path.starts_with("/dashboard")                                                     ? "/dashboard"
                                                                                                    : "other";
      gateway_.complete(r);
    }
    if (wec || !keep_alive) break;
  }
  boost::system::error_code ignored;
  socket.shutdown(tcp::socket::shutdown_send, ignored);
  socket.close(ignored);
}

}  // namespace sluice
