// nw baseline set NAME CAMPAIGN [--note TEXT] [--replace] | list | rm NAME: named baselines for
// `nw gate`. `set` freezes the campaign's jobs and their current latest results under NAME;
// later reruns of the campaign do not move the baseline. NAME follows the campaign-name rule, is
// never a campaign's name (it would shadow the campaign in `nw gate`), and an existing NAME is
// re-frozen only with --replace. Exit codes: 0 ok; 2 bad input (no database, unknown campaign
// or baseline, bad or taken name).
#include <iomanip>
#include <iostream>

#include "cli/commands.h"
#include "common/clock.h"
#include "coordinator/campaign/campaign.h"
#include "db/store.h"

namespace nw::cli {
namespace {

Status OpenExisting(const Globals& g, Store::Mode mode, std::unique_ptr<Store>& out) {
  if (!std::filesystem::exists(g.db_path)) {
    return Status::NotFound("no database at " + g.db_path + " (run a campaign first, or --db)");
  }
  NW_ASSIGN_OR_RETURN(out, Store::Open(g.db_path, mode));
  return Status::Ok();
}

Status SetBaseline(const Globals& g, const std::string& name, const std::string& campaign,
                   const std::string& note, bool replace) {
  if (!IsValidCampaignName(name)) {
    return Status::InvalidArgument(
        "baseline name '" + name +
        "': must be lowercase letters, digits, '.', '_' and '-' (at most 64, starting with a "
        "letter or digit), like a campaign name");
  }
  std::unique_ptr<Store> store;
  NW_RETURN_IF_ERROR(OpenExisting(g, Store::Mode::kReadWrite, store));
  NW_ASSIGN_OR_RETURN(std::optional<CampaignRecord> c, store->FindCampaign(campaign));
  if (!c) return Status::NotFound("no campaign named '" + campaign + "' in " + g.db_path);
  SystemClock clock;
  NW_ASSIGN_OR_RETURN(BaselineRecord b,
                      store->SetBaseline(name, c->id, note, clock.WallMs(), replace));
  std::cout << "baseline '" << b.name << "' = campaign '" << b.campaign_name << "': " << b.jobs
            << " jobs, " << b.results << " with results (frozen)\n";
  return Status::Ok();
}

Status ListBaselines(const Globals& g) {
  std::unique_ptr<Store> store;
  NW_RETURN_IF_ERROR(OpenExisting(g, Store::Mode::kReadOnly, store));
  NW_ASSIGN_OR_RETURN(std::vector<BaselineRecord> all, store->ListBaselines());
  if (all.empty()) {
    std::cout << "no baselines (nw baseline set NAME CAMPAIGN)\n";
    return Status::Ok();
  }
  std::cout << std::left << std::setw(24) << "baseline" << std::setw(28) << "campaign" << std::right
            << std::setw(8) << "jobs" << std::setw(9) << "results"
            << "  note\n";
  for (const BaselineRecord& b : all) {
    std::cout << std::left << std::setw(24) << b.name << std::setw(28) << b.campaign_name
              << std::right << std::setw(8) << b.jobs << std::setw(9) << b.results << "  " << b.note
              << "\n";
  }
  return Status::Ok();
}

Status RemoveBaseline(const Globals& g, const std::string& name) {
  std::unique_ptr<Store> store;
  NW_RETURN_IF_ERROR(OpenExisting(g, Store::Mode::kReadWrite, store));
  NW_RETURN_IF_ERROR(store->DeleteBaseline(name));
  std::cout << "baseline '" << name << "' removed\n";
  return Status::Ok();
}

void Report(Globals& g, const Status& s) {
  if (!s.ok()) {
    std::cerr << "nw baseline: " << s.ToString() << "\n";
    g.exit_code = 2;
  }
}

}  // namespace

void RegisterBaseline(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand("baseline", "Named baselines for nw gate (set, list, rm)");
  cmd->require_subcommand(1);

  auto* set =
      cmd->add_subcommand("set", "Freeze a campaign's current results as the baseline NAME");
  auto name = std::make_shared<std::string>();
  auto campaign = std::make_shared<std::string>();
  auto note = std::make_shared<std::string>();
  auto replace = std::make_shared<bool>(false);
  set->add_option("name", *name, "Baseline name (like a campaign name; not a campaign's name)")
      ->required();
  set->add_option("campaign", *campaign, "Campaign name")->required();
  set->add_option("--note", *note, "A note stored with the baseline");
  set->add_flag("--replace", *replace,
                "Re-freeze NAME if it exists (else an existing NAME is refused)");
  set->callback([name, campaign, note, replace, &g] {
    Report(g, SetBaseline(g, *name, *campaign, *note, *replace));
  });

  auto* list = cmd->add_subcommand("list", "List the baselines");
  list->callback([&g] { Report(g, ListBaselines(g)); });

  auto* rm = cmd->add_subcommand("rm", "Remove a baseline (its campaign and results stay)");
  auto rm_name = std::make_shared<std::string>();
  rm->add_option("name", *rm_name, "Baseline name")->required();
  rm->callback([rm_name, &g] { Report(g, RemoveBaseline(g, *rm_name)); });
}

}  // namespace nw::cli
