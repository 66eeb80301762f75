// nw run CAMPAIGN.yaml: the embedded default. Expands the campaign into the database, starts the
// coordinator and N local workers in this process (the same NWW01 protocol that crosses the
// network, over inproc://), shows progress, and prints the boundary report.
// Exit codes: 0 every job finished with an answer (pass or miss, or the model's truncated/empty
// answers); 1 some jobs ended in engine_error/timeout or failed; 2 bad input; 130 interrupted.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <stop_token>
#include <thread>
#include <utility>

#include "cli/campaign_load.h"
#include "cli/commands.h"
#include "cli/http_dashboard.h"
#include "cli/progress.h"
#include "common/clock.h"
#include "common/signal_stopper.h"
#include "compose/embedded_run.h"
#include "coordinator/db_lock.h"
#include "coordinator/search/search_driver.h"
#include "db/store.h"
#include "report/cost.h"
#include "report/report.h"
#include "report/stats.h"

using nw::report::CampaignReport;
using nw::report::LoadCampaignReport;
using nw::report::RenderJson;
using nw::report::RenderMarkdown;
using nw::report::RenderText;
using nw::report::TextOptions;
#include "engine/backend_catalog.h"
#include "engine/engine.h"
#include "http/http_executor.h"
#include "worker/engine_executor.h"

