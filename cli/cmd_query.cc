// nw query "SELECT ...": one read-only SQL statement against the database, printed as a table,
// CSV or JSON. See report/query.h for what read-only means and docs/reports.md for the views and
// example queries. Exit codes: 0 ok; 2 bad input (refused or invalid SQL, no database).
#include <iostream>

#include "cli/commands.h"
#include "report/query.h"

namespace nw::cli {
namespace {

struct QueryArgs {
  std::string sql;
  std::string format = "table";
  int64_t timeout_ms = 60'000;
  int64_t max_rows = 0;
};

Status RunQuery(const Globals& g, const QueryArgs& a) {
  if (a.format != "table" && a.format != "csv" && a.format != "json") {
    return Status::InvalidArgument("--format must be table, csv or json, not '" + a.format + "'");
  }
  report::QueryOptions o;
  o.timeout_ms = a.timeout_ms;
  o.max_rows = a.max_rows;
  NW_ASSIGN_OR_RETURN(report::QueryResult r, report::RunReadOnlyQuery(g.db_path, a.sql, o));
  if (a.format == "table") {
    std::cout << report::FormatQueryTable(r);
  } else if (a.format == "csv") {
    std::cout << report::FormatQueryCsv(r);
  } else {
    // Text that is not valid UTF-8 is written with U+FFFD instead of failing.
    std::cout << report::FormatQueryJson(r).dump(2, ' ', false,
                                                 nlohmann::json::error_handler_t::replace)
              << "\n";
  }
  return Status::Ok();
}

}  // namespace

void RegisterQuery(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand(
      "query", "Run one read-only SQL statement (SELECT, read-only PRAGMAs) on the database");
  auto a = std::make_shared<QueryArgs>();
  cmd->add_option("sql", a->sql, "The statement, e.g. \"SELECT * FROM v_boundary\"")->required();
  cmd->add_option("--format", a->format, "table, csv or json")->capture_default_str();
  cmd->add_option("--timeout-ms", a->timeout_ms,
                  "Interrupt the statement after this long (0: never)")
      ->capture_default_str();
  cmd->add_option("--max-rows", a->max_rows, "Fail past this many rows (0: no limit)");
  cmd->callback([a, &g] {
    Status s = RunQuery(g, *a);
    if (!s.ok()) {
      std::cerr << "nw query: " << s.ToString() << "\n";
      g.exit_code = 2;
    }
  });
}

}  // namespace nw::cli
