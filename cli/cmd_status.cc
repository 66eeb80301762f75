// nw status [CAMPAIGN]: progress of every campaign (or one) in the database, read-only.
// nw status [CAMPAIGN] --coordinator tcp://HOST:PORT: the same, asked of a coordinator daemon,
// with each campaign's priority and state and the workers connected now.
#include <algorithm>
#include <iomanip>
#include <iostream>

#include "cli/commands.h"
#include "cli/git_rev.h"
#include "cli/progress.h"
#include "common/clock.h"
#include "coordinator/control_client.h"
#include "db/store.h"
#include "engine/engine.h"
#include "protocol/messages.h"
#include "report/stats.h"
#include "slurm/slurm_env.h"

namespace nw::cli {
namespace {

// A GPU worker's last report: "GPU busy 91.3% over 10s, 4s ago".
std::string GpuBusyText(const WorkerRecord& w, int64_t now_ms) {
  return "GPU busy " + report::FormatBusy(*w.gpu_busy) + " over " +
         FormatDuration(static_cast<double>(w.gpu_busy_ms) / 1000.0) + ", " +
         FormatDuration(static_cast<double>(std::max<int64_t>(0, now_ms - w.gpu_busy_at_ms)) /
                        1000.0) +
         " ago";
}

Status ShowStatus(const Globals& g, const std::string& only) {
  const int64_t now_ms = SystemClock().WallMs();
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
      // Worker ids, devices and Slurm facts are peers' strings: control bytes escaped (LogSafe).
      std::cout << "  " << LogSafe(w.id) << "  " << LogSafe(w.device) << "  " << w.state;
      std::string job, node;
      SlurmPlacement(w.capabilities, &job, &node);
      if (!job.empty()) std::cout << "  slurm job " << LogSafe(job) << " on " << LogSafe(node);
      if (w.gpu_busy) std::cout << "  " << GpuBusyText(w, now_ms);
      std::cout << "\n";
    }
  }
  return Status::Ok();
}

struct RemoteStatusArgs {
  std::string coordinator;
  std::string server_key;
  std::string curve_key;
  int64_t timeout_ms = 5000;
};

Status ShowRemoteStatus(const RemoteStatusArgs& a, const std::string& only) {
  NW_ASSIGN_OR_RETURN(
      ControlClientOptions options,
      ClientOptionsFromFlags(a.coordinator, a.server_key, a.curve_key, a.timeout_ms));
  zmq::context_t context;
  ControlClient client(context, options);
  NW_ASSIGN_OR_RETURN(StatusReply reply, client.QueryStatus(only));
  std::cout << std::left << std::setw(28) << "campaign" << std::setw(10) << "state" << std::right
            << std::setw(9) << "priority" << std::setw(8) << "jobs" << std::setw(8) << "queued"
            << std::setw(8) << "leased" << std::setw(8) << "done" << std::setw(8) << "failed"
            << std::setw(8) << "pass" << std::setw(8) << "miss" << std::setw(8) << "other"
            << "\n";
  for (const CampaignStatus& c : reply.campaigns) {
    std::cout << std::left << std::setw(28) << c.name << std::setw(10) << c.state << std::right
              << std::setw(9) << c.priority << std::setw(8) << c.total << std::setw(8) << c.queued
              << std::setw(8) << c.leased << std::setw(8) << c.done << std::setw(8) << c.failed
              << std::setw(8) << c.pass << std::setw(8) << c.miss << std::setw(8) << c.other
              << "\n";
    if (c.search) {
      std::cout << "  boundary search: " << c.search->asked_jobs << " of " << c.search->grid_jobs
                << " grid jobs asked for, " << c.search->lines_finished << " of " << c.search->lines
                << " lines finished\n";
    }
  }
  std::cout << "\nworkers connected: " << reply.workers.size() << "\n";
  for (const WorkerStatus& w : reply.workers) {
    std::cout << "  " << LogSafe(w.id) << "  " << LogSafe(w.host) << "  " << LogSafe(w.device)
              << "  " << w.busy << "/" << w.slots << " busy  backends";
    for (const auto& b : w.backends) std::cout << " " << LogSafe(b);
    if (!w.slurm_job.empty()) {
      std::cout << "  slurm job " << LogSafe(w.slurm_job) << " on " << LogSafe(w.node);
    }
    if (w.draining) std::cout << "  draining";
    if (w.gpu_busy) {
      std::cout << "  GPU busy " << report::FormatBusy(*w.gpu_busy) << " over "
                << FormatDuration(static_cast<double>(w.gpu_busy_ms) / 1000.0);
    }
    std::cout << "\n";
  }
  return Status::Ok();
}

}  // namespace

void RegisterStatus(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand("status", "Progress of the campaigns in the database");
  auto name = std::make_shared<std::string>();
  auto remote = std::make_shared<RemoteStatusArgs>();
  cmd->add_option("campaign", *name, "Only this campaign");
  cmd->add_option("--coordinator", remote->coordinator,
                  "Ask this coordinator daemon (tcp://HOST:PORT) instead of reading --db");
  cmd->add_option("--server-key", remote->server_key,
                  "With --coordinator: its public key (NAME.pub or Z85): use CURVE");
  cmd->add_option("--curve-key", remote->curve_key,
                  "With --coordinator: this client's key pair (NAME.key)");
  cmd->add_option("--timeout-ms", remote->timeout_ms,
                  "With --coordinator: wait this long for the reply (3 tries)")
      ->capture_default_str();
  cmd->callback([name, remote, &g] {
    if (!remote->coordinator.empty()) {
      Status s = ShowRemoteStatus(*remote, *name);
      if (!s.ok()) {
        std::cerr << "nw status: " << s.ToString() << "\n";
        g.exit_code = s.code() == StatusCode::kNotFound ? 2 : 1;
      }
      return;
    }
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
    std::cout << "nw " << GitRevision() << " (engine " << kEngineVersion << ", backends";
    for (const auto& b : AvailableBackends()) std::cout << " " << b;
    std::cout << ")\n";
  });
}

}  // namespace nw::cli
