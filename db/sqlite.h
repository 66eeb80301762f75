// Thin RAII layer over the SQLite C API, the one SQLite wrapper of needlework (internal to
// nw_db): an owned connection with a cache of prepared statements, a scoped statement use that
// always resets, a transaction guard that nests with savepoints, a per-statement time limit, and
// the mapping from SQLite result codes to nw::Status. Every error message names the database file
// and the purpose of the statement. db/rows.h maps result rows to structs. Thread-safety: a Db and
// everything taken from it belong to one thread.
#pragma once

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/status.h"

namespace nw::db_internal {

struct SqliteCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StmtFinalizer {
  void operator()(sqlite3_stmt* stmt) const { sqlite3_finalize(stmt); }
};
using DbPtr = std::unique_ptr<sqlite3, SqliteCloser>;
using StmtPtr = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

/// Maps a SQLite result code to a Status: busy/locked -> Unavailable, read-only -> failed
/// precondition, unique -> already exists, foreign key -> failed precondition, other constraints
/// -> invalid argument, corrupt/not-a-db -> corruption, I/O and open errors -> io_error.
StatusCode StatusCodeForSqlite(int extended_rc);

/// An open connection and its statement cache.
class Db {
 public:
  /// A cached prepared statement (stable address: the cache is node-based).
  struct Cached {
    StmtPtr stmt;
    bool in_use = false;
  };

  /// Opens `file` (":memory:" allowed). read_only opens with SQLITE_OPEN_READONLY and never
  /// creates the file; !follow_links refuses a file that is a symbolic link
  /// (SQLITE_OPEN_NOFOLLOW). Errors: "<file>: opening[ read-only]: <sqlite message>".
  static Result<std::unique_ptr<Db>> Open(const std::string& file, bool read_only,
                                          bool follow_links = true);
  /// Takes an open connection (use Open()).
  Db(DbPtr db, std::string file, bool read_only);

  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;
  ~Db();

  sqlite3* get() const { return db_.get(); }
  const std::string& file() const { return file_; }
  bool read_only() const { return read_only_; }

  /// Status for a failed call: "<file>: <purpose>: <sqlite message> (<code name>)".
  Status Error(int rc, std::string_view purpose) const;
  /// Runs one or more statements without results (sqlite3_exec; parsed on every call, so not
  /// for hot paths: use Query, whose statements are prepared once).
  Status Exec(const std::string& sql, std::string_view purpose);
  /// The cached prepared statement for `sql`, prepared on first use and marked in use until
  /// Release(); using the same SQL twice at once is an Internal error.
  Result<Cached*> Acquire(std::string_view sql, std::string_view purpose);
  /// Resets the statement, clears its bindings and marks it free.
  void Release(Cached* cached);

  /// Transaction nesting depth (0: none open by us).
  int txn_depth() const { return txn_depth_; }

  /// The statement time limit (0, the default: none): a statement still running `ms` after its
  /// clock started is interrupted (sqlite3_progress_handler, checked every 1,000 virtual machine
  /// instructions), and Query::Step and Exec then fail with DeadlineExceeded: "<file>: <purpose>:
  /// interrupted after <ms> ms (the statement time limit)". A Query's clock starts at its first
  /// Step; Exec's when it is called; code stepping statements of its own calls
  /// StartStatementClock and asks statement_interrupted().
  void SetStatementLimit(int64_t ms);
  int64_t statement_limit_ms() const { return clock_.limit_ms; }
  /// Arms the limit for the statement about to step: it ends at `start` + the limit (no-op
  /// without a limit).
  void StartStatementClock(std::chrono::steady_clock::time_point start);
  /// Whether the limit interrupted the last statement (reset by StartStatementClock).
  bool statement_interrupted() const { return clock_.expired; }
  /// The DeadlineExceeded status of an interrupted statement.
  Status InterruptedError(std::string_view purpose) const;

 private:
  friend class Txn;

  struct StatementClock {
    int64_t limit_ms = 0;
    std::chrono::steady_clock::time_point deadline;
    bool expired = false;
  };

