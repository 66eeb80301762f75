// nw export CAMPAIGN --format csv|jsonl [--out FILE]: the campaign's jobs with their latest
// results for other tools (report/export.h). Reads the database read-only. Exit codes: 0 ok;
// 2 bad input (no database, unknown campaign or format, unwritable output).
#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "db/store.h"
#include "report/export.h"

namespace nw::cli {
namespace {

struct ExportArgs {
  std::string campaign;
  std::string format = "csv";
  std::string out;
};

Status RunExport(const Globals& g, const ExportArgs& a) {
  NW_ASSIGN_OR_RETURN(report::ExportFormat format, report::ParseExportFormat(a.format));
  if (!std::filesystem::exists(g.db_path)) {
    return Status::NotFound("no database at " + g.db_path + " (run a campaign first, or --db)");
  }
  NW_ASSIGN_OR_RETURN(auto store, Store::Open(g.db_path, Store::Mode::kReadOnly));
  if (a.out.empty() || a.out == "-") {
    NW_ASSIGN_OR_RETURN(int64_t rows,
                        report::ExportCampaign(*store, a.campaign, format, std::cout));
    (void)rows;
    return Status::Ok();
  }
  // Write to a temporary file next to the target and rename, so a failed export never leaves a
  // truncated file under the requested name.
  const std::filesystem::path target(a.out);
  const std::filesystem::path tmp = target.string() + ".tmp";
  int64_t rows = 0;
  {
    std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
    if (!file) return Status::IoError(tmp.string() + ": cannot open for writing");
    auto n = report::ExportCampaign(*store, a.campaign, format, file);
    file.close();
    if (!n.ok() || !file) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      return n.ok() ? Status::IoError(tmp.string() + ": write failed") : n.status();
    }
    rows = *n;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, target, ec);
  if (ec) return Status::IoError(target.string() + ": " + ec.message());
  if (!g.quiet) std::cerr << "wrote " << rows << " jobs to " << target.string() << "\n";
  return Status::Ok();
}

}  // namespace

void RegisterExport(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand("export",
                                 "Write a campaign's jobs and latest results as CSV or JSON Lines");
  auto a = std::make_shared<ExportArgs>();
  cmd->add_option("campaign", a->campaign, "Campaign name")->required();
  cmd->add_option("--format", a->format, "csv or jsonl")->capture_default_str();
  cmd->add_option("--out", a->out, "Output file (default: standard output)");
  cmd->callback([a, &g] {
    Status s = RunExport(g, *a);
    if (!s.ok()) {
      std::cerr << "nw export: " << s.ToString() << "\n";
      g.exit_code = 2;
    }
  });
}

}  // namespace nw::cli
