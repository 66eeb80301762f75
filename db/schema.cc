#include "db/schema.h"

#include <cctype>
#include <chrono>
#include <string>
#include <string_view>

#include "common/sha256.h"

namespace nw::db_internal {
namespace {

struct Applied {
  int version = 0;
  std::string name;
  std::string sha256;
};

Result<bool> HasVersionTable(Db& db) {
  Query q(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'",
          "looking for table schema_version");
  return q.Step();
}

Result<std::vector<Applied>> ReadApplied(Db& db) {
  std::vector<Applied> out;
  NW_ASSIGN_OR_RETURN(bool has_table, HasVersionTable(db));
  if (!has_table) return out;
  Query q(db, "SELECT version, name, sha256 FROM schema_version ORDER BY version",
          "reading table schema_version");
  while (true) {
    NW_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    out.push_back(Applied{static_cast<int>(q.Int(0)), q.Text(1), q.Text(2)});
  }
  return out;
}

// The database's version must not be newer than the list, and every migration it recorded must
// be the list's migration of the same number, unchanged.
Status CheckApplied(Db& db, const std::vector<SchemaMigration>& migrations,
                    const std::vector<Applied>& applied) {
  const int latest = static_cast<int>(migrations.size());
  for (const Applied& a : applied) {
    if (a.version > latest) {
      return Status::FailedPrecondition(
          db.file() + ": database schema version " + std::to_string(applied.back().version) +
          " (migration " + a.name + ") is newer than this build, which knows migrations up to " +
          std::to_string(latest) + "; open it with a newer nw build");
    }
    if (a.version < 1) {
      return Status::Corruption(db.file() + ": table schema_version holds version " +
                                std::to_string(a.version));
    }
    const SchemaMigration& m = migrations[static_cast<size_t>(a.version - 1)];
    const std::string sha = Sha256Hex(m.sql);
    if (a.name != m.name || a.sha256 != sha) {
      return Status::FailedPrecondition(
          db.file() + ": migration " + std::to_string(a.version) + " was applied as '" + a.name +
          "' (sha256 " + a.sha256.substr(0, 12) + "), but this build has '" + m.name +
          "' (sha256 " + sha.substr(0, 12) +
          "); applied migrations must never change (add a new one instead)");
    }
  }
  // Versions must be 1..current without gaps.
  for (size_t i = 0; i < applied.size(); ++i) {
    if (applied[i].version != static_cast<int>(i) + 1) {
      return Status::Corruption(db.file() + ": table schema_version has a gap before version " +
                                std::to_string(applied[i].version));
    }
  }
  return Status::Ok();
}

// Skips whitespace and SQL comments; returns the first keyword, upper-cased.
std::string FirstKeyword(std::string_view sql) {
  size_t i = 0;
  while (i < sql.size()) {
    if (std::isspace(static_cast<unsigned char>(sql[i]))) {
      ++i;
    } else if (sql.substr(i, 2) == "--") {
      const size_t nl = sql.find('\n', i);
      i = nl == std::string_view::npos ? sql.size() : nl + 1;
    } else if (sql.substr(i, 2) == "/*") {
      const size_t end = sql.find("*/", i + 2);
      i = end == std::string_view::npos ? sql.size() : end + 2;
    } else {
      break;
    }
  }
  std::string word;
  while (i < sql.size() && std::isalpha(static_cast<unsigned char>(sql[i]))) {
    word += static_cast<char>(std::toupper(static_cast<unsigned char>(sql[i])));
    ++i;
  }
  return word;
}

// Runs a migration's statements one by one. Transaction control inside a migration would
// commit or undo the enclosing migration transaction, so it is refused before it runs.
Status ExecMigration(Db& db, const SchemaMigration& m) {
  const std::string purpose = "applying migration " + m.name + ".sql";
  const char* tail = m.sql.c_str();
  const char* end = m.sql.c_str() + m.sql.size();
  while (tail < end) {
    sqlite3_stmt* raw = nullptr;
    const char* next = nullptr;
    const int rc = sqlite3_prepare_v2(db.get(), tail, static_cast<int>(end - tail), &raw, &next);
    StmtPtr stmt(raw);
    if (rc != SQLITE_OK) return db.Error(rc, purpose);
    if (!stmt) break;  // only whitespace or comments left
    const std::string kw = FirstKeyword(std::string_view(tail, static_cast<size_t>(next - tail)));
    if (kw == "BEGIN" || kw == "COMMIT" || kw == "END" || kw == "ROLLBACK" || kw == "SAVEPOINT" ||
        kw == "RELEASE") {
      return Status::InvalidArgument(db.file() + ": " + purpose + ": contains " + kw +
                                     "; migrations run inside the store's transaction and must "
                                     "not control transactions");
    }
    int step;
    while ((step = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    }
    if (step != SQLITE_DONE) return db.Error(step, purpose);
    tail = next;
  }
  return Status::Ok();
}

}  // namespace

Result<int> ReadSchemaVersion(Db& db) {
  NW_ASSIGN_OR_RETURN(std::vector<Applied> applied, ReadApplied(db));
  return applied.empty() ? 0 : applied.back().version;
}

Status ValidateMigrations(const std::vector<SchemaMigration>& migrations) {
  if (migrations.empty()) return Status::InvalidArgument("schema migrations: the list is empty");
  for (size_t i = 0; i < migrations.size(); ++i) {
    const SchemaMigration& m = migrations[i];
    if (m.version != static_cast<int>(i) + 1) {
      return Status::InvalidArgument("schema migrations: entry " + std::to_string(i + 1) + " ('" +
                                     m.name + "') has version " + std::to_string(m.version) +
                                     "; versions run 1..N in order");
    }
    if (m.name.empty()) {
      return Status::InvalidArgument("schema migrations: migration " + std::to_string(m.version) +
                                     " has no name");
    }
    if (FirstKeyword(m.sql).empty()) {
      return Status::InvalidArgument("schema migrations: " + m.name + " has no statements");
    }
  }
  return Status::Ok();
}

Status Migrate(Db& db, const std::vector<SchemaMigration>& migrations) {
  NW_RETURN_IF_ERROR(ValidateMigrations(migrations));
  const int latest = static_cast<int>(migrations.size());

  // First look without the write lock: an up-to-date or read-only database needs none.
  NW_ASSIGN_OR_RETURN(std::vector<Applied> applied, ReadApplied(db));
  NW_RETURN_IF_ERROR(CheckApplied(db, migrations, applied));
  int current = applied.empty() ? 0 : applied.back().version;
  if (current == latest) return Status::Ok();
  if (db.read_only()) {
    return Status::FailedPrecondition(
        db.file() + ": database schema version " + std::to_string(current) +
        " is older than this build's " + std::to_string(latest) +
        "; a read-only open cannot migrate it (open it read-write once, e.g. with the "
        "coordinator)");
  }

  Txn txn(db);
  NW_RETURN_IF_ERROR(txn.Begin("migrating the schema"));
  // Again under the write lock: another process may have migrated meanwhile.
  NW_ASSIGN_OR_RETURN(applied, ReadApplied(db));
  NW_RETURN_IF_ERROR(CheckApplied(db, migrations, applied));
  current = applied.empty() ? 0 : applied.back().version;
  NW_RETURN_IF_ERROR(
      db.Exec("CREATE TABLE IF NOT EXISTS schema_version ("
              " version INTEGER PRIMARY KEY, name TEXT NOT NULL, sha256 TEXT NOT NULL,"
              " applied_ms INTEGER NOT NULL)",
              "creating table schema_version"));
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  for (int v = current + 1; v <= latest; ++v) {
    const SchemaMigration& m = migrations[static_cast<size_t>(v - 1)];
    NW_RETURN_IF_ERROR(ExecMigration(db, m));
    Query q(db,
            "INSERT INTO schema_version (version, name, sha256, applied_ms) VALUES (?, ?, ?, ?)",
            "recording migration in table schema_version");
    q.Bind(1, m.version).Bind(2, m.name).Bind(3, Sha256Hex(m.sql)).Bind(4, now_ms);
    NW_RETURN_IF_ERROR(q.Run());
  }
  NW_RETURN_IF_ERROR(
      db.Exec("PRAGMA user_version = " + std::to_string(latest), "setting PRAGMA user_version"));
  return txn.Commit();
}

}  // namespace nw::db_internal
