// nw plan CAMPAIGN.yaml: a dry run. Expands the campaign and reports the job count, how many are
// already done in the database (shared with other campaigns by key), and an estimated cost from
// the timing history of finished jobs on the same backend.
#include <iostream>
#include <map>
#include <set>

#include "cli/campaign_load.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "db/store.h"

namespace nw::cli {
namespace {

Status Plan(const Globals& g, const std::string& path, int64_t max_jobs) {
  LoadOptions lo;
  if (max_jobs > 0) lo.max_jobs = max_jobs;
  auto loaded = LoadCampaign(path, lo);
  if (!loaded.ok()) return loaded.status();
  const Campaign& c = loaded->resolved.campaign;
  std::cout << "campaign '" << c.name << "': " << loaded->jobs.size()
            << " jobs = " << c.cells.size() << " cells x " << c.trial_seeds.size() << " trials\n";
  if (c.search) {
    std::cout << "boundary search (first_trials " << c.search->first_trials << ", confidence "
              << c.search->confidence << ", budget "
              << (c.search->budget ? std::to_string(*c.search->budget) + " jobs per line"
                                   : std::string("none"))
              << "): nw run runs only the grid jobs the search asks for, as results arrive; the "
                 "counts and costs below are the whole grid's, an upper bound\n";
  }

  for (const auto& b : UnavailableBackends(*loaded)) std::cout << UnavailableBackendNote(b) << "\n";

  std::vector<std::string> done;
  std::vector<BackendTiming> history;
  if (std::filesystem::exists(g.db_path)) {
    NW_ASSIGN_OR_RETURN(auto store, Store::Open(g.db_path, Store::Mode::kReadOnly));
    NW_ASSIGN_OR_RETURN(done, store->DoneKeys(loaded->keys));
    NW_ASSIGN_OR_RETURN(history, store->TimingHistory());
  }
  // The per-token model (report/cost.h) that `nw run`'s ETA uses too.
  const report::JobCostModel cost(history);
  std::map<std::string, int64_t> history_jobs;
  for (const BackendTiming& t : history) history_jobs[t.backend] = t.jobs;
  std::cout << "already done in " << g.db_path << ": " << done.size() << "\n";
  std::cout << "to run: " << loaded->jobs.size() - done.size() << "\n";

  std::set<std::string> done_set(done.begin(), done.end());
  std::map<std::string, int64_t> tokens_left;  // backend -> prompt tokens still to run
  std::map<std::string, int64_t> jobs_left;
  std::map<std::string, double> ms_left;
  for (size_t i = 0; i < loaded->jobs.size(); ++i) {
    if (done_set.count(loaded->keys[i])) continue;
    const JobSpec& job = loaded->jobs[i];
    tokens_left[job.backend] += job.context_length;
    ++jobs_left[job.backend];
    ms_left[job.backend] += cost.Cost(job);
  }
  for (const auto& [backend, tokens] : tokens_left) {
    std::cout << "  " << backend << ": " << jobs_left[backend] << " jobs, " << tokens
              << " prompt tokens";
    if (!cost.HasHistory(backend)) {
      std::cout << ", no timing history for this backend yet\n";
    } else {
      std::cout << ", about " << FormatDuration(ms_left[backend] / 1000.0) << " of one worker ("
                << cost.MsPerToken(backend) << " ms per prompt token over " << history_jobs[backend]
                << " finished jobs)\n";
    }
  }
  return Status::Ok();
}

}  // namespace

void RegisterPlan(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand("plan", "Dry run: job count, jobs already done, estimated cost");
  auto path = std::make_shared<std::string>();
  auto max_jobs = std::make_shared<int64_t>(0);
  cmd->add_option("campaign", *path, "Campaign YAML")->required();
  cmd->add_option("--max-jobs", *max_jobs, "Raise the job-count limit");
  cmd->callback([path, max_jobs, &g] {
    Status s = Plan(g, *path, *max_jobs);
    if (!s.ok()) {
      std::cerr << s.message() << "\n";
      g.exit_code = 2;
    }
  });
}

}  // namespace nw::cli
