#include "db/sqlite.h"

#include <cstdio>
#include <utility>

namespace nw::db_internal {

StatusCode StatusCodeForSqlite(int extended_rc) {
  switch (extended_rc) {
    case SQLITE_CONSTRAINT_UNIQUE:
    case SQLITE_CONSTRAINT_PRIMARYKEY:
      return StatusCode::kAlreadyExists;
    case SQLITE_CONSTRAINT_FOREIGNKEY:
      return StatusCode::kFailedPrecondition;
    default:
      break;
  }
  switch (extended_rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return StatusCode::kUnavailable;
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return StatusCode::kFailedPrecondition;
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_RANGE:
      return StatusCode::kInvalidArgument;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
    case SQLITE_FORMAT:
      return StatusCode::kCorruption;
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_FULL:
    case SQLITE_PROTOCOL:
      return StatusCode::kIoError;
    case SQLITE_NOMEM:
      return StatusCode::kResourceExhausted;
    case SQLITE_TOOBIG:
      return StatusCode::kOutOfRange;
    case SQLITE_INTERRUPT:
    case SQLITE_ABORT:
      return StatusCode::kCancelled;
    default:
      return StatusCode::kInternal;
  }
}

Result<std::unique_ptr<Db>> Db::Open(const std::string& file, bool read_only, bool follow_links) {
  const int flags =
      (read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
      SQLITE_OPEN_NOMUTEX | (follow_links ? 0 : SQLITE_OPEN_NOFOLLOW);
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(file.c_str(), &raw, flags, nullptr);
  DbPtr db(raw);  // sqlite3_open_v2 may hand back a handle even on failure; close it either way
  if (rc != SQLITE_OK) {
    std::string msg = file + ": opening" + (read_only ? " read-only" : "") + ": ";
    msg += raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc);
    return Status(StatusCodeForSqlite(rc), std::move(msg));
  }
  sqlite3_extended_result_codes(db.get(), 1);
  return std::make_unique<Db>(std::move(db), file, read_only);
}

Db::Db(DbPtr db, std::string file, bool read_only)
    : db_(std::move(db)), file_(std::move(file)), read_only_(read_only) {}

Db::~Db() {
  // Statements first (sqlite3_close_v2 would defer the close until they are finalized anyway).
  stmts_.clear();
}

Status Db::Error(int rc, std::string_view purpose) const {
  std::string msg = file_;
  msg += ": ";
  msg += purpose;
  msg += ": ";
  const int ext = db_ ? sqlite3_extended_errcode(db_.get()) : rc;
  // The connection's message belongs to the last failing call; fall back to the code's text.
  if (db_ && (ext & 0xff) == (rc & 0xff)) {
    msg += sqlite3_errmsg(db_.get());
  } else {
    msg += sqlite3_errstr(rc);
  }
  return Status(StatusCodeForSqlite((ext & 0xff) == (rc & 0xff) ? ext : rc), std::move(msg));
}

Status Db::Exec(const std::string& sql, std::string_view purpose) {
  StartStatementClock(std::chrono::steady_clock::now());
  char* err = nullptr;
  const int rc = sqlite3_exec(db_.get(), sql.c_str(), nullptr, nullptr, &err);
  // sqlite3_exec's message is the one of the failing statement; free it and use errmsg (same).
  sqlite3_free(err);
  if (rc != SQLITE_OK)
    return statement_interrupted() ? InterruptedError(purpose) : Error(rc, purpose);
  return Status::Ok();
}

void Db::SetStatementLimit(int64_t ms) {
  clock_.limit_ms = ms > 0 ? ms : 0;
  clock_.expired = false;
  if (clock_.limit_ms == 0) {
    sqlite3_progress_handler(db_.get(), 0, nullptr, nullptr);
    return;
  }
  clock_.deadline = std::chrono::steady_clock::time_point::max();
  sqlite3_progress_handler(
      db_.get(), 1000,
      [](void* user) -> int {
        auto* c = static_cast<StatementClock*>(user);
        if (!c->expired && std::chrono::steady_clock::now() > c->deadline) c->expired = true;
        return c->expired ? 1 : 0;
      },
      &clock_);
}

void Db::StartStatementClock(std::chrono::steady_clock::time_point start) {
  if (clock_.limit_ms == 0) return;
  clock_.expired = false;
  clock_.deadline = start + std::chrono::milliseconds(clock_.limit_ms);
}

Status Db::InterruptedError(std::string_view purpose) const {
  std::string msg = file_;
  msg += ": ";
  msg += purpose;
  msg +=
      ": interrupted after " + std::to_string(clock_.limit_ms) + " ms (the statement time limit)";
  return Status::DeadlineExceeded(std::move(msg));
}

Result<Db::Cached*> Db::Acquire(std::string_view sql, std::string_view purpose) {
  auto it = stmts_.find(sql);
  if (it == stmts_.end()) {
    sqlite3_stmt* raw = nullptr;
    const int rc = sqlite3_prepare_v3(db_.get(), sql.data(), static_cast<int>(sql.size()),
                                      SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
    StmtPtr stmt(raw);
    if (rc != SQLITE_OK) return Error(rc, std::string(purpose) + " (preparing)");
    if (!stmt) return Status::Internal(file_ + ": " + std::string(purpose) + ": empty statement");
    it = stmts_.emplace(std::string(sql), Cached{std::move(stmt), false}).first;
  }
  if (it->second.in_use) {
    return Status::Internal(file_ + ": " + std::string(purpose) +
                            ": statement already in use by an enclosing query");
  }
  it->second.in_use = true;
  return &it->second;
}

void Db::Release(Cached* cached) {
  sqlite3_reset(cached->stmt.get());
  sqlite3_clear_bindings(cached->stmt.get());
  cached->in_use = false;
}

Query::Query(Db& db, std::string_view sql, const char* purpose) : db_(db), purpose_(purpose) {
  Prepare(sql);
}

Query::Query(Db& db, std::string_view sql, std::string purpose)
    : db_(db), owned_purpose_(std::move(purpose)), purpose_(owned_purpose_) {
  Prepare(sql);
}

void Query::Prepare(std::string_view sql) {
  auto cached = db_.Acquire(sql, purpose_);
  if (cached.ok()) {
    cached_ = *cached;
    stmt_ = cached_->stmt.get();
  } else {
    status_ = cached.status();
  }
}

Query::~Query() {
  if (cached_ != nullptr) db_.Release(cached_);
}

void Query::NoteBind(int rc, int i) {
  if (rc != SQLITE_OK && status_.ok()) {
    status_ =
        db_.Error(rc, std::string(purpose_) + " (binding parameter " + std::to_string(i) + ")");
  }
}

Query& Query::Bind(int i, int64_t v) {
  if (stmt_ != nullptr) NoteBind(sqlite3_bind_int64(stmt_, i, v), i);
  return *this;
}

Query& Query::Bind(int i, double v) {
  if (stmt_ != nullptr) NoteBind(sqlite3_bind_double(stmt_, i, v), i);
  return *this;
}

Query& Query::Bind(int i, std::string_view v) {
  if (stmt_ != nullptr) {
    // SQLITE_TRANSIENT: callers may bind temporaries (e.g. a dumped JSON) and step later.
    NoteBind(sqlite3_bind_text64(stmt_, i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8), i);
  }
  return *this;
}

Query& Query::BindNull(int i) {
  if (stmt_ != nullptr) NoteBind(sqlite3_bind_null(stmt_, i), i);
  return *this;
}

Result<bool> Query::Step() {
  if (!status_.ok()) return status_;
  if (db_.statement_limit_ms() > 0) {
    // This statement's own clock, also when another Query stepped in between.
    if (!started_) started_ = std::chrono::steady_clock::now();
    db_.StartStatementClock(*started_);
  }
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  status_ = db_.statement_interrupted() ? db_.InterruptedError(purpose_) : db_.Error(rc, purpose_);
  return status_;
}

Status Query::Run() {
  while (true) {
    NW_ASSIGN_OR_RETURN(bool row, Step());
    if (!row) return Status::Ok();
  }
}

int64_t Query::Changes() const { return sqlite3_changes64(db_.get()); }

std::string Query::Text(int col) const { return std::string(TextView(col)); }

std::string_view Query::TextView(int col) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  if (p == nullptr) return {};
  return std::string_view(p, static_cast<size_t>(sqlite3_column_bytes(stmt_, col)));
}

namespace {

// "SAVEPOINT nw_sp3" and friends without a heap allocation.
struct SavepointSql {
  char buf[48];
  std::string_view Make(const char* verb, int level) {
    const int n = std::snprintf(buf, sizeof(buf), "%s nw_sp%d", verb, level);
    return std::string_view(buf, static_cast<size_t>(n));
  }
};

}  // namespace

Status Txn::Control(std::string_view sql, std::string_view what) {
  // A failure is reported with the purpose; the text is built only then.
  auto cached = db_.Acquire(sql, what);
  if (!cached.ok()) return cached.status();
  sqlite3_stmt* stmt = (*cached)->stmt.get();
  const int rc = sqlite3_step(stmt);
  Status st = Status::Ok();
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
    st = db_.Error(rc, std::string(purpose_) + " (" + std::string(what) + ")");
  }
  db_.Release(*cached);
  return st;
}

