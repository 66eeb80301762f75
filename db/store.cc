// Store: opening and migrating the database, its connection settings and transactions. The
// other Store methods are in the store_*.cc files (db/store_impl.h lists them).
#include "db/store.h"

#include <chrono>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "db/checkpointer.h"
#include "db/migrations.h"
#include "db/schema.h"
#include "db/sqlite.h"
#include "db/store_impl.h"

namespace nw {

using db_internal::Db;
using db_internal::Query;
using db_internal::Txn;

namespace {

constexpr int kDefaultBusyTimeoutMs = 5000;
// WAL size (pages) that wakes the checkpointer: SQLite's own auto-checkpoint default.
constexpr int kCheckpointPages = 1000;
// The writer's page cache, KiB (SQLite's default is 2 MiB).
constexpr int kCacheKib = 32 * 1024;

}  // namespace

Store::Store(PassKey, std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;

const std::vector<SchemaMigration>& Store::EmbeddedMigrations() {
  static const std::vector<SchemaMigration> kMigrations = [] {
    std::vector<SchemaMigration> out;
    for (size_t i = 0; i < db_internal::kEmbeddedMigrationCount; ++i) {
      const db_internal::EmbeddedMigration& e = db_internal::kEmbeddedMigrations[i];
      SchemaMigration m;
      m.version = e.version;
      m.name = e.name;
      for (size_t p = 0; p < e.piece_count; ++p) m.sql += e.pieces[p];
      out.push_back(std::move(m));
    }
    return out;
  }();
  return kMigrations;
}

int Store::LatestSchemaVersion() { return static_cast<int>(EmbeddedMigrations().size()); }

Result<std::unique_ptr<Store>> Store::Open(const std::filesystem::path& path, Mode mode) {
  return OpenWithMigrations(path, mode, EmbeddedMigrations());
}

Result<std::unique_ptr<Store>> Store::OpenWithMigrations(
    const std::filesystem::path& path, Mode mode, const std::vector<SchemaMigration>& migrations) {
  const std::string file = path.string();
  const bool read_only = mode == Mode::kReadOnly;
  const bool memory = file == ":memory:" || file.empty();
  if (read_only && !memory) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      return Status::NotFound(file + ": no such database (a read-only open never creates one)");
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->mode = mode;
  NW_ASSIGN_OR_RETURN(impl->db, Db::Open(file, read_only));
  Db& db = *impl->db;
  const int rc = sqlite3_busy_timeout(db.get(), kDefaultBusyTimeoutMs);
  if (rc != SQLITE_OK) return db.Error(rc, "setting the busy timeout");
  NW_RETURN_IF_ERROR(db.Exec("PRAGMA foreign_keys = ON", "enabling foreign keys"));
  if (read_only) {
    NW_RETURN_IF_ERROR(db.Exec("PRAGMA query_only = ON", "setting PRAGMA query_only"));
  } else {
    Query q(db, "PRAGMA journal_mode = WAL", "switching to WAL mode");
    NW_ASSIGN_OR_RETURN(bool row, q.Step());
    const std::string journal = row ? q.Text(0) : std::string();
    if (journal != "wal" && !(memory && journal == "memory")) {
      return Status::Unsupported(file + ": switching to WAL mode: the journal mode is '" + journal +
                                 "' (WAL needs a local file system)");
    }
  }
  if (!read_only) {
    NW_RETURN_IF_ERROR(db.Exec("PRAGMA synchronous = NORMAL", "setting PRAGMA synchronous"));
    // The coordinator touches pages at random (keys are SHA-256): keep the recently written ones
    // (in the WAL, read back with read(2)) and the hot index pages in SQLite's cache. (A memory
    // map of the file was measured too: no faster, and it counts the file in RSS.)
    NW_RETURN_IF_ERROR(
        db.Exec("PRAGMA cache_size = -" + std::to_string(kCacheKib), "setting PRAGMA cache_size"));
  }
  NW_RETURN_IF_ERROR(db_internal::Migrate(db, migrations));
  if (!read_only && !memory) {
    NW_ASSIGN_OR_RETURN(impl->checkpointer,
                        db_internal::WalCheckpointer::Start(db, kCheckpointPages));
  }
  return std::make_unique<Store>(PassKey(), std::move(impl));
}

Result<int> Store::SchemaVersion() { return db_internal::ReadSchemaVersion(*impl_->db); }

const std::filesystem::path& Store::path() const { return impl_->path; }
Store::Mode Store::mode() const { return impl_->mode; }

void Store::SetStatementLimit(int64_t ms) { impl_->db->SetStatementLimit(ms); }

Status Store::SetBusyTimeout(int ms) {
  const int rc = sqlite3_busy_timeout(impl_->db->get(), ms);
  if (rc != SQLITE_OK) return impl_->db->Error(rc, "setting the busy timeout");
  return Status::Ok();
}

void Store::SetBusyRetry(BusyRetry retry) { impl_->busy_retry = std::move(retry); }

Store::BusyRetry Store::WaitForLocks(std::string who,
                                     std::function<void(const std::string&)> report,
                                     std::function<bool()> stopping) {
  BusyRetry r;
  r.max_wait_ms = std::numeric_limits<int64_t>::max();
  // One report on the first wait, then at most one every 30 s, across transactions.
  auto next_report = std::make_shared<std::chrono::steady_clock::time_point>();
  r.on_wait = [who = std::move(who), report = std::move(report), stopping = std::move(stopping),
               next_report](const Status& reason, int64_t waited_ms) {
    if (stopping && stopping()) return false;
    const auto now = std::chrono::steady_clock::now();
    if (now < *next_report) return true;
    *next_report = now + std::chrono::seconds(30);
    if (report) {
      report(who + ": another process holds the database lock (" + reason.message() +
             "); waiting and retrying (" + std::to_string(waited_ms / 1000) + " s so far)");
    }
    return true;
  };
  return r;
}

Status Store::InTransaction(const std::function<Status()>& body) {
  return impl_->Write("running a batch", body);
}

Status Store::InReadTransaction(const std::function<Status()>& body) {
  Txn txn(*impl_->db);
  NW_RETURN_IF_ERROR(txn.BeginRead("reading a snapshot"));
  NW_RETURN_IF_ERROR(body());
  return txn.Commit();
}

}  // namespace nw
