// SearchTable: the boundary searches of the campaigns submitted to the coordinator daemon (table
// coordinator_searches, migration 0010_coordinator_searches; docs/schema.md): per campaign, the
// search's settings and the campaign's whole grid, which the daemon cannot rebuild by itself
// after a restart. What the searches decided is not stored here: it is replayed from the stored
// results (coordinator/search/search_driver.h). It lives in the same SQLite file as the Store,
// on a connection of its own, like coordinator_campaigns (db/campaign_table.h).
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
#include "protocol/control.h"
#include "protocol/job.h"

namespace nw {

namespace db_internal {
class Db;
}

/// One campaign's search: its settings and its grid (the jobs the search may ask for).
struct StoredSearch {
  int64_t campaign_id = 0;
  SubmitSearch settings;
  std::vector<JobSpec> grid;
};

class SearchTable {
 public:
  /// Opens `db_file`, which Store::Open has created or migrated: NotFound when there is no such
  /// file, FailedPrecondition naming the file when it has no coordinator_searches table (a schema
  /// older than migration 0010; db/daemon_table.h).
  static Result<std::unique_ptr<SearchTable>> Open(const std::filesystem::path& db_file);
  explicit SearchTable(std::unique_ptr<db_internal::Db> db);
  ~SearchTable();
  SearchTable(const SearchTable&) = delete;
  SearchTable& operator=(const SearchTable&) = delete;

  /// Inserts or replaces the campaign's search.
  Status Put(const StoredSearch& s, int64_t now_ms);
  /// The campaign's search, or nullopt (a grid campaign). Corruption naming the campaign for a
  /// row whose grid is not a JSON array of JobSpecs.
  Result<std::optional<StoredSearch>> Find(int64_t campaign_id);
  /// Forgets the campaign's search (it was submitted again without one). OK when there is none.
  Status Remove(int64_t campaign_id);

 private:
  std::unique_ptr<db_internal::Db> db_;
};

}  // namespace nw
