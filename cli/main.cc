// nw: the needlework command line (one binary; subcommands in cli/cmd_*.cc).
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/git_rev.h"

int main(int argc, char** argv) {
  CLI::App app{
      "needlework: find where long-context retrieval breaks in sparse-attention LLM engines.\n"
      "Write a campaign in YAML, run it, read the boundary report from the SQLite database."};
  app.set_version_flag("--version", std::string("nw ") + nw::GitRevision());
  nw::cli::Globals g;
  app.add_option("--db", g.db_path, "SQLite database file")->capture_default_str();
  app.add_flag("-q,--quiet", g.quiet, "No progress output");
  app.require_subcommand(1);
  app.fallthrough();  // --db and -q also work after the subcommand: `nw run x.yaml --db y.db`
  nw::cli::RegisterRun(app, g);
  nw::cli::RegisterValidate(app, g);
  nw::cli::RegisterPlan(app, g);
  nw::cli::RegisterStatus(app, g);
  nw::cli::RegisterReport(app, g);
  nw::cli::RegisterQuery(app, g);
  nw::cli::RegisterExport(app, g);
  nw::cli::RegisterBaseline(app, g);
  nw::cli::RegisterGate(app, g);
  nw::cli::RegisterModel(app, g);
  nw::cli::RegisterVersion(app, g);
  nw::cli::RegisterData(app, g);
  nw::cli::RegisterServe(app, g);
  nw::cli::RegisterCoordinator(app, g);
  nw::cli::RegisterSubmit(app, g);
  nw::cli::RegisterWorker(app, g);
  nw::cli::RegisterKeygen(app, g);
  nw::cli::RegisterControl(app, g);
  nw::cli::RegisterSlurm(app, g);
  nw::cli::RegisterDiff(app, g);
  nw::cli::RegisterGpuBusy(app, g);
  // The global options work before or after any subcommand (fallthrough), so every
  // subcommand's --help lists them too.
  const std::string colours =
      "Colours: only on a terminal; off with NO_COLOR set (non-empty) or TERM=dumb.\n";
  const std::string globals =
      "Global options (before or after the subcommand):\n"
      "  --db FILE                   SQLite database file (default: " +
      g.db_path +
      ")\n"
      "  -q,--quiet                  No progress output\n" +
      colours;
  // Every subcommand, nested ones included, gets the footer (a depth-first walk).
  std::vector<CLI::App*> unvisited = app.get_subcommands([](CLI::App*) { return true; });
  while (!unvisited.empty()) {
    CLI::App* sub = unvisited.back();
    unvisited.pop_back();
    sub->footer(globals);
    for (CLI::App* s : sub->get_subcommands([](CLI::App*) { return true; })) {
      unvisited.push_back(s);
    }
  }
  app.footer(colours);
  CLI11_PARSE(app, argc, argv);
  return g.exit_code;
}
