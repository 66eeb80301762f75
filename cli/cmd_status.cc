// nw status [CAMPAIGN]: progress of every campaign (or one) in the database, read-only.
#include <iomanip>
#include <iostream>

#include "cli/commands.h"
#include "db/store.h"
#include "engine/engine.h"

namespace nw::cli {
namespace {

Status ShowStatus(const Globals& g, const std::string& only) {
  if (!std::filesystem::exists(g.db_path)) {
    return Status::NotFound("no database at " + g.db_path + " (run a campaign first, or --db)");
  }
  NW_ASSIGN_OR_RETURN(auto store, Store::Open(g.db_path, Store::Mode::kReadOnly));
  NW_ASSIGN_OR_RETURN(auto campaigns, store->ListCampaigns());
  std::cout << std::left << std::setw(28) << "campaign" << std::right << std::setw(8) << "jobs"
            << std::setw(8) << "queued" << std::setw(8) << "leased" << std::setw(8) << "done"
            << std::setw(8) << "failed" << std::setw(8) << "pass" << std::setw(8) << "miss"
            << std::setw(8) << "other"
            << "\n";
  bool found = only.empty();
  for (const CampaignRecord& c : campaigns) {
    if (!only.empty() && c.name != only) continue;
    found = true;
    NW_ASSIGN_OR_RETURN(CampaignProgress p, store->Progress(c.id));
    std::cout << std::left << std::setw(28) << c.name << std::right << std::setw(8) << p.total
              << std::setw(8) << p.queued << std::setw(8) << p.leased << std::setw(8) << p.done
              << std::setw(8) << p.failed << std::setw(8) << p.pass << std::setw(8) << p.miss
              << std::setw(8) << p.other << "\n";
  }
  if (!found) return Status::NotFound("no campaign named '" + only + "' in " + g.db_path);
  NW_ASSIGN_OR_RETURN(auto workers, store->ListWorkers());
  if (!workers.empty()) {
    std::cout << "\nworkers:\n";
    for (const WorkerRecord& w : workers) {
      std::cout << "  " << w.id << "  " << w.device << "  " << w.state << "\n";
    }
  }
  return Status::Ok();
}

}  // namespace

void RegisterStatus(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand("status", "Progress of the campaigns in the database");
  auto name = std::make_shared<std::string>();
  cmd->add_option("campaign", *name, "Only this campaign");
  cmd->callback([name, &g] {
    Status s = ShowStatus(g, *name);
    if (!s.ok()) {
      std::cerr << "nw status: " << s.ToString() << "\n";
      g.exit_code = 2;
    }
  });
}

void RegisterVersion(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand("version", "Print the build and engine versions");
  cmd->callback([&g] {
    (void)g;
    std::cout << "nw " << NW_GIT_REV << " (engine " << kEngineVersion << ", backends";
    for (const auto& b : AvailableBackends()) std::cout << " " << b;
    std::cout << ")\n";
  });
}

}  // namespace nw::cli
