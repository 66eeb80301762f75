// DashboardData: what the dashboard's JSON API and /metrics say, read from the database through
// a read-only Store (its own connection: WAL lets it read while the coordinator writes; it never
// writes) and, where a coordinator runs in this process, from its LiveMetrics.
//
//   Campaigns()  every campaign: progress (jobs by state, outcomes), the daemon's run state where
//                one was submitted to a coordinator, throughput over the last 5 minutes, an ETA
//   Report(name) the boundary report: exactly `nw report NAME --format json`
//   Gates(name)  the campaign gated against each baseline (`nw gate --baseline B --candidate
//                NAME`, default options, the campaign's criterion), at most kMaxGates baselines
//   Workers()    registered workers (live) and the database's workers table
//   Failures(n)  the latest failed attempts and results without an answer, with reasons
//   Metrics()    the Prometheus exposition (dashboard/prometheus.h)
//
// Thread-safety: one thread (the Store's); the LiveMetrics it reads is thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "common/status.h"
#include "common/verdict.h"
#include "dashboard/live_metrics.h"
#include "db/store.h"

namespace nw::dashboard {

/// The criterion a campaign states (its stored YAML), or the defaults; supplied by the caller so
/// that this library needs no campaign parser (cli/ passes ParseCampaignCriterion).
using CriterionOf = std::function<Result<Criterion>(const CampaignRecord&)>;

inline constexpr int kMaxGates = 8;         // baselines a campaign is gated against
inline constexpr int kMaxFailures = 200;    // rows Failures() returns at most
inline constexpr int kMaxWorkerRows = 500;  // rows of the workers table returned at most
inline constexpr int64_t kRateWindowMs = 5 * 60 * 1000;
inline constexpr int64_t kStatementLimitMs =
    10'000;  // each read statement (Store::SetStatementLimit)

class DashboardData {
 public:
  /// Opens `db_file` read-only, every statement limited to kStatementLimitMs. `live` may be null
  /// (no coordinator in this process).
  static Result<std::unique_ptr<DashboardData>> Open(const std::filesystem::path& db_file,
                                                     CriterionOf criterion_of,
                                                     const LiveMetrics* live);

  Result<nlohmann::json> Campaigns(int64_t now_wall_ms);
  Result<nlohmann::json> Report(const std::string& campaign);
  Result<nlohmann::json> Gates(const std::string& campaign);
  Result<nlohmann::json> Workers(int64_t now_wall_ms);
  Result<nlohmann::json> Failures(int limit);
  Result<std::string> Metrics(int64_t now_wall_ms);

  DashboardData(std::unique_ptr<Store> store, std::filesystem::path db_file,
                CriterionOf criterion_of, const LiveMetrics* live);

 private:
  Result<Criterion> CriterionFor(const std::string& campaign);

  std::unique_ptr<Store> store_;
  std::filesystem::path db_file_;
  CriterionOf criterion_of_;
  const LiveMetrics* live_;
};

}  // namespace nw::dashboard