Txn::~Txn() {
  if (!open_) return;
  // Best effort: a failed rollback leaves SQLite to roll back when the connection closes.
  if (level_ == 1) {
    (void)Control("ROLLBACK", "rolling back");
  } else {
    SavepointSql sp;
    (void)Control(sp.Make("ROLLBACK TO", level_), "rolling back");
    (void)Control(sp.Make("RELEASE", level_), "rolling back");
  }
  --db_.txn_depth_;
}

Status Txn::Begin(std::string_view purpose) {
  if (db_.read_only()) {
    return Status::FailedPrecondition(db_.file() + ": " + std::string(purpose) +
                                      ": the database is open read-only");
  }
  return Start(purpose, "BEGIN IMMEDIATE");
}

Status Txn::BeginRead(std::string_view purpose) { return Start(purpose, "BEGIN DEFERRED"); }

Status Txn::Start(std::string_view purpose, const char* begin_sql) {
  purpose_ = purpose;
  level_ = db_.txn_depth_ + 1;
  if (level_ == 1) {
    NW_RETURN_IF_ERROR(Control(begin_sql, "beginning transaction"));
  } else {
    SavepointSql sp;
    NW_RETURN_IF_ERROR(Control(sp.Make("SAVEPOINT", level_), "savepoint"));
  }
  ++db_.txn_depth_;
  open_ = true;
  return Status::Ok();
}

Status Txn::Commit() {
  if (!open_) {
    return Status::Internal(db_.file() + ": " + std::string(purpose_) + ": commit without begin");
  }
  if (level_ == 1) {
    NW_RETURN_IF_ERROR(Control("COMMIT", "committing"));
  } else {
    SavepointSql sp;
    NW_RETURN_IF_ERROR(Control(sp.Make("RELEASE", level_), "releasing savepoint"));
  }
  open_ = false;
  --db_.txn_depth_;
  return Status::Ok();
}

}  // namespace nw::db_internal
