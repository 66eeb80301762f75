// `nw query`: one read-only SQL statement against the needlework database, printed as a table,
// CSV or JSON.
//
// The statement runs through db/read_only_query.h (read-only enforcement, streaming, limits);
// this file formats its rows.
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "db/read_only_query.h"

namespace nw::report {

// The query itself lives in db/ with the rest of the SQL (db/read_only_query.h).
using nw::QueryOptions;
using nw::QueryResult;
using nw::QueryRowSink;
using nw::RunReadOnlyQuery;
using nw::SqlValue;
using nw::StreamReadOnlyQuery;

/// An aligned text table with a header and a row count; numbers right-aligned, NULL as "NULL",
/// text cut to 80 characters with control characters shown as escapes (use CSV or JSON for
/// exact values). Widths from every row (report/query_writer.h streams with a window).
std::string FormatQueryTable(const QueryResult& r);
/// RFC 4180 CSV with a header row (CRLF is not used: rows end in "\n"); NULL is an empty field,
/// a blob is written as hex.
std::string FormatQueryCsv(const QueryResult& r);
/// An array of objects, one per row, keyed by column name in column order (a repeated name gets
/// ":2", ":3", ...);
/// integers and reals as numbers, NULL as null, blobs as {"hex": "..."}.
nlohmann::ordered_json FormatQueryJson(const QueryResult& r);

}  // namespace nw::report
