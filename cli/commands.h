// The `nw` subcommands. Each Register* adds one subcommand (with its --help) to the app; the
// handler runs after parsing and stores its exit code in `exit_code`.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace nw::cli {

struct Globals {
  std::string db_path = "needlework.db";
  bool quiet = false;
  int exit_code = 0;
};

void RegisterRun(CLI::App& app, Globals& g);
void RegisterValidate(CLI::App& app, Globals& g);
void RegisterPlan(CLI::App& app, Globals& g);
void RegisterStatus(CLI::App& app, Globals& g);
void RegisterReport(CLI::App& app, Globals& g);
void RegisterQuery(CLI::App& app, Globals& g);
void RegisterExport(CLI::App& app, Globals& g);
void RegisterBaseline(CLI::App& app, Globals& g);
void RegisterGate(CLI::App& app, Globals& g);
void RegisterModel(CLI::App& app, Globals& g);
void RegisterVersion(CLI::App& app, Globals& g);
void RegisterData(CLI::App& app, Globals& g);
void RegisterServe(CLI::App& app, Globals& g);
void RegisterCoordinator(CLI::App& app, Globals& g);
void RegisterSubmit(CLI::App& app, Globals& g);
void RegisterWorker(CLI::App& app, Globals& g);
void RegisterKeygen(CLI::App& app, Globals& g);
void RegisterControl(CLI::App& app, Globals& g);  // cancel, pause, resume
void RegisterDiff(CLI::App& app, Globals& g);
void RegisterSlurm(CLI::App& app, Globals& g);  // slurm submit-workers
void RegisterGpuBusy(CLI::App& app, Globals& g);

}  // namespace nw::cli
