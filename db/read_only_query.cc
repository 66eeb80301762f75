#include "db/read_only_query.h"

#include <sqlite3.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "db/sqlite.h"

namespace nw {
namespace {

using db_internal::Db;
using db_internal::StmtPtr;

// PRAGMAs whose argument names a table or index (or that take none): they only read.
constexpr std::array<std::string_view, 8> kIntrospectionPragmas = {
    "table_info", "table_xinfo", "table_list",       "index_list",
    "index_info", "index_xinfo", "foreign_key_list", "foreign_key_check"};
// PRAGMAs that read a setting when given no value (and would change it when given one).
constexpr std::array<std::string_view, 16> kReadWithoutValuePragmas = {
    "user_version",  "schema_version",  "application_id", "data_version",
    "page_count",    "page_size",       "freelist_count", "journal_mode",
    "encoding",      "compile_options", "database_list",  "collation_list",
    "function_list", "module_list",     "pragma_list",    "foreign_keys"};
// Functions that reach outside the database.
constexpr std::array<std::string_view, 2> kRefusedFunctions = {"load_extension", "fts3_tokenizer"};

template <size_t N>
bool Contains(const std::array<std::string_view, N>& list, const char* name) {
  if (name == nullptr) return false;
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return std::find(list.begin(), list.end(), lower) != list.end();
}

std::string ActionName(int action) {
  switch (action) {
    case SQLITE_INSERT:
      return "INSERT";
    case SQLITE_UPDATE:
      return "UPDATE";
    case SQLITE_DELETE:
      return "DELETE";
    case SQLITE_ATTACH:
      return "ATTACH";
    case SQLITE_DETACH:
      return "DETACH";
    case SQLITE_TRANSACTION:
      return "a transaction statement";
    case SQLITE_SAVEPOINT:
      return "SAVEPOINT";
    case SQLITE_PRAGMA:
      return "PRAGMA";
    case SQLITE_ANALYZE:
      return "ANALYZE";
    case SQLITE_REINDEX:
      return "REINDEX";
    case SQLITE_ALTER_TABLE:
      return "ALTER TABLE";
    case SQLITE_CREATE_INDEX:
    case SQLITE_CREATE_TABLE:
    case SQLITE_CREATE_TEMP_INDEX:
    case SQLITE_CREATE_TEMP_TABLE:
    case SQLITE_CREATE_TEMP_TRIGGER:
    case SQLITE_CREATE_TEMP_VIEW:
    case SQLITE_CREATE_TRIGGER:
    case SQLITE_CREATE_VIEW:
    case SQLITE_CREATE_VTABLE:
      return "CREATE";
    case SQLITE_DROP_INDEX:
    case SQLITE_DROP_TABLE:
    case SQLITE_DROP_TEMP_INDEX:
    case SQLITE_DROP_TEMP_TABLE:
    case SQLITE_DROP_TEMP_TRIGGER:
    case SQLITE_DROP_TEMP_VIEW:
    case SQLITE_DROP_TRIGGER:
    case SQLITE_DROP_VIEW:
    case SQLITE_DROP_VTABLE:
      return "DROP";
    case SQLITE_FUNCTION:
      return "the function";
    default:
      return "action " + std::to_string(action);
  }
}

// The authorizer's verdicts for one connection: the first refusal, for the error message.
struct Guard {
  std::string refused;
};

int Authorize(void* user, int action, const char* arg1, const char* arg2, const char* /*db*/,
              const char* /*trigger_or_view*/) {
  auto* guard = static_cast<Guard*>(user);
  bool allow = false;
  switch (action) {
    case SQLITE_SELECT:
    case SQLITE_READ:
    case SQLITE_RECURSIVE:
      allow = true;
      break;
    case SQLITE_FUNCTION:
      allow = !Contains(kRefusedFunctions, arg2);  // arg2: the function name
      break;
    case SQLITE_PRAGMA:  // arg1: the pragma; arg2: its value or argument (NULL: none)
      allow = Contains(kIntrospectionPragmas, arg1) ||
              (arg2 == nullptr && Contains(kReadWithoutValuePragmas, arg1));
      break;
    default:
      allow = false;
  }
  if (!allow && guard->refused.empty()) {
    guard->refused = ActionName(action);
    if (arg1 != nullptr && action != SQLITE_FUNCTION) guard->refused += std::string(" ") + arg1;
    if (arg2 != nullptr) {
      guard->refused +=
          action == SQLITE_PRAGMA ? std::string(" = ") + arg2 : std::string(" ") + arg2;
    }
  }
  return allow ? SQLITE_OK : SQLITE_DENY;
}

bool OnlyWhitespace(const char* s) {
  for (; s != nullptr && *s != '\0'; ++s) {
    if (!std::isspace(static_cast<unsigned char>(*s))) return false;
  }
  return true;
}

// Collects every row (RunReadOnlyQuery).
class CollectingSink final : public QueryRowSink {
 public:
  explicit CollectingSink(QueryResult& out) : out_(out) {}
  Status Columns(const std::vector<std::string>& columns) override {
    out_.columns = columns;
    return Status::Ok();
  }
  Status Row(const std::vector<SqlValue>& row) override {
    out_.rows.push_back(row);
    return Status::Ok();
  }