namespace nw::cli {
namespace {

struct RunArgs {
  std::string campaign;
  int workers = 0;
  int gpu_slots = 1;
  int64_t max_jobs = 0;
  bool rerun = false;
  bool ipc = false;
  bool no_report = false;
  bool verbose = false;
  DashboardFlags dashboard;  // --http, --http-token-file
};

// What the boundary searches did, one line each (stderr; the report follows on stdout).
std::string SearchSummary(const search::SearchDriver& d) {
  std::ostringstream out;
  out << "boundary search: " << d.asked_jobs() << " of " << d.grid_jobs()
      << " grid jobs (finished or read from the database)\n";
  for (const search::LineReport& l : d.Lines()) {
    auto len = [](const std::optional<int64_t>& v) {
      return v ? report::FormatThousands(*v) : std::string("-");
    };
    auto verdict = [](const std::optional<int64_t>& v, nw::Verdict vd) {
      return v ? " (" + std::string(nw::VerdictName(vd)) + ")" : std::string();
    };
    out << "  " << l.config << " position " << report::FormatPosition(l.needle_position)
        << ": passes up to " << len(l.pass_length) << verdict(l.pass_length, l.verdict.pass_verdict)
        << ", fails from " << len(l.fail_length) << verdict(l.fail_length, l.verdict.fail_verdict)
        << " (" << search::LineStateName(l.verdict.state) << ", " << l.verdict.jobs << " of "
        << l.grid_jobs << " jobs)\n";
  }
  return out.str();
}

int Run(const RunArgs& a, const Globals& g) {
  LoadOptions lo;
  if (a.max_jobs > 0) lo.max_jobs = a.max_jobs;
  auto loaded = LoadCampaign(a.campaign, lo);
  if (!loaded.ok()) {
    std::cerr << loaded.status().message() << "\n";
    return 2;
  }
  const Campaign& c = loaded->resolved.campaign;
  for (const auto& w : c.warnings) std::cerr << "warning: " << w << "\n";
  // Local workers run the engine backends of this build and machine only: refuse up front rather
  // than leave jobs queued that no local worker can take.
  if (const auto missing = UnavailableBackends(*loaded); !missing.empty()) {
    for (const auto& b : missing) {
      std::cerr << "nw run: backend " << b << " is not available here (" << UnavailableReason(b)
                << "), so the local workers cannot run its jobs; run this campaign with `nw "
                   "coordinator` and a GPU worker (`nw worker --gpu N`) on a machine with one, or "
                   "leave "
                << b << " out of the campaign\n";
    }
    return 2;
  }
  std::optional<search::SearchDriver> driver;
  if (c.search) {
    if (a.rerun) {
      std::cerr
          << "nw run: --rerun is not supported for a campaign with `search:` (its jobs depend "
             "on the stored results); run the grid campaign again instead\n";
      return 2;
    }
    auto d = search::SearchDriver::Create(*c.search, static_cast<int>(c.trial_seeds.size()),
                                          loaded->jobs);
    if (!d.ok()) {
      std::cerr << "nw run: " << d.status().ToString() << "\n";
      return 2;
    }
    driver.emplace(std::move(*d));
  }

  if (Status st = CheckDashboardFlags(a.dashboard); !st.ok()) {
    std::cerr << "nw run: " << st.ToString() << "\n";
    return 2;
  }
  // The GPU slots: --gpu-slots engine executors per GPU, built before the database work so that
  // their engines load meanwhile. The CPU slots advertise the CPU backends only; the cuda* jobs
  // go to the GPU slots, each running its own engines (own weights on the GPU, own stream) on
  // that device.
  std::vector<std::string> cpu_backends, gpu_backends;
  for (const std::string& b : AvailableBackends()) {
    const BackendInfo* info = FindBackend(b);
    (info != nullptr && info->device == DeviceKind::kCuda ? gpu_backends : cpu_backends)
        .push_back(b);
  }
  int gpus = 0;
  std::vector<std::unique_ptr<EngineExecutor>> gpu_executors;
  std::vector<std::pair<std::string, std::string>> preload;  // (model_dir, backend)
  if (CampaignUsesDevice(*loaded, DeviceKind::kCuda)) {
    gpus = CudaDeviceCount();
    EngineExecutorOptions eo;
    eo.backends = gpu_backends;
    for (int i = 0; i < gpus; ++i) {
      for (int k = 0; k < a.gpu_slots; ++k) {
        eo.worker_id = "embedded-gpu" + std::to_string(i) +
                       (a.gpu_slots > 1 ? "-" + std::to_string(k) : std::string());
        eo.gpu = i;
        gpu_executors.push_back(std::make_unique<EngineExecutor>(eo));
      }
    }
    // The engines the first cuda jobs need, in job order, as many as a slot keeps loaded.
    for (const JobSpec& j : loaded->jobs) {
      if (preload.size() >= static_cast<size_t>(eo.max_loaded_engines)) break;
      const BackendInfo* info = FindBackend(j.backend);
      if (info == nullptr || info->device != DeviceKind::kCuda) continue;
      auto pair = std::make_pair(j.model_dir, j.backend);
      if (std::find(preload.begin(), preload.end(), pair) == preload.end()) {
        preload.push_back(std::move(pair));
      }
    }
  }
  // Engine preload (CUDA context, model files, weights upload: about 0.6 s on an H200) overlaps
  // the database work below: one thread per GPU slot loads that slot's engines into its
  // executor. Ownership: while these threads run, each executor is touched by its thread only;
  // the main thread touches none until it has joined them all (`preloaded.clear()` below, or
  // these jthreads' destructors on an early return: they are declared after gpu_executors, so
  // they are joined before the executors go). A failed preload is only noted: the executor kept
  // nothing, so the job on that engine loads it again and reports the error as it would
  // without the preload.
  std::vector<Status> preload_status(gpu_executors.size(), Status::Ok());
  std::vector<std::jthread> preloaded;
  for (size_t i = 0; i < gpu_executors.size() && !preload.empty(); ++i) {
    preloaded.emplace_back([e = gpu_executors[i].get(), &preload, &st = preload_status[i]] {
      for (const auto& [model_dir, backend] : preload) {
        if (Status s = e->Preload(model_dir, backend); !s.ok() && st.ok()) st = s;
      }
    });
  }

  // A database that a running `nw coordinator` daemon serves is the daemon's alone (and while
  // this run writes, no daemon may start on it): refuse before opening (opening may migrate).
  auto writer_lock = DbWriterLock::Acquire(g.db_path, DbWriterRole::kRun);
  if (!writer_lock.ok()) {
    std::cerr << "nw run: refusing to write to " << g.db_path << ": "
              << writer_lock.status().message()
              << "; give this run another --db, or send the campaign to the daemon with `nw submit "
              << a.campaign << " --coordinator ENDPOINT`\n";
    return 2;
  }
  SystemClock clock;
  auto store = Store::Open(g.db_path);
  if (!store.ok()) {
    std::cerr << "nw run: " << store.status().ToString() << "\n";
    return 2;
  }
  // Another process holding the database's lock past the busy timeout: wait, retry, report
  // (Ctrl-C still stops the run: the signal ends the process before the run starts, and the
  // run's stop request ends the wait once it has).
  auto stop_requested = std::make_shared<std::atomic<bool>>(false);
  (*store)->SetBusyRetry(Store::WaitForLocks(
      "nw run", [](const std::string& line) { std::cerr << line << "\n"; },
      [stop_requested] { return stop_requested->load(); }));
  auto campaign_id = (*store)->UpsertCampaign(c.name, a.campaign, c.text, clock.WallMs());
  Status s = campaign_id.status();
  // A search starts from what the database knows (restart recovery); a grid runs every job.
  std::vector<JobSpec> jobs = loaded->jobs;
  std::vector<std::string> keys = loaded->keys;
  if (s.ok() && driver) {
    auto asked = driver->Start(**store);
    s = asked.status();
    if (s.ok()) {
      jobs = std::move(*asked);
      keys.clear();
      for (const JobSpec& j : jobs) keys.push_back(j.Key());
    }
  }
  if (s.ok()) s = (*store)->SetCampaignJobs(*campaign_id, jobs, clock.WallMs());
  if (s.ok() && a.rerun) s = (*store)->RequeueJobs(keys, clock.WallMs());
  if (s.ok() && !a.rerun) {
    // Jobs that failed only because workers did not finish them (expired leases, lost workers)
    // are not the jobs' fault: they run again; finished jobs stay finished.
    auto retried = (*store)->RequeueInfrastructureFailures(keys, clock.WallMs());
    s = retried.status();
    if (s.ok() && *retried > 0) {
      std::cerr << "nw run: " << *retried
                << " jobs that failed only through expired leases or lost workers run again\n";
    }
  }
  if (!s.ok()) {
    std::cerr << "nw run: " << s.ToString() << "\n";
    return 2;
  }
  auto done_keys = (*store)->DoneKeys(keys);
  const size_t already = done_keys.ok() ? done_keys->size() : 0;
  // The ETA weighs each job by its prompt tokens and its backend's cost per token (nw plan's
  // model); without timing history it still weighs jobs by their tokens.
  auto history = (*store)->TimingHistory();
  report::JobCostModel cost(history.ok() ? *history : std::vector<BackendTiming>{});
  {
    const std::set<std::string> done_set =
        done_keys.ok() ? std::set<std::string>(done_keys->begin(), done_keys->end())
                       : std::set<std::string>{};
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (!done_set.count(keys[i])) cost.AddPending(keys[i], jobs[i]);
    }
  }

