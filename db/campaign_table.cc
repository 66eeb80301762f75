#include "db/campaign_table.h"

#include <string>
#include <utility>

#include "db/daemon_table.h"
#include "db/rows.h"
#include "db/sqlite.h"
#include "db/store_impl.h"

namespace nw {

using db_internal::Columns;
using db_internal::Db;
using db_internal::Query;

std::string_view CampaignRunStateName(CampaignRunState s) {
  switch (s) {
    case CampaignRunState::kActive:
      return "active";
    case CampaignRunState::kPaused:
      return "paused";
    case CampaignRunState::kCancelled:
      return "cancelled";
  }
  return "active";
}

Result<CampaignRunState> ParseCampaignRunState(std::string_view name) {
  for (auto s :
       {CampaignRunState::kActive, CampaignRunState::kPaused, CampaignRunState::kCancelled}) {
    if (CampaignRunStateName(s) == name) return s;
  }
  return Status::Corruption("unknown campaign state '" + std::string(name) + "'");
}

namespace db_internal {

Result<std::vector<CampaignControl>> ReadCampaignControls(Db& db) {
  Query q(db,
          "SELECT campaign_id, name, priority, state, submitted_ms, updated_ms "
          "FROM coordinator_campaigns ORDER BY campaign_id",
          "listing coordinator_campaigns");
  return ReadRows(q, [&db](const Query& row) -> Result<CampaignControl> {
    CampaignControl c;
    std::string state;
    Columns(row).Into(c.campaign_id, c.name, c.priority, state, c.submitted_ms, c.updated_ms);
    auto parsed = ParseCampaignRunState(state);
    if (!parsed.ok()) {
      return Status::Corruption(db.file() + ": coordinator_campaigns, campaign " +
                                std::to_string(c.campaign_id) + ": " + parsed.status().message());
    }
    c.state = *parsed;
    return c;
  });
}

}  // namespace db_internal

Result<std::unique_ptr<CampaignTable>> CampaignTable::Open(const std::filesystem::path& db_file) {
  NW_ASSIGN_OR_RETURN(
      std::unique_ptr<Db> db,
      db_internal::OpenDaemonTable(db_file, "coordinator_campaigns", "0004_coordinator_campaigns"));
  return std::make_unique<CampaignTable>(std::move(db));
}

CampaignTable::CampaignTable(std::unique_ptr<Db> db) : db_(std::move(db)) {}
CampaignTable::~CampaignTable() = default;

Result<std::vector<CampaignControl>> CampaignTable::List() {
  return db_internal::ReadCampaignControls(*db_);
}

Result<std::optional<CampaignControl>> CampaignTable::Find(int64_t campaign_id) {
  NW_ASSIGN_OR_RETURN(auto all, List());
  for (auto& c : all) {
    if (c.campaign_id == campaign_id) return std::optional<CampaignControl>(std::move(c));
  }
  return std::optional<CampaignControl>();
}

Status CampaignTable::Put(const CampaignControl& c) {
  Query q(*db_,
          "INSERT INTO coordinator_campaigns (campaign_id, name, priority, state, submitted_ms, "
          "updated_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (campaign_id) DO UPDATE SET "
          "name = excluded.name, priority = excluded.priority, state = excluded.state, "
          "updated_ms = excluded.updated_ms",
          "writing coordinator_campaigns");
  q.Bind(1, c.campaign_id)
      .Bind(2, c.name)
      .Bind(3, c.priority)
      .Bind(4, CampaignRunStateName(c.state))
      .Bind(5, c.submitted_ms)
      .Bind(6, c.updated_ms);
  return q.Run();
}

}  // namespace nw