 private:
  QueryResult& out_;
};

}  // namespace

Result<QueryResult> RunReadOnlyQuery(const std::filesystem::path& db_file, const std::string& sql,
                                     const QueryOptions& options) {
  QueryResult out;
  CollectingSink sink(out);
  NW_RETURN_IF_ERROR(StreamReadOnlyQuery(db_file, sql, options, sink).status());
  return out;
}

Result<int64_t> StreamReadOnlyQuery(const std::filesystem::path& db_file, const std::string& sql,
                                    const QueryOptions& options, QueryRowSink& sink) {
  const std::string file = db_file.string();
  std::error_code ec;
  if (!std::filesystem::exists(db_file, ec)) {
    return Status::NotFound(file + ": no such database (nw query never creates one)");
  }
  NW_ASSIGN_OR_RETURN(std::unique_ptr<Db> conn,
                      Db::Open(file, /*read_only=*/true, /*follow_links=*/false));
  sqlite3* const db = conn->get();
  sqlite3_busy_timeout(db, 5000);
  // No attached databases at all, and no extension loading.
  sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, 0);
  sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, nullptr);
  sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
  NW_RETURN_IF_ERROR(conn->Exec("PRAGMA query_only = ON", "setting PRAGMA query_only"));
  Guard guard;
  int rc = sqlite3_set_authorizer(db, &Authorize, &guard);
  if (rc != SQLITE_OK) return conn->Error(rc, "installing the read-only authorizer");
  // The time limit is the connection's statement limit (db/sqlite.h), counted from here.
  conn->SetStatementLimit(options.timeout_ms);
  conn->StartStatementClock(std::chrono::steady_clock::now());

  const char* tail = nullptr;
  sqlite3_stmt* raw_stmt = nullptr;
  rc = sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &raw_stmt, &tail);
  StmtPtr stmt(raw_stmt);
  if (rc != SQLITE_OK) {
    if (!guard.refused.empty()) {
      return Status::InvalidArgument("refused: " + guard.refused +
                                     " (nw query is read-only: SELECT, and PRAGMAs that only "
                                     "read)");
    }
    return Status::InvalidArgument("SQL error: " + std::string(sqlite3_errmsg(db)));
  }
  if (!stmt) return Status::InvalidArgument("no SQL statement given");
  if (!OnlyWhitespace(tail)) {
    // Only comments may follow; preparing the rest tells (an empty statement prepares to null).
    sqlite3_stmt* next = nullptr;
    const char* rest = tail;
    const int rc2 = sqlite3_prepare_v2(db, rest, -1, &next, nullptr);
    StmtPtr next_owner(next);
    if (rc2 != SQLITE_OK || next != nullptr) {
      return Status::InvalidArgument(
          "nw query runs exactly one statement; remove everything after the first ';' (found '" +
          std::string(rest).substr(0, 40) + "')");
    }
  }
  if (!sqlite3_stmt_readonly(stmt.get())) {
    return Status::InvalidArgument(
        "refused: the statement would write (nw query is read-only: SELECT, and PRAGMAs that "
        "only read)");
  }

  const int cols = sqlite3_column_count(stmt.get());
  std::vector<std::string> columns;
  for (int i = 0; i < cols; ++i) {
    const char* name = sqlite3_column_name(stmt.get(), i);
    columns.push_back(name ? name : "");
  }
  NW_RETURN_IF_ERROR(sink.Columns(columns));
  int64_t rows = 0;
  std::vector<SqlValue> row(static_cast<size_t>(cols));
  while (true) {
    rc = sqlite3_step(stmt.get());
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) {
      if (conn->statement_interrupted()) {
        return Status::DeadlineExceeded("query interrupted after " +
                                        std::to_string(options.timeout_ms) + " ms");
      }
      if (!guard.refused.empty()) return Status::InvalidArgument("refused: " + guard.refused);
      return Status::InvalidArgument("SQL error: " + std::string(sqlite3_errmsg(db)));
    }
    if (options.max_rows > 0 && rows >= options.max_rows) {
      return Status::ResourceExhausted("more than " + std::to_string(options.max_rows) +
                                       " rows (add a LIMIT)");
    }
    for (int i = 0; i < cols; ++i) {
      SqlValue& v = row[static_cast<size_t>(i)];
      v = SqlValue{};
      switch (sqlite3_column_type(stmt.get(), i)) {
        case SQLITE_INTEGER:
          v.type = SqlValue::Type::kInteger;
          v.integer = sqlite3_column_int64(stmt.get(), i);
          break;
        case SQLITE_FLOAT:
          v.type = SqlValue::Type::kReal;
          v.real = sqlite3_column_double(stmt.get(), i);
          break;
        case SQLITE_TEXT: {
          v.type = SqlValue::Type::kText;
          const auto* p = sqlite3_column_text(stmt.get(), i);
          v.text.assign(reinterpret_cast<const char*>(p),
                        static_cast<size_t>(sqlite3_column_bytes(stmt.get(), i)));
          break;
        }
        case SQLITE_BLOB: {
          v.type = SqlValue::Type::kBlob;
          const auto* p = static_cast<const char*>(sqlite3_column_blob(stmt.get(), i));
          const int n = sqlite3_column_bytes(stmt.get(), i);
          if (p != nullptr) v.text.assign(p, static_cast<size_t>(n));
          break;
        }
        default:
          v.type = SqlValue::Type::kNull;
      }
    }
    NW_RETURN_IF_ERROR(sink.Row(row));
    ++rows;
  }
  return rows;
}

}  // namespace nw
