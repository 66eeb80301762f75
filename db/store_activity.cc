// Store: the database-wide activity views the dashboard shows (dashboard/data.h): the daemon's
// campaign table, recent result counts per campaign and the latest failures.
#include <string>
#include <vector>

#include "db/rows.h"
#include "db/sqlite.h"
#include "db/store.h"
#include "db/store_impl.h"

namespace nw {

using db_internal::Columns;
using db_internal::Query;
using db_internal::ReadRows;

Result<std::vector<CampaignControl>> Store::CampaignControls() {
  return db_internal::ReadCampaignControls(*impl_->db);
}

Result<std::vector<CampaignResultCount>> Store::RecentResultCounts(int64_t since_ms) {
  Query q(*impl_->db,
          "SELECT cj.campaign_id, COUNT(*), MIN(r.created_ms), MAX(r.created_ms) FROM results r "
          "JOIN campaign_jobs cj ON cj.job_key = r.job_key WHERE r.created_ms >= ?1 "
          "GROUP BY cj.campaign_id ORDER BY cj.campaign_id",
          "counting recent results");
  q.Bind(1, since_ms);
  return ReadRows(q, [](const Query& row) {
    CampaignResultCount c;
    Columns(row).Into(c.campaign_id, c.results, c.first_ms, c.last_ms);
    return c;
  });
}

Result<std::vector<RecentFailure>> Store::RecentFailures(int limit) {
  Query q(*impl_->db,
          "SELECT f.at_ms, f.job_key, f.attempt, f.worker_id, f.kind, f.error_code, "
          "f.error_message, j.state, v.config, "
          "(SELECT group_concat(c.name, ', ') FROM campaign_jobs cj JOIN campaigns c ON c.id = "
          "cj.campaign_id WHERE cj.job_key = f.job_key) "
          "FROM (SELECT a.ended_ms AS at_ms, a.job_key, a.attempt, a.worker_id, "
          "'attempt_' || a.status AS kind, a.error_code, a.error_message FROM attempts a "
          "WHERE a.status IN ('failed', 'lost') AND a.ended_ms IS NOT NULL "
          "UNION ALL SELECT r.created_ms, r.job_key, r.attempt, r.worker_id, r.outcome, "
          "r.error_code, r.error_message FROM results r "
          "WHERE r.outcome IN ('engine_error', 'timeout')) f "
          "JOIN jobs j ON j.key = f.job_key JOIN v_job_config v ON v.key = f.job_key "
          "ORDER BY f.at_ms DESC LIMIT ?1",
          "reading the latest failures");
  q.Bind(1, static_cast<int64_t>(limit));
  return ReadRows(q, [](const Query& row) {
    RecentFailure f;
    Columns(row).Into(f.at_ms, f.job_key, f.attempt, f.worker_id, f.kind, f.error_code,
                      f.error_message, f.job_state, f.config, f.campaigns);
    return f;
  });
}

}  // namespace nw
