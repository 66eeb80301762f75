// DashboardServer: the read-only web face of a coordinator (`nw coordinator --http ADDR`,
// `nw run --http ADDR`), on Boost.Beast. docs/dashboard.md describes every endpoint.
//
//   GET /                        the dashboard page (one embedded HTML file, no external assets)
//   GET /health                  {"status":"ok"}
//   GET /metrics                 Prometheus text format (dashboard/prometheus.h)
//   GET /api/campaigns           campaigns, progress, throughput, ETA
//   GET /api/report?campaign=N   the boundary report (`nw report N --format json`)
//   GET /api/gates?campaign=N    the campaign gated against each baseline
//   GET /api/workers             workers (live and recorded)
//   GET /api/failures?limit=N    recent failed attempts and results without an answer
//
// Security: GET and HEAD only (anything else is 405; nothing writes). Listening on an address
// other than loopback needs a bearer token (Start refuses otherwise); with a token every endpoint
// but / and /health (which carry no data) needs "Authorization: Bearer TOKEN", compared in
// constant time (SHA-256 of both sides, sodium_memcmp). Bounded: request header (8 KiB), URL
// (2 KiB), no request body, connections at once (the next is answered 503 and closed),
// requests per connection, and a deadline per connection (to read a request, and to send its
// answer); answers larger than max_response_bytes are refused (500) rather than sent.
//
// Threads: one I/O thread owned by the server runs every connection and every database read
// (DashboardData, its own read-only connection); a slow report delays the other requests, never
// the coordinator. Start/Stop from any thread; Stop is idempotent and joins the thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "dashboard/data.h"
#include "dashboard/live_metrics.h"

namespace nw::dashboard {

struct DashboardOptions {
  std::string listen = "127.0.0.1:8080";  // host:port (IPv6 as [::1]:8080); port 0 picks one
  std::filesystem::path db_file;
  std::string token;  // "" = none (loopback only); else required for data endpoints
  CriterionOf criterion_of;
  const LiveMetrics* live = nullptr;  // borrowed; outlives the server
  int max_connections = 64;
  int max_requests_per_connection = 1000;
  size_t max_header_bytes = 8 * 1024;
  size_t max_target_bytes = 2 * 1024;
  size_t max_response_bytes = 64 << 20;
  int64_t read_timeout_ms = 15'000;   // to receive one request (and keep-alive idle time)
  int64_t write_timeout_ms = 30'000;  // to send one answer
  std::function<void(std::string_view)> log;
};

/// Whether `listen`'s host is a loopback address (127.0.0.0/8, ::1, localhost).
Result<bool> IsLoopbackListen(const std::string& listen);

/// Reads a bearer token from a file: its first line, surrounding whitespace trimmed. Refuses an
/// empty token, one shorter than 16 characters, or one with characters outside visible ASCII.
Result<std::string> ReadTokenFile(const std::filesystem::path& file);

/// Whether `presented` equals `expected`, in time independent of where they differ.
bool TokenMatches(std::string_view presented, std::string_view expected);

class DashboardServer {
 public:
  /// Validates the options (a non-loopback address without a token is InvalidArgument), opens
  /// the database read-only, binds and starts the I/O thread.
  static Result<std::unique_ptr<DashboardServer>> Start(DashboardOptions options);
  ~DashboardServer();
  DashboardServer(const DashboardServer&) = delete;
  DashboardServer& operator=(const DashboardServer&) = delete;

  void Stop();
  uint16_t port() const;
  std::string url() const;  // "http://HOST:PORT/"

  struct Impl;
  explicit DashboardServer(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

/// The page served at / (dashboard/page.html, embedded at build time).
std::string_view DashboardPage();

}  // namespace nw::dashboard
