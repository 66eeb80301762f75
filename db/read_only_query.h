// One read-only SQL statement of the user's against the needlework database (`nw query`, the
// dashboard's reads), its rows handed on one at a time. report/query.h formats them.
//
// Read-only is enforced three ways, each enough on its own for the common cases:
//   1. the file is opened with SQLITE_OPEN_READONLY and PRAGMA query_only = ON;
//   2. an authorizer (sqlite3_set_authorizer) allows only SELECT, reading columns, calling
//      functions (except load_extension and fts3_tokenizer), recursive CTEs, and a whitelist of
//      PRAGMAs that only read (table_info(...), user_version without a value, ...); it refuses
//      INSERT / UPDATE / DELETE, CREATE / DROP / ALTER of anything (temp objects included),
//      ATTACH / DETACH, BEGIN / COMMIT / SAVEPOINT, ANALYZE, REINDEX and every other PRAGMA;
//   3. the prepared statement must be sqlite3_stmt_readonly() (this is what stops VACUUM INTO,
//      which writes a new file and has no authorizer action of its own).
// Exactly one statement is run: anything but whitespace and comments after it is refused.
// Thread-safety: each call opens and closes its own connection.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/status.h"

namespace nw {

/// One SQLite value, as stored.
struct SqlValue {
  enum class Type { kNull, kInteger, kReal, kText, kBlob };
  Type type = Type::kNull;
  int64_t integer = 0;
  double real = 0;
  std::string text;  // kText: UTF-8; kBlob: the raw bytes
};

struct QueryResult {
  std::vector<std::string> columns;
  std::vector<std::vector<SqlValue>> rows;
};

struct QueryOptions {
  int64_t timeout_ms = 0;  // > 0: interrupt the statement after this long (DeadlineExceeded)
  int64_t max_rows = 0;    // > 0: fail with ResourceExhausted past this many rows
};

/// Receives a statement's result while it is stepped: the column names once, then each row
/// (only the current row is held). A non-OK status from either stops the statement and is
/// what the query returns.
class QueryRowSink {
 public:
  virtual ~QueryRowSink() = default;
  virtual Status Columns(const std::vector<std::string>& columns) = 0;
  virtual Status Row(const std::vector<SqlValue>& row) = 0;
};

/// Runs `sql` (one statement) read-only against the database file and hands the rows to `sink`
/// one at a time, so memory stays bounded by one row whatever the result's size; returns the
/// number of rows. Errors: NotFound (no such file), InvalidArgument (empty SQL, more than one
/// statement, SQL errors, anything the read-only rules refuse; the message says what was
/// refused), DeadlineExceeded (past timeout_ms; the rows before it were handed on),
/// ResourceExhausted (a row past max_rows; the first max_rows were handed on), the sink's
/// errors, and the SQLite errors of opening the file.
Result<int64_t> StreamReadOnlyQuery(const std::filesystem::path& db_file, const std::string& sql,
                                    const QueryOptions& options, QueryRowSink& sink);

/// StreamReadOnlyQuery collecting every row in memory (for small results: reports, tests).
Result<QueryResult> RunReadOnlyQuery(const std::filesystem::path& db_file, const std::string& sql,
                                     const QueryOptions& options = {});

}  // namespace nw
