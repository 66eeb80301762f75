#include "http/client.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <charconv>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <optional>

namespace nw {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

Result<HttpUrl> HttpUrl::Parse(std::string_view url) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("url '" + std::string(url) + "': " + why);
  };
  HttpUrl u;
  std::string_view rest;
  if (url.substr(0, 7) == "http://") {
    rest = url.substr(7);
  } else if (url.substr(0, 8) == "https://") {
    rest = url.substr(8);
    u.tls = true;
    u.port = 443;
  } else {
    return bad("must start with http:// or https://");
  }
  const size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  const std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  if (path != "" && path != "/" && path != "/v1" && path != "/v1/") {
    return bad("the path must be empty or /v1");
  }
  if (authority.find('@') != std::string_view::npos) return bad("credentials in the URL");
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

std::string HttpUrl::Origin() const { return (tls ? "https://" : "http://") + HostHeader(); }

// One connection: a plain TCP stream, or (https) an SSL stream over one. A fresh stream is made
// for every new connection, since an SSL stream cannot be reused once closed.
struct HttpClient::Connection {
  asio::io_context ioc;
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> secure;
  beast::flat_buffer buffer;
  bool open = false;

  void Reset(ssl::context* tls) {
    secure.reset();
    plain.reset();
    if (tls != nullptr) {
      secure.emplace(ioc, *tls);
    } else {
      plain.emplace(ioc);
    }
  }
  beast::tcp_stream& lowest() { return secure ? beast::get_lowest_layer(*secure) : *plain; }
  template <typename F>
  void Visit(F&& f) {
    if (secure) {
      f(*secure);
    } else {
      f(*plain);
    }
  }
  void Close() {
    if (plain || secure) {
      beast::error_code ignored;
      lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
      lowest().socket().close(ignored);
    }
    buffer.clear();
    open = false;
  }
};

namespace {

// The peer certificate must name `host` (asio's host_name_verification: DNS names by
// X509_check_host, IP addresses by X509_check_ip_asc); a mismatch is recorded as
// X509_V_ERR_HOSTNAME_MISMATCH so that the error message can say so.
class VerifyHost {
 public:
  explicit VerifyHost(std::string host) : check_(host) {}
  bool operator()(bool preverified, ssl::verify_context& ctx) const {
    if (!preverified) return false;
    if (check_(preverified, ctx)) return true;
    X509_STORE_CTX_set_error(ctx.native_handle(), X509_V_ERR_HOSTNAME_MISMATCH);
    return false;
  }

 private:
  ssl::host_name_verification check_;
};

bool IsIpAddress(const std::string& host) {
  beast::error_code ec;
  asio::ip::make_address(host, ec);
  return !ec;
}

}  // namespace

struct HttpClient::Pool {
  std::optional<ssl::context> tls;  // https only
  Status tls_status;                // why `tls` could not be set up
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;
  std::vector<std::unique_ptr<Connection>> idle;
  int64_t exchanges = 0;
  int64_t opened = 0;
};

namespace {

enum class Phase { kResolve, kConnect, kHandshake, kWrite, kRead };

struct ExchangeResult {
  Status status;
  bool retry_fresh = false;  // failed before any answer arrived: safe to try a new connection
};

}  // namespace

HttpClient::HttpClient(HttpUrl url, HttpClientOptions options)
    : url_(std::move(url)), options_(std::move(options)), pool_(std::make_unique<Pool>()) {
  if (options_.max_in_flight < 1) options_.max_in_flight = 1;
  if (!url_.tls) return;
  const std::string where = url_.Origin();
  try {
    pool_->tls.emplace(ssl::context::tls_client);
    ssl::context& ctx = *pool_->tls;
    ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                    ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
    beast::error_code ec;
    ctx.set_default_verify_paths(ec);  // the system's CA store
    if (ec) {
      pool_->tls_status = Status::FailedPrecondition(
          where + ": cannot load the system's CA certificates: " + ec.message());
    } else if (!options_.ca_file.empty()) {
      if (!std::ifstream(options_.ca_file).good()) {
        pool_->tls_status = Status::FailedPrecondition(where + ": ca_file " + options_.ca_file +
                                                       ": cannot load certificates (cannot read "
                                                       "the file)");
      } else {
        ctx.load_verify_file(options_.ca_file, ec);
        if (ec) {
          pool_->tls_status = Status::FailedPrecondition(
              where + ": ca_file " + options_.ca_file +
              ": cannot load certificates (no PEM certificate in it: " + ec.message() + ")");
        }
      }
    }
    ctx.set_verify_mode(ssl::verify_peer);
  } catch (const boost::system::system_error& e) {
    pool_->tls.reset();
    pool_->tls_status =
        Status::FailedPrecondition(where + ": cannot set up TLS: " + std::string(e.what()));
  }
}

HttpClient::~HttpClient() = default;

HttpClient::Stats HttpClient::stats() const {
  std::lock_guard<std::mutex> lock(pool_->mu);
  return Stats{pool_->exchanges, pool_->opened, static_cast<int64_t>(pool_->idle.size())};
}

