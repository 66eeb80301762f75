// nw submit CAMPAIGN.yaml --coordinator tcp://HOST:PORT: expands the campaign here (the model
// folder must be readable on this host, as for `nw plan`) and sends its jobs to a coordinator
// daemon, which queues them with the given priority. A campaign with `search:` sends its whole
// grid and the search's settings; the daemon runs the boundary search (only the jobs it asks for).
// Submitting a campaign again updates its jobs and priority and makes it active again (also after
// `nw cancel`). Exit codes: 0 submitted; 1 the coordinator refused it or could not be reached; 2
// bad input.
#include <algorithm>
#include <iostream>

#include "cli/campaign_load.h"
#include "cli/commands.h"
#include "coordinator/control_client.h"
#include "coordinator/search/search_driver.h"

namespace nw::cli {
namespace {

struct SubmitArgs {
  std::string campaign;
  std::string coordinator;
  std::string server_key;
  std::string curve_key;
  int64_t timeout_ms = 300'000;
  int priority = 0;
  int64_t max_jobs = 0;
  bool rerun = false;
};

int Submit(const SubmitArgs& a, const Globals& g) {
  if (a.priority < kMinCampaignPriority || a.priority > kMaxCampaignPriority) {
    std::cerr << "nw submit: --priority must be " << kMinCampaignPriority << ".."
              << kMaxCampaignPriority << "\n";
    return 2;
  }
  auto options = ClientOptionsFromFlags(a.coordinator, a.server_key, a.curve_key, a.timeout_ms);
  if (!options.ok()) {
    std::cerr << "nw submit: " << options.status().message() << "\n";
    return 2;
  }
  // --timeout-ms bounds the whole submission: every part, every retry and the final commit.
  // Each try of a part still gives up after 5 s (then a fresh socket resends), within it.
  options->total_timeout_ms = a.timeout_ms;
  options->timeout_ms = std::min<int64_t>(5000, a.timeout_ms);
  options->commit_timeout_ms = a.timeout_ms;
  LoadOptions lo;
  if (a.max_jobs > 0) lo.max_jobs = a.max_jobs;
  auto loaded = LoadCampaign(a.campaign, lo);
  if (!loaded.ok()) {
    std::cerr << loaded.status().message() << "\n";
    return 2;
  }
  const Campaign& c = loaded->resolved.campaign;
  for (const auto& w : c.warnings) std::cerr << "warning: " << w << "\n";
  Submission s;
  if (c.search) {
    // The daemon runs the search (coordinator/search/): it gets the whole grid and the settings,
    // and queues only the jobs the search asks for. Checked here first for a clear error.
    if (a.rerun) {
      std::cerr << "nw submit: --rerun is not supported for a campaign with `search:` (its jobs "
                   "depend on the stored results); submit the grid campaign again instead\n";
      return 2;
    }
    const int trials = static_cast<int>(c.trial_seeds.size());
    if (auto d = search::SearchDriver::Create(*c.search, trials, loaded->jobs); !d.ok()) {
      std::cerr << "nw submit: " << d.status().ToString() << "\n";
      return 2;
    }
    s.search = SubmitSearch{trials, c.search->first_trials, c.search->confidence,
                            c.search->pass_rate, c.search->budget};
  }
  s.campaign = c.name;
  s.source_path = std::filesystem::absolute(a.campaign).string();
  s.source_text = c.text;
  s.priority = a.priority;
  s.rerun = a.rerun;
  s.jobs = loaded->jobs;
  zmq::context_t context;
  ControlClient client(context, *options);
  const bool show_parts = !g.quiet && s.jobs.size() > kMaxJobsPerSubmitPart;
  auto reply = client.Submit(s, [show_parts](int sent, int parts) {
    if (show_parts) std::cerr << "\rsent part " << sent << " of " << parts << std::flush;
  });
  if (show_parts) std::cerr << "\n";
  if (!reply.ok()) {
    std::cerr << "nw submit: " << reply.status().ToString() << "\n";
    return 1;
  }
  std::cout << "submitted campaign '" << c.name << "' (id " << reply->campaign_id << ", priority "
            << a.priority << "): " << reply->jobs << " jobs"
            << (c.search ? " (boundary search so far, of " + std::to_string(s.jobs.size()) +
                               " in the grid)"
                         : std::string())
            << ", " << reply->already_done << " already done, " << reply->queued << " to run\n";
  return 0;
}

}  // namespace

void RegisterSubmit(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand("submit", "Submit a campaign to a coordinator daemon");
  auto a = std::make_shared<SubmitArgs>();
  cmd->add_option("campaign", a->campaign, "Campaign YAML")->required();
  cmd->add_option("--coordinator", a->coordinator, "The coordinator's endpoint (tcp://HOST:PORT)")
      ->envname("NW_COORDINATOR");
  cmd->add_option("--priority", a->priority, "Higher runs first (-1000..1000)")
      ->capture_default_str();
  cmd->add_option("--max-jobs", a->max_jobs, "Raise the job-count limit");
  cmd->add_flag("--rerun", a->rerun, "Run finished jobs again (old results are kept)");
  cmd->add_option("--server-key", a->server_key,
                  "The coordinator's public key (NAME.pub or Z85): use CURVE");
  cmd->add_option("--curve-key", a->curve_key, "This client's key pair (NAME.key)");
  cmd->add_option("--timeout-ms", a->timeout_ms,
                  "The whole submission (every part, retries, the final commit) ends within "
                  "this long")
      ->capture_default_str();
  cmd->callback([a, &g] { g.exit_code = Submit(*a, g); });
}

}  // namespace nw::cli
