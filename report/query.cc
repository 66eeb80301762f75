#include "report/query.h"

#include <sqlite3.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string_view>

#include "report/stats.h"

namespace nw::report {
namespace {

struct SqliteCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StmtFinalizer {
  void operator()(sqlite3_stmt* stmt) const { sqlite3_finalize(stmt); }
};
using DbPtr = std::unique_ptr<sqlite3, SqliteCloser>;
using StmtPtr = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

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

std::string Hex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    out += kDigits[u >> 4];
    out += kDigits[u & 15];
  }
  return out;
}

std::string RealText(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  // Prefer the shortest form that reads back the same.
  for (int precision = 1; precision <= 17; ++precision) {
    char shorter[40];
    std::snprintf(shorter, sizeof(shorter), "%.*g", precision, v);
    if (std::strtod(shorter, nullptr) == v) return shorter;
  }
  return buf;
}

std::string PlainText(const SqlValue& v) {
  switch (v.type) {
    case SqlValue::Type::kNull:
      return "";
    case SqlValue::Type::kInteger:
      return std::to_string(v.integer);
    case SqlValue::Type::kReal:
      return RealText(v.real);
    case SqlValue::Type::kText:
      return v.text;
    case SqlValue::Type::kBlob:
      return Hex(v.text);
  }
  return "";
}

// For the table: NULL visible, control characters escaped, long text cut on a UTF-8 boundary.
std::string DisplayText(const SqlValue& v) {
  if (v.type == SqlValue::Type::kNull) return "NULL";
  if (v.type == SqlValue::Type::kBlob) return "x'" + Hex(v.text) + "'";
  std::string s;
  for (char c : PlainText(v)) {
    if (c == '\n') {
      s += "\\n";
    } else if (c == '\t') {
      s += "\\t";
    } else if (c == '\r') {
      s += "\\r";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      s += "?";
    } else {
      s += c;
    }
  }
  constexpr size_t kMax = 80;
  if (s.size() > kMax) {
    size_t cut = kMax - 3;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    s = s.substr(0, cut) + "...";
  }
  return s;
}

// Display width: UTF-8 continuation bytes take no column.
size_t Width(const std::string& s) {
  size_t w = 0;
  for (char c : s) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++w;
  }
  return w;
}

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace

Result<QueryResult> RunReadOnlyQuery(const std::filesystem::path& db_file, const std::string& sql,
                                     const QueryOptions& options) {
  const std::string file = db_file.string();
  std::error_code ec;
  if (!std::filesystem::exists(db_file, ec)) {
    return Status::NotFound(file + ": no such database (nw query never creates one)");
  }
  sqlite3* raw = nullptr;
  int rc =
      sqlite3_open_v2(file.c_str(), &raw, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOFOLLOW, nullptr);
  DbPtr db(raw);
  auto fail = [&](const std::string& what) {
    return Status::IoError(file + ": " + what + ": " +
                           (db ? sqlite3_errmsg(db.get()) : sqlite3_errstr(rc)));
  };
  if (rc != SQLITE_OK) return fail("opening read-only");
  sqlite3_extended_result_codes(db.get(), 1);
  sqlite3_busy_timeout(db.get(), 5000);
  // No attached databases at all, and no extension loading.
  sqlite3_limit(db.get(), SQLITE_LIMIT_ATTACHED, 0);
  sqlite3_db_config(db.get(), SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, nullptr);
  sqlite3_db_config(db.get(), SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
  if (sqlite3_exec(db.get(), "PRAGMA query_only = ON", nullptr, nullptr, nullptr) != SQLITE_OK) {
    return fail("setting PRAGMA query_only");
  }
  Guard guard;
  if (sqlite3_set_authorizer(db.get(), &Authorize, &guard) != SQLITE_OK) {
    return fail("installing the read-only authorizer");
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options.timeout_ms);
  struct Clock {
    std::chrono::steady_clock::time_point deadline;
    bool expired = false;
  } clock{deadline, false};
  if (options.timeout_ms > 0) {
    sqlite3_progress_handler(
        db.get(), 1000,
        [](void* user) -> int {
          auto* c = static_cast<Clock*>(user);
          c->expired = std::chrono::steady_clock::now() > c->deadline;
          return c->expired ? 1 : 0;
        },
        &clock);
  }

  const char* tail = nullptr;
  sqlite3_stmt* raw_stmt = nullptr;
  rc = sqlite3_prepare_v2(db.get(), sql.c_str(), static_cast<int>(sql.size()), &raw_stmt, &tail);
  StmtPtr stmt(raw_stmt);
  if (rc != SQLITE_OK) {
    if (!guard.refused.empty()) {
      return Status::InvalidArgument("refused: " + guard.refused +
                                     " (nw query is read-only: SELECT, and PRAGMAs that only "
                                     "read)");
    }
    return Status::InvalidArgument("SQL error: " + std::string(sqlite3_errmsg(db.get())));
  }
  if (!stmt) return Status::InvalidArgument("no SQL statement given");
  if (!OnlyWhitespace(tail)) {
    // Only comments may follow; preparing the rest tells (an empty statement prepares to null).
    sqlite3_stmt* next = nullptr;
    const char* rest = tail;
    const int rc2 = sqlite3_prepare_v2(db.get(), rest, -1, &next, nullptr);
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

  QueryResult out;
  const int cols = sqlite3_column_count(stmt.get());
  for (int i = 0; i < cols; ++i) {
    const char* name = sqlite3_column_name(stmt.get(), i);
    out.columns.push_back(name ? name : "");
  }
  while (true) {
    rc = sqlite3_step(stmt.get());
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) {
      if (clock.expired) {
        return Status::DeadlineExceeded("query interrupted after " +
                                        std::to_string(options.timeout_ms) + " ms");
      }
      if (!guard.refused.empty()) return Status::InvalidArgument("refused: " + guard.refused);
      return Status::InvalidArgument("SQL error: " + std::string(sqlite3_errmsg(db.get())));
    }
    if (options.max_rows > 0 && static_cast<int64_t>(out.rows.size()) >= options.max_rows) {
      return Status::ResourceExhausted("more than " + std::to_string(options.max_rows) +
                                       " rows (add a LIMIT)");
    }
    std::vector<SqlValue> row(static_cast<size_t>(cols));
    for (int i = 0; i < cols; ++i) {
      SqlValue& v = row[static_cast<size_t>(i)];
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
    out.rows.push_back(std::move(row));
  }
  return out;
}

std::string FormatQueryTable(const QueryResult& r) {
  const size_t n = r.columns.size();
  std::vector<size_t> width(n);
  std::vector<bool> numeric(n, true);
  std::vector<std::vector<std::string>> cells;
  for (size_t c = 0; c < n; ++c) width[c] = Width(r.columns[c]);
  for (const auto& row : r.rows) {
    std::vector<std::string> line;
    for (size_t c = 0; c < n; ++c) {
      const SqlValue& v = row[c];
      if (v.type == SqlValue::Type::kText || v.type == SqlValue::Type::kBlob) numeric[c] = false;
      line.push_back(DisplayText(v));
      width[c] = std::max(width[c], Width(line.back()));
    }
    cells.push_back(std::move(line));
  }
  auto pad = [](const std::string& s, size_t w, bool right) {
    const std::string fill(w - std::min(w, Width(s)), ' ');
    return right ? fill + s : s + fill;
  };
  std::string out;
  for (size_t c = 0; c < n; ++c) {
    if (c > 0) out += "  ";
    out += pad(r.columns[c], width[c], numeric[c]);
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  out += "\n";
  for (size_t c = 0; c < n; ++c) {
    if (c > 0) out += "  ";
    out += std::string(width[c], '-');
  }
  out += "\n";
  for (const auto& line : cells) {
    std::string l;
    for (size_t c = 0; c < n; ++c) {
      if (c > 0) l += "  ";
      l += pad(line[c], width[c], numeric[c]);
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  }
  out += "(" + FormatThousands(static_cast<int64_t>(r.rows.size())) +
         (r.rows.size() == 1 ? " row)\n" : " rows)\n");
  return out;
}

std::string FormatQueryCsv(const QueryResult& r) {
  std::string out;
  for (size_t c = 0; c < r.columns.size(); ++c) {
    if (c > 0) out += ",";
    out += CsvField(r.columns[c]);
  }
  out += "\n";
  for (const auto& row : r.rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      if (c > 0) out += ",";
      out += CsvField(PlainText(row[c]));
    }
    out += "\n";
  }
  return out;
}

nlohmann::ordered_json FormatQueryJson(const QueryResult& r) {
  std::vector<std::string> keys;
  std::map<std::string, int> seen;
  for (const std::string& c : r.columns) {
    const int k = ++seen[c];
    keys.push_back(k == 1 ? c : c + ":" + std::to_string(k));
  }
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& row : r.rows) {
    nlohmann::ordered_json obj = nlohmann::ordered_json::object();
    for (size_t c = 0; c < row.size(); ++c) {
      const SqlValue& v = row[c];
      switch (v.type) {
        case SqlValue::Type::kNull:
          obj[keys[c]] = nullptr;
          break;
        case SqlValue::Type::kInteger:
          obj[keys[c]] = v.integer;
          break;
        case SqlValue::Type::kReal:
          obj[keys[c]] = v.real;
          break;
        case SqlValue::Type::kText:
          obj[keys[c]] = v.text;
          break;
        case SqlValue::Type::kBlob:
          obj[keys[c]] = {{"hex", Hex(v.text)}};
          break;
      }
    }
    out.push_back(std::move(obj));
  }
  return out;
}

}  // namespace nw::report
