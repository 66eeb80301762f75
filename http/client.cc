#include "http/client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <condition_variable>
#include <mutex>

namespace nw {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

Result<HttpUrl> HttpUrl::Parse(std::string_view url) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("url '" + std::string(url) + "': " + why);
  };
  constexpr std::string_view kScheme = "http://";
  if (url.substr(0, kScheme.size()) != kScheme) return bad("must start with http://");
  std::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  const std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  if (path != "" && path != "/" && path != "/v1" && path != "/v1/") {
    return bad("the path must be empty or /v1");
  }
  if (authority.find('@') != std::string_view::npos) return bad("credentials in the URL");
  HttpUrl u;
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("unterminated [");
    u.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("expected :port after ]");
      port = after.substr(1);
      if (port.empty()) return bad("empty port");
    }
  } else {
    const size_t colon = authority.rfind(':');
    u.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      if (port.empty()) return bad("empty port");
    }
  }
  if (u.host.empty()) return bad("missing host");
  if (!port.empty()) {
    int v = 0;
    auto r = std::from_chars(port.data(), port.data() + port.size(), v);
    if (r.ec != std::errc() || r.ptr != port.data() + port.size() || v < 1 || v > 65535) {
      return bad("bad port '" + std::string(port) + "'");
    }
    u.port = static_cast<uint16_t>(v);
  }
  return u;
}

std::string HttpUrl::HostHeader() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string HttpUrl::Origin() const { return "http://" + HostHeader(); }

struct HttpClient::Connection {
  asio::io_context ioc;
  beast::tcp_stream stream{ioc};
  beast::flat_buffer buffer;
  bool open = false;

  void Close() {
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream.socket().close(ignored);
    buffer.clear();
    open = false;
  }
};

struct HttpClient::Pool {
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;
  std::vector<std::unique_ptr<Connection>> idle;
  int64_t exchanges = 0;
  int64_t opened = 0;
};

namespace {

enum class Phase { kResolve, kConnect, kWrite, kRead };

struct ExchangeResult {
  Status status;
  bool retry_fresh = false;  // failed before any answer arrived: safe to try a new connection
};

}  // namespace

HttpClient::HttpClient(HttpUrl url, HttpClientOptions options)
    : url_(std::move(url)), options_(std::move(options)), pool_(std::make_unique<Pool>()) {
  if (options_.max_in_flight < 1) options_.max_in_flight = 1;
}

HttpClient::~HttpClient() = default;

HttpClient::Stats HttpClient::stats() const {
  std::lock_guard<std::mutex> lock(pool_->mu);
  return Stats{pool_->exchanges, pool_->opened, static_cast<int64_t>(pool_->idle.size())};
}

