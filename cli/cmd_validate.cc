// nw validate CAMPAIGN.yaml: parses, resolves (model, limits) and expands a campaign without
// touching the database; prints the matrix size or the first error with file:line:column.
#include <iostream>

#include "cli/campaign_load.h"
#include "cli/commands.h"

namespace nw::cli {

void RegisterValidate(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand("validate", "Check a campaign file (schema, model, limits)");
  auto path = std::make_shared<std::string>();
  auto max_jobs = std::make_shared<int64_t>(0);
  cmd->add_option("campaign", *path, "Campaign YAML")->required();
  cmd->add_option("--max-jobs", *max_jobs, "Raise the job-count limit");
  cmd->callback([path, max_jobs, &g] {
    LoadOptions lo;
    if (*max_jobs > 0) lo.max_jobs = *max_jobs;
    auto loaded = LoadCampaign(*path, lo);
    if (!loaded.ok()) {
      std::cerr << loaded.status().message() << "\n";
      g.exit_code = 2;
      return;
    }
    const Campaign& c = loaded->resolved.campaign;
    for (const auto& w : c.warnings) std::cerr << "warning: " << w << "\n";
    for (const auto& b : UnavailableBackends(*loaded))
      std::cerr << UnavailableBackendNote(b) << "\n";
    std::cout << *path << ": ok: campaign '" << c.name << "', " << loaded->jobs.size() << " jobs ("
              << c.cells.size() << " cells x " << c.trial_seeds.size() << " trials), model "
              << loaded->resolved.model_dir.string() << "\n";
  });
}

}  // namespace nw::cli
