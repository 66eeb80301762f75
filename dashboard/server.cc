#include "dashboard/server.h"

#include <sodium.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <charconv>
#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <utility>

#include "common/listen_address.h"

namespace nw::dashboard {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using json = nlohmann::json;

namespace {

// Percent-decoding of one query component ('+' is a space); nullopt for a bad escape.
std::optional<std::string> Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%') {
      int v = 0;
      if (i + 2 >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + 1])) ||
          !std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
        return std::nullopt;
      }
      std::from_chars(s.data() + i + 1, s.data() + i + 3, v, 16);
      out += static_cast<char>(v);
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

struct Target {
  std::string path;
  std::map<std::string, std::string> query;
};

std::optional<Target> ParseTarget(std::string_view target) {
  Target t;
  const size_t q = target.find('?');
  t.path = std::string(target.substr(0, q));
  if (q == std::string_view::npos) return t;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view part = rest.substr(0, amp);
    const size_t eq = part.find('=');
    auto k = Unescape(part.substr(0, eq));
    auto v = Unescape(eq == std::string_view::npos ? std::string_view() : part.substr(eq + 1));
    if (!k || !v) return std::nullopt;
    t.query[*k] = *v;
    if (amp == std::string_view::npos) break;
    rest = rest.substr(amp + 1);
  }
  return t;
}

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Reply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  bool page = false;  // the HTML page: its Content-Security-Policy
  std::vector<std::pair<std::string, std::string>> headers;
};

Reply JsonReply(int status, const json& body) {
  Reply r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

Reply ErrorJson(int status, const std::string& message) {
  return JsonReply(status, json{{"error", message}});
}

int HttpStatusOf(const Status& s) {
  switch (s.code()) {
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
      return 503;
    default:
      return 500;
  }
}

}  // namespace

Result<bool> IsLoopbackListen(const std::string& listen) {
  NW_ASSIGN_OR_RETURN(tcp::endpoint ep, ParseListenAddress(listen, "--http"));
  return ep.address().is_loopback();
}

Result<std::string> ReadTokenFile(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return Status::NotFound("--http-token-file " + file.string() + ": cannot read it");
  std::string line;
  std::getline(in, line);
  const size_t b = line.find_first_not_of(" \t\r");
  const size_t e = line.find_last_not_of(" \t\r");
  line = b == std::string::npos ? std::string() : line.substr(b, e - b + 1);
  if (line.size() < 16) {
    return Status::InvalidArgument("--http-token-file " + file.string() +
                                   ": the token (its first line) must have at least 16 characters");
  }
  for (char c : line) {
    if (c <= ' ' || c > '~') {
      return Status::InvalidArgument("--http-token-file " + file.string() +
                                     ": the token must be visible ASCII without spaces");
    }
  }
  return line;
}