  // Heterogeneous lookup by string_view: no std::string is built to find a statement.
  struct SqlHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  DbPtr db_;  // declared first: destroyed after the statements
  std::string file_;
  bool read_only_;
  std::unordered_map<std::string, Cached, SqlHash, std::equal_to<>> stmts_;
  int txn_depth_ = 0;
  StatementClock clock_;  // the progress handler's (stable address: a Db does not move)
};

/// One use of a prepared statement: bind, step, read columns. Resets the statement and clears
/// its bindings when destroyed, so no statement keeps a read transaction open.
class Query {
 public:
  /// Prepares (or reuses) `sql` on `db`; errors surface from Step()/Run(). `purpose` names the
  /// statement in error messages; a const char* (a literal) is kept as a pointer, a std::string
  /// is copied, so the success path builds no text.
  Query(Db& db, std::string_view sql, const char* purpose);
  Query(Db& db, std::string_view sql, std::string purpose);
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;
  ~Query();

  // 1-based parameter index, as in SQLite.
  Query& Bind(int i, int64_t v);
  Query& Bind(int i, int v) { return Bind(i, static_cast<int64_t>(v)); }
  Query& Bind(int i, double v);
  Query& Bind(int i, bool v) { return Bind(i, static_cast<int64_t>(v ? 1 : 0)); }
  Query& Bind(int i, std::string_view v);
  Query& Bind(int i, const std::string& v) { return Bind(i, std::string_view(v)); }
  Query& Bind(int i, const char* v) { return Bind(i, std::string_view(v)); }
  Query& BindNull(int i);
  Query& Bind(int i, const std::optional<int64_t>& v) { return v ? Bind(i, *v) : BindNull(i); }

  /// Steps once: true when a row is available, false when done.
  Result<bool> Step();
  /// Steps to completion, ignoring rows (INSERT/UPDATE/DELETE).
  Status Run();
  /// sqlite3_changes() after Run().
  int64_t Changes() const;

  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  double Real(int col) const { return sqlite3_column_double(stmt_, col); }
  bool IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  std::optional<int64_t> OptInt(int col) const {
    return IsNull(col) ? std::nullopt : std::optional<int64_t>(Int(col));
  }
  std::optional<double> OptReal(int col) const {
    return IsNull(col) ? std::nullopt : std::optional<double>(Real(col));
  }
  std::string Text(int col) const;
  /// The column's text without a copy; valid until the next Step() or the end of the Query.
  std::string_view TextView(int col) const;

 private:
  void Prepare(std::string_view sql);
  void NoteBind(int rc, int i);

  Db& db_;
  std::string owned_purpose_;  // when constructed from a std::string
  std::string_view purpose_;
  Db::Cached* cached_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  Status status_;  // first preparation or binding error
  std::optional<std::chrono::steady_clock::time_point> started_;  // first Step (time limit)
};

/// A transaction scope. The outermost one is BEGIN IMMEDIATE (takes the write lock at once, so a
/// second writer waits at BEGIN, not halfway through); nested ones are savepoints. Rolls back
/// on destruction unless committed.
class Txn {
 public:
  explicit Txn(Db& db) : db_(db) {}
  Txn(const Txn&) = delete;
  Txn& operator=(const Txn&) = delete;
  ~Txn();

  /// A write transaction (BEGIN IMMEDIATE; refused on a read-only connection). `purpose` must
  /// outlive the Txn (it names the transaction in error messages).
  Status Begin(std::string_view purpose);
  /// A read transaction (BEGIN DEFERRED): one consistent snapshot for several reads; allowed on
  /// read-only connections.
  Status BeginRead(std::string_view purpose);
  Status Commit();

 private:
  Status Start(std::string_view purpose, const char* begin_sql);
  // Runs a transaction-control statement (prepared once and cached, like any Query).
  Status Control(std::string_view sql, std::string_view what);

  Db& db_;
  std::string_view purpose_;
  int level_ = 0;  // 0: not begun; 1: outermost; >1: savepoint
  bool open_ = false;
};

}  // namespace nw::db_internal
