// CampaignTable: the coordinator daemon's record of the campaigns submitted to it, with their
// priority and state (active, paused, cancelled), kept in the same SQLite file as the Store so
// that a restarted daemon recovers it with everything else. It is the table
// `coordinator_campaigns`, created by the Store's migration 0004_coordinator_campaigns
// (docs/schema.md); this class reads and writes it on a connection of its own.
// Only the daemon writes it; `nw run` never reads it.
//
// Thread-safety: owned by the coordinator's loop thread (one SQLite connection).
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace nw {

enum class CampaignRunState { kActive, kPaused, kCancelled };
std::string_view CampaignRunStateName(CampaignRunState s);  // active, paused, cancelled
Result<CampaignRunState> ParseCampaignRunState(std::string_view name);

struct CampaignControl {
  int64_t campaign_id = 0;  // campaigns.id in the Store
  std::string name;
  int priority = 0;
  CampaignRunState state = CampaignRunState::kActive;
  int64_t submitted_ms = 0;  // first submission (kept on update)
  int64_t updated_ms = 0;
};

class CampaignTable {
 public:
  /// Opens `db_file`, which Store::Open has created or migrated: FailedPrecondition naming the
  /// file when it has no coordinator_campaigns table (a schema older than migration 0004).
  static Result<std::unique_ptr<CampaignTable>> Open(const std::filesystem::path& db_file);
  ~CampaignTable();
  CampaignTable(const CampaignTable&) = delete;
  CampaignTable& operator=(const CampaignTable&) = delete;

  /// Every campaign, by id.
  Result<std::vector<CampaignControl>> List();
  Result<std::optional<CampaignControl>> Find(int64_t campaign_id);
  /// Inserts or updates by campaign_id (submitted_ms of an existing row is kept).
  Status Put(const CampaignControl& c);

 private:
  struct Closer {
    void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
  };
  struct PassKey {
    explicit PassKey() = default;
  };

 public:
  /// Use Open().
  CampaignTable(PassKey, std::unique_ptr<sqlite3, Closer> db, std::string file);

 private:
  Status Error(int rc, std::string_view what) const;

  std::unique_ptr<sqlite3, Closer> db_;
  std::string file_;
};

}  // namespace nw