bool TokenMatches(std::string_view presented, std::string_view expected) {
  // Equal-length digests, so the comparison's time depends on neither length nor content.
  unsigned char a[crypto_hash_sha256_BYTES], b[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(a, reinterpret_cast<const unsigned char*>(presented.data()), presented.size());
  crypto_hash_sha256(b, reinterpret_cast<const unsigned char*>(expected.data()), expected.size());
  return sodium_memcmp(a, b, sizeof(a)) == 0;
}

class Session;

struct DashboardServer::Impl {
  // Declared before the io_context: sessions destroyed with it still count themselves out.
  std::atomic<int> connections{0};
  DashboardOptions options;
  std::unique_ptr<DashboardData> data;  // I/O thread only
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  uint16_t port = 0;
  std::string host;
  std::thread io_thread;
  std::atomic<bool> stopped{false};

  void Log(std::string_view line) const {
    if (options.log) options.log(line);
  }
  void Accept();
  Reply Handle(const bhttp::request<bhttp::string_body>& req);
  Reply Api(const Target& t);
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(DashboardServer::Impl* impl, tcp::socket socket)
      : impl_(impl), stream_(std::move(socket)) {
    ++impl_->connections;
  }
  ~Session() { --impl_->connections; }

  void Start() { Read(); }
  void Reject() { Send(ErrorJson(503, "too many connections; try again later"), true); }

 private:
  void Read() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(impl_->options.max_header_bytes));
    parser_->body_limit(0);  // GET only: no request carries a body
    stream_.expires_after(std::chrono::milliseconds(impl_->options.read_timeout_ms));
    bhttp::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    if (ec == bhttp::error::body_limit) {
      return Send(ErrorJson(413, "requests carry no body here (GET only)"), true);
    }
    if (ec == bhttp::error::header_limit) {
      return Send(ErrorJson(431, "request header larger than " +
                                     std::to_string(impl_->options.max_header_bytes) + " bytes"),
                  true);
    }
    if (ec) {
      if (ec == bhttp::error::end_of_stream || ec == beast::error::timeout ||
          ec == asio::error::eof || ec == asio::error::operation_aborted ||
          ec == asio::error::connection_reset || ec == bhttp::error::partial_message) {
        return Close();
      }
      return Send(ErrorJson(400, "malformed HTTP request: " + ec.message()), true);
    }
    const auto& req = parser_->get();
    ++requests_;
    const bool last = !req.keep_alive() || requests_ >= impl_->options.max_requests_per_connection;
    version_ = req.version();
    Send(impl_->Handle(req), last);
  }

  void Send(Reply reply, bool close) {
    if (reply.body.size() > impl_->options.max_response_bytes) {
      reply = ErrorJson(500, "the answer is larger than " +
                                 std::to_string(impl_->options.max_response_bytes) + " bytes");
    }
    auto res = std::make_shared<bhttp::response<bhttp::string_body>>(
        static_cast<bhttp::status>(reply.status), version_);
    res->set(bhttp::field::server, "nw-dashboard");
    res->set(bhttp::field::content_type, reply.content_type);
    res->set(bhttp::field::cache_control, "no-store");
    res->set("X-Content-Type-Options", "nosniff");
    res->set("Referrer-Policy", "no-referrer");
    if (reply.page) {
      res->set("Content-Security-Policy",
               "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
               "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
               "frame-ancestors 'none'");
      res->set("X-Frame-Options", "DENY");
    }
    for (const auto& [k, v] : reply.headers) res->set(k, v);
    res->keep_alive(!close);
    res->body() = std::move(reply.body);
    res->prepare_payload();
    stream_.expires_after(std::chrono::milliseconds(impl_->options.write_timeout_ms));
    bhttp::async_write(stream_, *res,
                       [self = shared_from_this(), res, close](beast::error_code ec, size_t) {
                         if (ec || close || self->impl_->stopped) return self->Close();
                         self->Read();
                       });
  }

  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

  DashboardServer::Impl* impl_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_{16 * 1024};
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  unsigned version_ = 11;
  int requests_ = 0;
};

void DashboardServer::Impl::Accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (stopped) return;
    if (!ec) {
      auto session = std::make_shared<Session>(this, std::move(socket));
      if (connections.load() > options.max_connections) {
        session->Reject();
      } else {
        session->Start();
      }
    }
    Accept();
  });
}

Reply DashboardServer::Impl::Handle(const bhttp::request<bhttp::string_body>& req) {
  if (req.target().size() > options.max_target_bytes) {
    return ErrorJson(414, "URL longer than " + std::to_string(options.max_target_bytes) + " bytes");
  }
  auto target = ParseTarget(std::string_view(req.target().data(), req.target().size()));
  if (!target) return ErrorJson(400, "bad percent-escape in the URL's query");
  if (req.method() != bhttp::verb::get) {
    Reply r = ErrorJson(405, "only GET is served here (the dashboard is read-only)");
    r.headers.emplace_back("Allow", "GET");
    return r;
  }
  if (target->path == "/" || target->path == "/index.html") {
    Reply r;
    r.content_type = "text/html; charset=utf-8";
    r.body = std::string(DashboardPage());
    r.page = true;
    return r;
  }
  if (target->path == "/health") return JsonReply(200, json{{"status", "ok"}});
  if (!options.token.empty()) {
    const auto auth = req[bhttp::field::authorization];
    const std::string_view a(auth.data(), auth.size());
    constexpr std::string_view kBearer = "Bearer ";
    if (a.size() <= kBearer.size() || a.substr(0, kBearer.size()) != kBearer ||
        !TokenMatches(a.substr(kBearer.size()), options.token)) {
      Reply r = ErrorJson(401,
                          "this endpoint needs Authorization: Bearer TOKEN (the token of "
                          "--http-token-file)");
      r.headers.emplace_back("WWW-Authenticate", "Bearer");
      return r;
    }
  }
  return Api(*target);
}

