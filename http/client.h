// HttpClient: a small HTTP/1.1 client for one server (Boost.Beast), with a keep-alive connection
// pool, a limit on requests in flight, and one deadline per exchange. https:// servers are
// reached through Beast's SSL stream (OpenSSL): the certificate must chain to the system's CA
// store (or to the certificates of HttpClientOptions::ca_file) and name the URL's host (SNI is
// sent for host names; IP addresses are matched against the certificate's IP entries).
//
// Each pooled connection owns a private io_context that runs on the calling thread for the
// length of one exchange (resolve, connect, send, receive), so requests on different threads
// never share I/O state. A connection goes back to the pool when the server keeps it alive; an
// exchange that fails on a reused connection before any byte of the answer arrived (the server
// closed it while idle) is tried once more on a fresh connection.
// Thread-safety: Send and stats may be called from any number of threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace nw {

/// http(s)://host[:port][/v1[/]]: where a server is. IPv6 hosts are written in brackets.
struct HttpUrl {
  std::string host;  // without brackets
  uint16_t port = 80;
  bool tls = false;  // https: port 443 unless given

  /// Errors (InvalidArgument) for other schemes, credentials in the URL, a bad port, or a path
  /// other than "", "/", "/v1" and "/v1/".
  static Result<HttpUrl> Parse(std::string_view url);
  /// "http://host:port" or "https://host:port" (brackets around IPv6 hosts).
  std::string Origin() const;
  /// The Host header value.
  std::string HostHeader() const;
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpResponse {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lowercase names
};

struct HttpClientOptions {
  int max_in_flight = 1;                  // concurrent exchanges; further callers wait their turn
  size_t max_response_bytes = 256 << 20;  // larger answers fail with ResourceExhausted
  HttpHeaders headers;                    // sent with every request
  std::string user_agent = "needlework";
  std::string ca_file;  // https: PEM certificates trusted besides the system's CA store
};

/// Receives a successful (2xx) response body piece by piece as it arrives. An error it returns
/// ends the exchange (the connection is closed) and is what Send returns.
using HttpBodySink = std::function<Status(std::string_view bytes)>;

class HttpClient {
 public:
  HttpClient(HttpUrl url, HttpClientOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  /// One request and its response within `timeout` (resolve, connect, send and receive; waiting
  /// for a free slot is not counted). `target` is the path ("/v1/completions"); a non-empty
  /// body is sent as application/json. Any HTTP status is a success here. Errors:
  ///   Unavailable       no connection (refused, unreachable, a connect that timed out), the
  ///                     connection closed or reset, a response cut short, a malformed response;
  ///   DeadlineExceeded  connected and sent, but no complete response within the timeout;
  ///   ResourceExhausted the response is larger than max_response_bytes;
  ///   FailedPrecondition https only: the server's certificate is not trusted or does not name
  ///                     the host, the TLS handshake failed, or ca_file cannot be loaded (each
  ///                     message names the URL; retrying cannot help).
  /// With `on_body`, a 2xx body goes to it as it arrives (response.body stays empty); other
  /// statuses are read whole into response.body as without it.
  Result<HttpResponse> Send(std::string_view method, const std::string& target,
                            const std::string& body, std::chrono::milliseconds timeout,
                            const HttpHeaders& extra_headers = {},
                            const HttpBodySink& on_body = {});

  struct Stats {
    int64_t exchanges = 0;           // Send calls that got a response
    int64_t connections_opened = 0;  // TCP connections established
    int64_t idle = 0;                // connections waiting in the pool now
  };
  Stats stats() const;
  const HttpUrl& url() const { return url_; }

 private:
  struct Connection;
  struct Pool;

  HttpUrl url_;
  HttpClientOptions options_;
  std::unique_ptr<Pool> pool_;
};

}  // namespace nw
