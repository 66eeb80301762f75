// Opening one of the coordinator daemon's tables (coordinator_campaigns, coordinator_searches) on
// a connection of its own: the tables come from the Store's migrations, so the file must have
// been opened with Store::Open (which creates and migrates it) first. Internal to nw_db.
// Thread-safety: a pure function; the connection it returns belongs to one thread.
#pragma once

#include <filesystem>
#include <memory>
#include <string_view>

#include "common/status.h"
#include "db/sqlite.h"

namespace nw::db_internal {

/// Opens `db_file` read-write with the Store's busy timeout (5 s) and checks that it has `table`.
/// Errors: NotFound when there is no such file; FailedPrecondition naming the file, the table
/// and `migration` (the one that creates it) when the table is missing; SQLite's, naming the file.
Result<std::unique_ptr<Db>> OpenDaemonTable(const std::filesystem::path& db_file,
                                            std::string_view table, std::string_view migration);

}  // namespace nw::db_internal