Result<HttpResponse> HttpClient::Send(std::string_view method, const std::string& target,
                                      const std::string& body, std::chrono::milliseconds timeout,
                                      const HttpHeaders& extra_headers) {
  const bhttp::verb verb = bhttp::string_to_verb(beast::string_view(method.data(), method.size()));
  if (verb == bhttp::verb::unknown) {
    return Status::InvalidArgument("unknown HTTP method '" + std::string(method) + "'");
  }
  bhttp::request<bhttp::string_body> req{verb, target, 11};
  req.set(bhttp::field::host, url_.HostHeader());
  req.set(bhttp::field::user_agent, options_.user_agent);
  req.set(bhttp::field::accept, "application/json");
  for (const auto& [name, value] : options_.headers) req.set(name, value);
  for (const auto& [name, value] : extra_headers) req.set(name, value);
  if (!body.empty()) {
    req.set(bhttp::field::content_type, "application/json");
    req.body() = body;
  }
  req.keep_alive(true);
  req.prepare_payload();

  // A slot, and a pooled connection if one is idle.
  std::unique_ptr<Connection> conn;
  {
    std::unique_lock<std::mutex> lock(pool_->mu);
    pool_->cv.wait(lock, [&] { return pool_->in_flight < options_.max_in_flight; });
    ++pool_->in_flight;
    if (!pool_->idle.empty()) {
      conn = std::move(pool_->idle.back());
      pool_->idle.pop_back();
    }
  }
  const bool reused = conn != nullptr;
  if (!conn) conn = std::make_unique<Connection>();
  const Clock::time_point deadline = Clock::now() + timeout;
  const std::string where = url_.Origin();

  HttpResponse response;
  bool keep = false;
  auto exchange = [&](Connection& c) -> ExchangeResult {
    c.ioc.restart();
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(options_.max_response_bytes);
    parser.header_limit(64 * 1024);
    tcp::resolver resolver(c.ioc);
    asio::steady_timer resolve_timer(c.ioc);
    bool resolve_timed_out = false;
    Phase phase = Phase::kWrite;
    beast::error_code result;
    bool connected_now = false;

    auto read = [&] {
      phase = Phase::kRead;
      c.stream.expires_at(deadline);
      bhttp::async_read(c.stream, c.buffer, parser,
                        [&](beast::error_code ec, size_t) { result = ec; });
    };
    auto write = [&] {
      phase = Phase::kWrite;
      c.stream.expires_at(deadline);
      bhttp::async_write(c.stream, req, [&](beast::error_code ec, size_t) {
        if (ec) {
          result = ec;
          return;
        }
        read();
      });
    };
    if (c.open) {
      write();
    } else {
      phase = Phase::kResolve;
      resolve_timer.expires_at(deadline);
      resolve_timer.async_wait([&](beast::error_code ec) {
        if (ec) return;
        resolve_timed_out = true;
        resolver.cancel();
      });
      resolver.async_resolve(
          url_.host, std::to_string(url_.port),
          [&](beast::error_code ec, const tcp::resolver::results_type& endpoints) {
            resolve_timer.cancel();
            if (ec) {
              result = ec;
              return;
            }
            phase = Phase::kConnect;
            c.stream.expires_at(deadline);
            c.stream.async_connect(endpoints, [&](beast::error_code cec, const tcp::endpoint&) {
              if (cec) {
                result = cec;
                return;
              }
              c.open = true;
              connected_now = true;
              write();
            });
          });
    }
    c.ioc.run();
    if (connected_now) {
      std::lock_guard<std::mutex> lock(pool_->mu);
      ++pool_->opened;
    }

    if (!result) {
      auto& msg = parser.get();
      response.status = static_cast<int>(msg.result_int());
      response.body = std::move(msg.body());
      response.headers.clear();
      for (const auto& field : msg) {
        std::string name(field.name_string());
        for (char& ch : name) {
          if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
        }
        response.headers[name] = std::string(field.value());
      }
      keep = msg.keep_alive();
      if (!keep) c.Close();
      return {Status::Ok(), false};
    }
    const bool answered = phase == Phase::kRead && parser.got_some();
    c.Close();
    const std::string detail = result.message();
    if (result == beast::error::timeout || resolve_timed_out) {
      if (phase == Phase::kResolve || phase == Phase::kConnect) {
        return {Status::Unavailable("connecting to " + where + " timed out after " +
                                    std::to_string(timeout.count()) + " ms"),
                false};
      }
      return {Status::DeadlineExceeded("no complete response from " + where + " within " +
                                       std::to_string(timeout.count()) + " ms"),
              false};
    }
    switch (phase) {
      case Phase::kResolve:
        return {Status::Unavailable("cannot resolve " + url_.host + ": " + detail), false};
      case Phase::kConnect:
        return {Status::Unavailable("cannot connect to " + where + ": " + detail), false};
      case Phase::kWrite:
        return {Status::Unavailable("sending the request to " + where + " failed: " + detail),
                true};
      case Phase::kRead:
        break;
    }
    if (result == bhttp::error::body_limit) {
      return {Status::ResourceExhausted("the response from " + where + " is larger than " +
                                        std::to_string(options_.max_response_bytes) + " bytes"),
              false};
    }
    if (!answered) {
      return {
          Status::Unavailable(where + " closed the connection without answering (" + detail + ")"),
          true};
    }
    if (result == bhttp::error::partial_message || result == asio::error::eof ||
        result == bhttp::error::end_of_stream) {
      return {Status::Unavailable("the response from " + where + " was cut short (" + detail + ")"),
              false};
    }
    if (result.category() == bhttp::make_error_code(bhttp::error::bad_version).category()) {
      return {Status::Unavailable("malformed HTTP response from " + where + ": " + detail), false};
    }
    return {Status::Unavailable("reading the response from " + where + " failed: " + detail),
            false};
  };

  ExchangeResult r = exchange(*conn);
  if (!r.status.ok() && reused && r.retry_fresh) {
    conn = std::make_unique<Connection>();  // the pooled connection had gone stale
    r = exchange(*conn);
  }
  {
    std::lock_guard<std::mutex> lock(pool_->mu);
    --pool_->in_flight;
    if (r.status.ok()) ++pool_->exchanges;
    if (r.status.ok() && keep && conn->open &&
        static_cast<int>(pool_->idle.size()) < options_.max_in_flight) {
      pool_->idle.push_back(std::move(conn));
    }
  }
  pool_->cv.notify_one();
  if (!r.status.ok()) return r.status;
  return response;
}

}  // namespace nw
