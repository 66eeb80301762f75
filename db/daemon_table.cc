#include "db/daemon_table.h"

#include <sqlite3.h>

#include <string>

namespace nw::db_internal {

Result<std::unique_ptr<Db>> OpenDaemonTable(const std::filesystem::path& db_file,
                                            std::string_view table, std::string_view migration) {
  const std::string file = db_file.string();
  if (!std::filesystem::exists(db_file)) {
    return Status::NotFound(file + ": no such database (open it with Store::Open)");
  }
  NW_ASSIGN_OR_RETURN(std::unique_ptr<Db> db, Db::Open(file, /*read_only=*/false));
  if (const int rc = sqlite3_busy_timeout(db->get(), 5000); rc != SQLITE_OK) {
    return db->Error(rc, "setting the busy timeout");
  }
  bool found = false;
  {
    Query q(*db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
            "looking for table " + std::string(table));
    q.Bind(1, table);
    NW_ASSIGN_OR_RETURN(found, q.Step());
  }
  if (!found) {
    return Status::FailedPrecondition(
        file + ": no table " + std::string(table) + ": the database is older than migration " +
        std::string(migration) + " (open it with Store::Open, which migrates it, first)");
  }
  return db;
}

}  // namespace nw::db_internal
