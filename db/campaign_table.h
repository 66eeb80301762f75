// CampaignTable: the coordinator daemon's record of the campaigns submitted to it, with their
// priority and state (active, paused, cancelled; db/campaign_control.h), kept in the same SQLite
// file as the Store so that a restarted daemon recovers it with everything else. It is the table
// `coordinator_campaigns`, created by the Store's migration 0004_coordinator_campaigns
// (docs/schema.md); this class reads and writes it on a connection of its own.
// Only the daemon writes it; `nw run` never reads it.
//
// Thread-safety: owned by the coordinator's loop thread (one SQLite connection).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "common/status.h"
#include "db/campaign_control.h"

namespace nw {

namespace db_internal {
class Db;
}

class CampaignTable {
 public:
  /// Opens `db_file`, which Store::Open has created or migrated: NotFound when there is no such
  /// file, FailedPrecondition naming the file when it has no coordinator_campaigns table (a
  /// schema older than migration 0004).
  static Result<std::unique_ptr<CampaignTable>> Open(const std::filesystem::path& db_file);
  /// Use Open().
  explicit CampaignTable(std::unique_ptr<db_internal::Db> db);
  ~CampaignTable();
  CampaignTable(const CampaignTable&) = delete;
  CampaignTable& operator=(const CampaignTable&) = delete;

  /// Every campaign, by id.
  Result<std::vector<CampaignControl>> List();
  Result<std::optional<CampaignControl>> Find(int64_t campaign_id);
  /// Inserts or updates by campaign_id (submitted_ms of an existing row is kept).
  Status Put(const CampaignControl& c);

 private:
  std::unique_ptr<db_internal::Db> db_;
};

}  // namespace nw