Result<HttpResponse> HttpClient::Send(std::string_view method, const std::string& target,
                                      const std::string& body, std::chrono::milliseconds timeout,
                                      const HttpHeaders& extra_headers,
                                      const HttpBodySink& on_body) {
  if (url_.tls && !pool_->tls_status.ok()) return pool_->tls_status;
  const bhttp::verb verb = bhttp::string_to_verb(beast::string_view(method.data(), method.size()));
  if (verb == bhttp::verb::unknown) {
    return Status::InvalidArgument("unknown HTTP method '" + std::string(method) + "'");
  }
  bhttp::request<bhttp::string_body> req{verb, target, 11};
  req.set(bhttp::field::host, url_.HostHeader());
  req.set(bhttp::field::user_agent, options_.user_agent);
  req.set(bhttp::field::accept,
          on_body ? "text/event-stream, application/json" : "application/json");
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
  ssl::context* tls = pool_->tls ? &*pool_->tls : nullptr;
  auto exchange = [&](Connection& c) -> ExchangeResult {
    c.ioc.restart();
    // One parser for every answer: the header first, then the body in pieces (buffer_body), so
    // that a streamed body reaches `on_body` as it arrives.
    bhttp::response_parser<bhttp::buffer_body> parser;
    parser.body_limit(options_.max_response_bytes);
    parser.header_limit(64 * 1024);
    std::array<char, 16 * 1024> piece;
    std::string whole;  // the body, when it does not go to on_body
    bool to_sink = false;
    Status sink_status;
    tcp::resolver resolver(c.ioc);
    asio::steady_timer resolve_timer(c.ioc);
    bool resolve_timed_out = false;
    Phase phase = Phase::kWrite;
    beast::error_code result;
    bool connected_now = false;

    std::function<void()> read_body = [&] {
      if (parser.is_done()) return;
      parser.get().body().data = piece.data();
      parser.get().body().size = piece.size();
      c.lowest().expires_at(deadline);
      c.Visit([&](auto& s) {
        bhttp::async_read_some(s, c.buffer, parser, [&](beast::error_code ec, size_t) {
          if (ec == bhttp::error::need_buffer) ec = {};
          const size_t n = piece.size() - parser.get().body().size;
          if (n > 0) {
            if (to_sink) {
              sink_status = on_body(std::string_view(piece.data(), n));
              if (!sink_status.ok()) {
                result = asio::error::operation_aborted;
                return;
              }
            } else {
              whole.append(piece.data(), n);
            }
          }
          if (ec) {
            result = ec;
            return;
          }
          read_body();
        });
      });
    };
    auto read = [&] {
      phase = Phase::kRead;
      c.lowest().expires_at(deadline);
      c.Visit([&](auto& s) {
        bhttp::async_read_header(s, c.buffer, parser, [&](beast::error_code ec, size_t) {
          if (ec) {
            result = ec;
            return;
          }
          const unsigned status = parser.get().result_int();
          to_sink = on_body && status >= 200 && status < 300;
          read_body();
        });
      });
    };
    auto write = [&] {
      phase = Phase::kWrite;
      c.lowest().expires_at(deadline);
      c.Visit([&](auto& s) {
        bhttp::async_write(s, req, [&](beast::error_code ec, size_t) {
          if (ec) {
            result = ec;
            return;
          }
          read();
        });
      });
    };
    auto handshake = [&] {
      phase = Phase::kHandshake;
      SSL* ssl_handle = c.secure->native_handle();
      // SNI names the host (never an IP address, RFC 6066); the certificate must name it.
      if (!IsIpAddress(url_.host) && !SSL_set_tlsext_host_name(ssl_handle, url_.host.c_str())) {
        result =
            beast::error_code(static_cast<int>(::ERR_get_error()), asio::error::get_ssl_category());
        return;
      }
      c.secure->set_verify_callback(VerifyHost(url_.host));
      c.lowest().expires_at(deadline);
      c.secure->async_handshake(ssl::stream_base::client, [&](beast::error_code ec) {
        if (ec) {
          result = ec;
          return;
        }
        c.open = true;
        connected_now = true;
        write();
      });
    };
    if (c.open) {
      write();
    } else {
      c.Reset(tls);
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
            c.lowest().expires_at(deadline);
            c.lowest().async_connect(endpoints, [&](beast::error_code cec, const tcp::endpoint&) {
              if (cec) {
                result = cec;
                return;
              }
              if (c.secure) {
                handshake();
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
      response.body = std::move(whole);
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
    long verify = X509_V_OK;
    if (phase == Phase::kHandshake && c.secure) {
      verify = SSL_get_verify_result(c.secure->native_handle());
    }
    c.Close();
    if (!sink_status.ok()) return {sink_status, false};
    const std::string detail = result.message();
    if (result == beast::error::timeout || resolve_timed_out) {
      if (phase == Phase::kResolve || phase == Phase::kConnect || phase == Phase::kHandshake) {
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
      case Phase::kHandshake:
        if (verify != X509_V_OK) {
          return {Status::FailedPrecondition(
                      "the TLS certificate of " + where +
                      " was refused: " + X509_verify_cert_error_string(verify) +
                      (verify == X509_V_ERR_HOSTNAME_MISMATCH
                           ? std::string(" (the certificate does not name ") + url_.host + ")"
                           : std::string(" (not signed by a CA in the system store") +
                                 (options_.ca_file.empty() ? "" : " or " + options_.ca_file) +
                                 "; a private CA can be trusted with ca_file)")),
                  false};
        }
        if (result.category() == asio::error::get_ssl_category() ||
            result.category() == ssl::error::get_stream_category()) {
          return {Status::FailedPrecondition("the TLS handshake with " + where +
                                             " failed: " + detail + " (is it an https server?)"),
                  false};
        }
        return {Status::Unavailable("the TLS handshake with " + where + " failed: " + detail),
                false};
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
        result == bhttp::error::end_of_stream || result == ssl::error::stream_truncated) {
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