  // One CPU worker per core up to 2 by default (no GPU backends in this build); a campaign with
  // an http backend gets at least as many as its requests in flight. Each slot runs the engine
  // in-process, or http jobs through one shared keep-alive pool per server (BackendRouter).
  int workers = a.workers;
  if (workers <= 0) workers = c.http ? std::max(2, c.http->spec.concurrency) : 2;
  if (!g.quiet) {
    std::cerr << "campaign '" << c.name << "': " << jobs.size() << " jobs"
              << (driver ? " (boundary search so far, of " + std::to_string(loaded->jobs.size()) +
                               " in the grid)"
                         : std::string())
              << ", " << already << " already done, " << workers << " workers"
              << (gpus > 0 ? " + " + std::to_string(gpus) + " GPU x " +
                                 std::to_string(a.gpu_slots) + " slot(s)"
                           : std::string())
              << ", database " << g.db_path << "\n";
  }

  // The preloads end here, before the signal stopper: a thread still running when it blocks the
  // signals in this thread would take them with their default action. From here on the main
  // thread owns the GPU executors again.
  preloaded.clear();
  if (a.verbose && !g.quiet) {
    for (size_t i = 0; i < preload_status.size(); ++i) {
      if (!preload_status[i].ok()) {
        std::cerr << "nw run: GPU slot " << i << ": " << preload_status[i].ToString()
                  << " (its jobs load the engine themselves and report the error)\n";
      }
    }
  }
  // Executors [0, gpus x gpu_slots) are the GPU slots, GPU by GPU, each GPU's one worker (below);
  // then one single-slot worker per CPU slot.
  auto http_pool = std::make_shared<HttpBackendPool>();
  std::vector<std::unique_ptr<JobExecutor>> executors;
  for (auto& e : gpu_executors) executors.push_back(std::move(e));
  for (int i = 0; i < workers; ++i) {
    EngineExecutorOptions eo;
    eo.backends = cpu_backends;
    eo.worker_id = "embedded-" + std::to_string(i);
    HttpExecutorOptions ho;
    ho.worker_id = eo.worker_id;
    ho.pool = http_pool;
    executors.push_back(std::make_unique<BackendRouter>(eo, ho));
  }

