// --http ADDR and --http-token-file FILE of `nw coordinator` and `nw run`: the read-only dashboard
// (dashboard/server.h, docs/dashboard.md) over the command's database and live metrics.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "dashboard/live_metrics.h"
#include "dashboard/server.h"

namespace nw::cli {

struct DashboardFlags {
  std::string http;        // "" = no dashboard
  std::string token_file;  // required beyond loopback
};

/// Adds --http and --http-token-file to `cmd`.
void AddDashboardFlags(CLI::App* cmd, DashboardFlags& flags);

/// Checks the flags before anything is written: a token file without --http, a bad address, a
/// non-loopback address without a token, an unreadable or too short token (InvalidArgument or
/// NotFound, naming the flag).
Status CheckDashboardFlags(const DashboardFlags& flags);

/// Starts the dashboard when --http was given (null when not) and prints its URL to stderr
/// (unless quiet). Errors: bad flags (InvalidArgument: a token file without --http, a
/// non-loopback address without a token), an unreadable token file, a port in use.
Result<std::unique_ptr<dashboard::DashboardServer>> StartDashboard(const DashboardFlags& flags,
                                                                   const std::string& db_path,
                                                                   const LiveMetrics* live,
                                                                   bool quiet);

}  // namespace nw::cli
