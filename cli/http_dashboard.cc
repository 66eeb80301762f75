#include "cli/http_dashboard.h"

#include <iostream>
#include <utility>

#include "coordinator/campaign/campaign.h"

namespace nw::cli {

void AddDashboardFlags(CLI::App* cmd, DashboardFlags& flags) {
  cmd->add_option("--http", flags.http,
                  "Serve the read-only dashboard, JSON API and Prometheus /metrics on HOST:PORT "
                  "(e.g. 127.0.0.1:8080; port 0 picks one; docs/dashboard.md)");
  cmd->add_option("--http-token-file", flags.token_file,
                  "Bearer token for the dashboard's data endpoints (first line of FILE); "
                  "required when --http is not a loopback address");
}

Status CheckDashboardFlags(const DashboardFlags& flags) {
  if (flags.http.empty()) {
    if (!flags.token_file.empty()) {
      return Status::InvalidArgument("--http-token-file needs --http ADDR");
    }
    return Status::Ok();
  }
  NW_ASSIGN_OR_RETURN(bool loopback, dashboard::IsLoopbackListen(flags.http));
  if (flags.token_file.empty()) {
    if (!loopback) {
      return Status::InvalidArgument(
          "--http " + flags.http +
          ": serving beyond loopback needs a bearer token (--http-token-file FILE)");
    }
    return Status::Ok();
  }
  return dashboard::ReadTokenFile(flags.token_file).status();
}

Result<std::unique_ptr<dashboard::DashboardServer>> StartDashboard(const DashboardFlags& flags,
                                                                   const std::string& db_path,
                                                                   const LiveMetrics* live,
                                                                   bool quiet) {
  if (flags.http.empty()) {
    if (!flags.token_file.empty()) {
      return Status::InvalidArgument("--http-token-file needs --http ADDR");
    }
    return std::unique_ptr<dashboard::DashboardServer>();
  }
  dashboard::DashboardOptions o;
  o.listen = flags.http;
  o.db_file = db_path;
  o.live = live;
  if (!flags.token_file.empty()) {
    NW_ASSIGN_OR_RETURN(o.token, dashboard::ReadTokenFile(flags.token_file));
  }
  // The verdicts use the criterion each campaign states (its stored YAML), as `nw report` does.
  o.criterion_of = [](const CampaignRecord& c) -> Result<Criterion> {
    if (c.source_text.empty()) return Criterion{};
    return ParseCampaignCriterion(c.source_text, c.source_path.empty() ? c.name : c.source_path);
  };
  NW_ASSIGN_OR_RETURN(std::unique_ptr<dashboard::DashboardServer> server,
                      dashboard::DashboardServer::Start(std::move(o)));
  if (!quiet) std::cerr << "dashboard: " << server->url() << "\n";
  return server;
}

}  // namespace nw::cli