  // SIGINT/SIGTERM become a stop request (common/signal_stopper.h: a thread of its own waits
  // for them, so no global state is touched from a signal handler).
  std::stop_source stop;
  SignalStopper stopper([stop](int) mutable { stop.request_stop(); });
  // The dashboard (--http) starts after the stopper, so its thread has the signals blocked; it
  // reads the database read-only and the run's live metrics, and stops when this returns.
  LiveMetrics metrics;
  auto dashboard = StartDashboard(a.dashboard, g.db_path, &metrics, g.quiet);
  if (!dashboard.ok()) {
    std::cerr << "nw run: " << dashboard.status().ToString() << "\n";
    return 2;
  }
  std::stop_callback end_waits(stop.get_token(), [stop_requested] { *stop_requested = true; });
  ProgressLine progress(stderr, !g.quiet, clock);
  RunOptions ro;
  ro.transport = a.ipc ? EmbeddedTransport::kIpc : EmbeddedTransport::kInproc;
  ro.stop = stop.get_token();
  ro.metrics = &metrics;
  // One worker per GPU with its --gpu-slots slots and as many jobs queued locally beyond them
  // (as `nw worker --gpu N --slots K` defaults to), so a slot that finishes a job starts the
  // next at once instead of after a result -> grant -> job round trip; one per CPU slot.
  const int gpu_slots = a.gpu_slots;
  for (int i = 0; i < gpus; ++i) ro.groups.push_back({gpu_slots, gpu_slots});
  for (int i = 0; i < workers; ++i) ro.groups.push_back({1, 0});
  // GPU busy: each GPU's worker samples its GPU with NVML (its first executor is GPU i's first
  // slot, i x gpu_slots); where NVML is unavailable the value stays unknown, said once.
  bool busy_absent_said = g.quiet;
  ro.gpu_busy_source = [gpus, gpu_slots,
                        &busy_absent_said](size_t first) -> std::unique_ptr<GpuUtilizationSource> {
    if (first >= static_cast<size_t>(gpus) * static_cast<size_t>(gpu_slots)) return nullptr;
    auto source = OpenGpuUtilization(static_cast<int>(first) / gpu_slots);
    if (source.ok()) return std::move(*source);
    if (!busy_absent_said) {
      std::cerr << "nw run: GPU busy not measured: " << source.status().message() << "\n";
      busy_absent_said = true;
    }
    return nullptr;
  };
  ro.on_progress = [&progress, &cost](const ServerProgress& p) {
    progress.Update(p.done, p.failed, p.total, p.leased, p.workers, false, &cost);
  };
  const bool tty = report::RedrawAllowedOn(fileno(stderr));
  ro.log = [&g, tty, verbose = a.verbose](std::string_view line) {
    if (g.quiet || !verbose) return;
    std::cerr << (tty ? "\r\033[K" : "") << line << "\n";
  };
  // Both on Run()'s thread, like on_progress: the cost model learns which jobs finished, and a
  // search adds the jobs it asks for next.
  ro.on_committed =
      [&](const std::vector<JobResult>& committed,
          const std::vector<std::string>& given_up) -> Result<std::vector<JobRecord>> {
    for (const JobResult& r : committed) cost.Finished(r.job_key);
    for (const std::string& k : given_up) cost.Finished(k);
    if (!driver) return std::vector<JobRecord>{};
    auto more = driver->OnFinished(**store, *campaign_id, committed, given_up, clock.WallMs());
    if (more.ok()) {
      for (const JobRecord& j : *more) cost.AddPending(j.key, j.spec);
    }
    return more;
  };
  auto summary = RunEmbedded(**store, *campaign_id, std::move(executors), ro);
  if (!summary.ok()) {
    std::cerr << "\nnw run: " << summary.status().ToString() << "\n";
    return 1;
  }
  progress.Update(summary->done, summary->failed, summary->total, 0, 0, /*final=*/true, &cost);
  if (!g.quiet) {
    std::vector<std::pair<std::string, double>> busy;
    for (const RunSummary::GpuBusy& b : summary->gpu_busy) busy.emplace_back(b.gpu, b.busy);
    std::cerr << GpuBusyLines(busy);
  }
  if (driver && !g.quiet) std::cerr << SearchSummary(*driver);

