// nw query "SELECT ...": one read-only SQL statement against the database, printed as a table,
// CSV or JSON. See report/query.h for what read-only means and docs/reports.md for the views and
// example queries. Exit codes: 0 ok; 2 bad input (refused or invalid SQL, no database).
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "report/query.h"
#include "report/query_writer.h"

namespace nw::cli {
namespace {

struct QueryArgs {
  std::string sql;
  std::string format = "table";
  int64_t timeout_ms = 60'000;
  int64_t max_rows = 0;
};

// Rows are written as they are read (report/query_writer.h): memory stays bounded whatever the
// result's size. When the query stops early (timeout, --max-rows, an SQL error mid-way), what was
// written is closed as a whole document and the error goes to stderr.
Status RunQuery(const Globals& g, const QueryArgs& a) {
  NW_ASSIGN_OR_RETURN(report::QueryFormat format, report::ParseQueryFormat(a.format));
  if (a.timeout_ms < 0 || a.max_rows < 0) {
    return Status::InvalidArgument("--timeout-ms and --max-rows must be >= 0");
  }
  report::QueryOptions o;
  o.timeout_ms = a.timeout_ms;
  o.max_rows = a.max_rows;
  std::unique_ptr<report::QueryWriter> w = report::QueryWriter::Create(format, std::cout);
  Result<int64_t> rows = report::StreamReadOnlyQuery(g.db_path, a.sql, o, *w);
  // Nothing was written when the statement was refused before it began to run.
  if (w->started()) w->Finish();
  return rows.status();
}

}  // namespace

void RegisterQuery(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand(
      "query", "Run one read-only SQL statement (SELECT, read-only PRAGMAs) on the database");
  auto a = std::make_shared<QueryArgs>();
  cmd->add_option("sql", a->sql, "The statement, e.g. \"SELECT * FROM v_boundary\"")->required();
  cmd->add_option("--format", a->format, "table, csv or json")->capture_default_str();
  cmd->add_option("--timeout-ms", a->timeout_ms,
                  "Interrupt the statement after this long, exit 2 and say so (0: never)")
      ->capture_default_str();
  cmd->add_option("--max-rows", a->max_rows,
                  "Stop after this many rows, exit 2 and say so (0: no limit; rows stream either "
                  "way)");
  cmd->callback([a, &g] {
    Status s = RunQuery(g, *a);
    if (!s.ok()) {
      std::cerr << "nw query: " << s.ToString() << "\n";
      g.exit_code = 2;
    }
  });
}

}  // namespace nw::cli
