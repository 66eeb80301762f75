#include "db/search_table.h"

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "db/daemon_table.h"
#include "db/sqlite.h"

namespace nw {

using db_internal::Db;
using db_internal::Query;
using json = nlohmann::json;

Result<std::unique_ptr<SearchTable>> SearchTable::Open(const std::filesystem::path& db_file) {
  NW_ASSIGN_OR_RETURN(
      std::unique_ptr<Db> db,
      db_internal::OpenDaemonTable(db_file, "coordinator_searches", "0010_coordinator_searches"));
  return std::make_unique<SearchTable>(std::move(db));
}

SearchTable::SearchTable(std::unique_ptr<Db> db) : db_(std::move(db)) {}
SearchTable::~SearchTable() = default;

Status SearchTable::Put(const StoredSearch& s, int64_t now_ms) {
  json grid = json::array();
  for (const JobSpec& j : s.grid) grid.push_back(j.ToJson());
  Query q(*db_,
          "INSERT INTO coordinator_searches (campaign_id, trials, first_trials, confidence, "
          "pass_rate, budget, grid_json, updated_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) "
          "ON CONFLICT (campaign_id) DO UPDATE SET trials = excluded.trials, "
          "first_trials = excluded.first_trials, confidence = excluded.confidence, "
          "pass_rate = excluded.pass_rate, budget = excluded.budget, "
          "grid_json = excluded.grid_json, updated_ms = excluded.updated_ms",
          "writing coordinator_searches");
  q.Bind(1, s.campaign_id)
      .Bind(2, s.settings.trials)
      .Bind(3, s.settings.first_trials)
      .Bind(4, s.settings.confidence)
      .Bind(5, s.settings.pass_rate)
      .Bind(6, s.settings.budget)
      .Bind(7, grid.dump())
      .Bind(8, now_ms);
  return q.Run();
}

Result<std::optional<StoredSearch>> SearchTable::Find(int64_t campaign_id) {
  Query q(*db_,
          "SELECT trials, first_trials, confidence, pass_rate, budget, grid_json "
          "FROM coordinator_searches WHERE campaign_id = ?1",
          "reading coordinator_searches");
  q.Bind(1, campaign_id);
  NW_ASSIGN_OR_RETURN(bool found, q.Step());
  if (!found) return std::optional<StoredSearch>();
  StoredSearch s;
  s.campaign_id = campaign_id;
  s.settings.trials = static_cast<int>(q.Int(0));
  s.settings.first_trials = static_cast<int>(q.Int(1));
  s.settings.confidence = q.Real(2);
  s.settings.pass_rate = q.Real(3);
  s.settings.budget = q.OptInt(4);
  const std::string where = db_->file() + ": coordinator_searches, campaign " +
                            std::to_string(campaign_id) + ": grid_json";
  const json grid = json::parse(q.TextView(5), nullptr, /*allow_exceptions=*/false);
  if (!grid.is_array()) return Status::Corruption(where + ": not a JSON array");
  s.grid.reserve(grid.size());
  for (size_t i = 0; i < grid.size(); ++i) {
    auto spec = JobSpec::FromJson(grid[i]);
    if (!spec.ok()) {
      return Status::Corruption(where + "[" + std::to_string(i) + "]: " + spec.status().message());
    }
    s.grid.push_back(std::move(spec).value());
  }
  return std::optional<StoredSearch>(std::move(s));
}

Status SearchTable::Remove(int64_t campaign_id) {
  Query q(*db_, "DELETE FROM coordinator_searches WHERE campaign_id = ?1",
          "removing from coordinator_searches");
  q.Bind(1, campaign_id);
  return q.Run();
}

}  // namespace nw