  if (!a.no_report) {
    auto report = LoadCampaignReport(**store, c.name, c.criterion);
    if (!report.ok()) {
      std::cerr << "nw run: report: " << report.status().ToString() << "\n";
      return 1;
    }
    TextOptions to;
    to.color = report::ColorAllowedOn(fileno(stdout));
    std::cout << RenderText(*report, to);
  }
  if (stopper.signal() != 0) {
    std::cerr << "interrupted: finished jobs are saved; run the same command to continue\n";
    return 130;
  }
  if (summary->skipped > 0) {
    std::cerr << summary->skipped << " jobs need a backend no local worker has; they stay queued\n";
    return 1;
  }
  // Failed jobs (retries used up), engine errors and timeouts, with their reasons.
  auto failures = (*store)->FailureReasons(*campaign_id);
  if (!failures.ok()) {
    std::cerr << "nw run: " << failures.status().ToString() << "\n";
    return 1;
  }
  if (!failures->empty()) {
    int64_t errored = 0;
    for (const FailureReason& f : *failures) errored += f.jobs;
    std::cerr << errored << (errored == 1 ? " job" : " jobs")
              << " ended without an answer (failed after their retries, engine_error or "
                 "timeout):\n";
    for (const std::string& line : report::DescribeFailures(report::FailuresByReason(*failures))) {
      std::cerr << "  " << line << "\n";
    }
    std::cerr << "see `nw report " << c.name << "`\n";
    return 1;
  }
  return 0;
}

}  // namespace

void RegisterRun(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand(
      "run", "Run a campaign end to end on local workers and print the boundary report");
  auto a = std::make_shared<RunArgs>();
  cmd->add_option("campaign", a->campaign, "Campaign YAML")->required();
  cmd->add_option("--workers", a->workers,
                  "CPU worker slots (default 2, or the http backend's concurrency); cuda jobs run "
                  "on --gpu-slots slots per GPU besides these");
  cmd->add_option("--gpu-slots", a->gpu_slots,
                  "Engine slots per GPU for cuda* jobs (each holds its own copy of the weights on "
                  "the GPU; more slots overlap small jobs, docs/throughput.md); each GPU is one "
                  "worker that also keeps this many jobs queued ahead")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--max-jobs", a->max_jobs, "Raise the job-count limit");
  cmd->add_flag("--rerun", a->rerun, "Run finished jobs again (old results are kept)");
  cmd->add_flag("--ipc", a->ipc, "Use ipc:// instead of inproc:// between coordinator and workers");
  cmd->add_flag("--no-report", a->no_report, "Do not print the report at the end");
  cmd->add_flag("-v,--verbose", a->verbose, "Log coordinator and worker events");
  AddDashboardFlags(cmd, a->dashboard);
  cmd->callback([a, &g] { g.exit_code = Run(*a, g); });
}

}  // namespace nw::cli