Reply DashboardServer::Impl::Api(const Target& t) {
  const int64_t now = WallMs();
  auto campaign = [&]() -> std::optional<std::string> {
    auto it = t.query.find("campaign");
    if (it == t.query.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
  auto answer = [](const Result<json>& r) {
    return r.ok() ? JsonReply(200, *r) : ErrorJson(HttpStatusOf(r.status()), r.status().message());
  };
  if (t.path == "/metrics") {
    auto m = data->Metrics(now);
    if (!m.ok()) return ErrorJson(HttpStatusOf(m.status()), m.status().message());
    Reply r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = std::move(*m);
    return r;
  }
  if (t.path == "/api/campaigns") return answer(data->Campaigns(now));
  if (t.path == "/api/report" || t.path == "/api/gates") {
    auto name = campaign();
    if (!name) return ErrorJson(400, t.path + " needs ?campaign=NAME");
    return answer(t.path == "/api/report" ? data->Report(*name) : data->Gates(*name));
  }
  if (t.path == "/api/workers") return answer(data->Workers(now));
  if (t.path == "/api/failures") {
    int limit = 50;
    if (auto it = t.query.find("limit"); it != t.query.end()) {
      const std::string& v = it->second;
      auto r = std::from_chars(v.data(), v.data() + v.size(), limit);
      if (r.ec != std::errc() || r.ptr != v.data() + v.size() || limit < 1) {
        return ErrorJson(400, "limit must be a positive integer");
      }
    }
    return answer(data->Failures(limit));
  }
  return ErrorJson(404, "no such endpoint: " + t.path + " (see docs/dashboard.md)");
}

DashboardServer::DashboardServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DashboardServer::~DashboardServer() { Stop(); }

Result<std::unique_ptr<DashboardServer>> DashboardServer::Start(DashboardOptions options) {
  if (sodium_init() < 0) return Status::Internal("libsodium failed to initialise");
  NW_ASSIGN_OR_RETURN(tcp::endpoint ep, ParseListenAddress(options.listen, "--http"));
  if (!ep.address().is_loopback() && options.token.empty()) {
    return Status::InvalidArgument(
        "--http " + options.listen +
        ": serving beyond loopback needs a bearer token (--http-token-file FILE)");
  }
  if (options.max_connections < 1 || options.max_requests_per_connection < 1 ||
      options.read_timeout_ms <= 0 || options.write_timeout_ms <= 0) {
    return Status::InvalidArgument("dashboard: limits must be positive");
  }
  auto impl = std::make_unique<Impl>();
  NW_ASSIGN_OR_RETURN(impl->data,
                      DashboardData::Open(options.db_file, options.criterion_of, options.live));
  impl->options = std::move(options);
  beast::error_code ec;
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status::Unavailable("--http " + impl->options.listen +
                               ": cannot listen: " + ec.message());
  }
  impl->port = impl->acceptor.local_endpoint().port();
  const asio::ip::address a = impl->acceptor.local_endpoint().address();
  impl->host = a.is_v6() ? "[" + a.to_string() + "]" : a.to_string();
  impl->Accept();
  Impl* raw = impl.get();
  impl->io_thread = std::thread([raw] { raw->ioc.run(); });
  return std::make_unique<DashboardServer>(std::move(impl));
}

void DashboardServer::Stop() {
  if (!impl_ || impl_->stopped.exchange(true)) return;
  asio::post(impl_->ioc, [impl = impl_.get()] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
    impl->ioc.stop();
  });
  if (impl_->io_thread.joinable()) impl_->io_thread.join();
}

uint16_t DashboardServer::port() const { return impl_->port; }

std::string DashboardServer::url() const {
  return "http://" + impl_->host + ":" + std::to_string(impl_->port) + "/";
}

}  // namespace nw::dashboard
