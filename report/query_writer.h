// Writers of `nw query` results that stream: each row is written as StreamReadOnlyQuery
// (report/query.h) hands it on, so a result of any size prints in bounded memory. The table
// format needs column widths before its first row: it holds the first `window` rows (as cut
// display text, at most 80 characters a cell), takes the widths and alignment from them, and
// writes later rows with the same widths (a wider later cell pushes its line out).
// Thread-safety: a writer is used by one thread.
#pragma once

#include <cstddef>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "report/query.h"

namespace nw::report {

enum class QueryFormat { kTable, kCsv, kJson };

/// "table", "csv" or "json"; InvalidArgument naming the value otherwise.
Result<QueryFormat> ParseQueryFormat(std::string_view name);

/// Rows the table format holds to size its columns when streaming (`nw query`).
inline constexpr size_t kQueryTableWindow = 1000;

/// A QueryRowSink that writes to `out` as rows come; Finish() writes what ends the document
/// (the table's row count, the JSON array's "]"); call it after the query, also after a failed
/// one, so what was written stays a whole document. Text that is not valid UTF-8 is written in
/// JSON with U+FFFD instead of failing.
class QueryWriter : public QueryRowSink {
 public:
  /// `table_window`: rows the table format holds for its widths (SIZE_MAX: every row).
  static std::unique_ptr<QueryWriter> Create(QueryFormat format, std::ostream& out,
                                             size_t table_window = kQueryTableWindow);
  virtual void Finish() = 0;
  /// True once Columns() was called (the statement was prepared and began to run).
  bool started() const { return started_; }

 protected:
  bool started_ = false;
};

/// The formats' cell texts, shared by the writers and FormatQuery* (report/query.h).
std::string QueryPlainText(const SqlValue& v);    // CSV: NULL empty, blobs hex, shortest reals
std::string QueryDisplayText(const SqlValue& v);  // table: NULL visible, escapes, cut to 80
/// JSON keys of the columns: a repeated name gets ":2", ":3", ...
std::vector<std::string> QueryJsonKeys(const std::vector<std::string>& columns);
/// One row as a JSON object under `keys`: numbers, null, text, blobs as {"hex": "..."}.
nlohmann::ordered_json QueryRowJson(const std::vector<std::string>& keys,
                                    const std::vector<SqlValue>& row);

}  // namespace nw::report
