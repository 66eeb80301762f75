// nw coordinator --listen tcp://HOST:PORT --db FILE: the coordinator daemon. The single writer of
// the database; serves the campaigns submitted with `nw submit` to workers started with
// `nw worker`, until SIGINT/SIGTERM. Restarting it on the same database recovers everything
// (docs/distributed.md). Without CURVE keys it listens only on loopback, unless --insecure.
// --endpoint-file writes the endpoint workers should use (`nw worker --coordinator-file`): the
// bound one, with a wildcard address (tcp://*:PORT, 0.0.0.0, [::]) replaced by --advertise-host
// (default: this host's name), so a coordinator running as a Slurm job can be found by workers on
// other nodes (docs/slurm.md).
// Exit codes: 0 stopped by a signal; 1 a runtime failure (database, socket); 2 bad arguments.
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "cli/http_dashboard.h"
#include "common/clock.h"
#include "common/signal_stopper.h"
#include "coordinator/curve.h"
#include "coordinator/db_lock.h"
#include "coordinator/server.h"
#include "db/store.h"

namespace nw::cli {
namespace {

struct CoordinatorArgs {
  std::string listen;
  bool insecure = false;
  std::string curve_key;     // the coordinator's NAME.key
  std::string allow;         // allow-list file or directory
  std::string allow_work;    // keys that may only work
  std::string allow_submit;  // keys that may only submit and control
  std::vector<std::string> model_roots;
  int max_workers = 4096;
  std::string endpoint_file;
  std::string advertise_host;
  int64_t heartbeat_ms = 1000;
  int64_t lease_s = 2 * 60 * 60;
  int max_attempts = 3;
  int64_t orphan_grace_ms = 0;  // 0: reconnect backoff max + liveness + margin
  int64_t retry_backoff_ms = 1000;
  int64_t hedge_after_s = 0;
  bool verbose = false;
  DashboardFlags dashboard;  // --http, --http-token-file
};

std::string Timestamp() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// The endpoint to give workers for the one bound: a wildcard host becomes `host`.
std::string AdvertisedEndpoint(const std::string& bound, const std::string& host) {
  for (const char* wildcard : {"tcp://0.0.0.0:", "tcp://*:", "tcp://[::]:"}) {
    const std::string w(wildcard);
    if (bound.rfind(w, 0) == 0) return "tcp://" + host + ":" + bound.substr(w.size());
  }
  return bound;
}

std::string ThisHostName() {
  std::array<char, 256> buf{};
  if (gethostname(buf.data(), buf.size() - 1) != 0) return "localhost";
  return buf.data();
}

int Coordinator(const CoordinatorArgs& a, const Globals& g) {
  ServerOptions so;
  so.endpoint = a.listen;
  const bool any_allow = !a.allow.empty() || !a.allow_work.empty() || !a.allow_submit.empty();
  if (!a.curve_key.empty() || any_allow) {
    if (a.curve_key.empty() || !any_allow) {
      std::cerr << "nw coordinator: CURVE needs both --curve-key (this coordinator's key pair) "
                   "and --allow, --allow-work or --allow-submit (the workers' and clients' "
                   "public keys)\n";
      return 2;
    }
    auto keys = ReadCurveSecretKeyFile(a.curve_key);
    if (!keys.ok()) {
      std::cerr << "nw coordinator: " << keys.status().ToString() << "\n";
      return 2;
    }
    so.curve = *keys;
    for (const auto& [path, out] :
         {std::pair<const std::string*, std::set<std::string>*>{&a.allow, &so.curve_allow},
          {&a.allow_work, &so.curve_allow_work},
          {&a.allow_submit, &so.curve_allow_submit}}) {
      if (path->empty()) continue;
      auto allow = ReadCurveAllowList(*path);
      if (!allow.ok()) {
        std::cerr << "nw coordinator: " << allow.status().ToString() << "\n";
        return 2;
      }
      *out = *allow;
    }
  }
  for (const std::string& root : a.model_roots) {
    if (!std::filesystem::path(root).is_absolute()) {
      std::cerr << "nw coordinator: --model-root " << root << ": must be an absolute path\n";
      return 2;
    }
    so.job_check.model_roots.emplace_back(root);
  }
  if (a.max_workers < 1) {
    std::cerr << "nw coordinator: --max-workers must be >= 1\n";
    return 2;
  }
  so.max_workers = a.max_workers;
  if (!so.curve && !a.insecure && !IsLocalOnlyEndpoint(a.listen)) {
    std::cerr << "nw coordinator: refusing to listen on " << a.listen
              << " without encryption: use a loopback address (tcp://127.0.0.1:PORT), give "
                 "CURVE keys (--curve-key and --allow; see `nw keygen`), or pass --insecure on a "
                 "network you trust\n";
    return 2;
  }
  if (a.heartbeat_ms <= 0 || a.lease_s <= 0 || a.max_attempts < 1 || a.retry_backoff_ms < 0 ||
      a.hedge_after_s < 0) {
    std::cerr << "nw coordinator: --heartbeat-ms, --lease-s and --max-attempts must be positive "
                 "(--retry-backoff-ms >= 0)\n";
    return 2;
  }

  if (Status st = CheckDashboardFlags(a.dashboard); !st.ok()) {
    std::cerr << "nw coordinator: " << st.ToString() << "\n";
    return 2;
  }

  // The single writer: no other daemon and no `nw run` on this database while it serves.
  auto lock = DbWriterLock::Acquire(g.db_path, DbWriterRole::kCoordinator);
  if (!lock.ok()) {
    std::cerr << "nw coordinator: refusing to serve " << g.db_path << ": "
              << lock.status().message() << "\n";
    return 2;
  }
  auto store = Store::Open(g.db_path);
  if (!store.ok()) {
    std::cerr << "nw coordinator: " << store.status().ToString() << "\n";
    return 2;
  }
  // The server writes its measurements here; the dashboard (--http) reads them.
  LiveMetrics metrics;
  so.metrics = &metrics;

  std::mutex log_mu;  // the ZAP handler logs from its own thread
  const bool quiet = g.quiet;
  const bool verbose = a.verbose;
  so.log = [&log_mu, quiet, verbose](std::string_view line) {
    if (quiet) return;
    // Routine lines (leases, rejected late results) only with -v.
    if (!verbose && (line.find("failed, will retry") != std::string_view::npos ||
                     line.find("rejected result") != std::string_view::npos)) {
      return;
    }
    std::lock_guard<std::mutex> l(log_mu);
    std::cerr << Timestamp() << " " << line << "\n";
  };
  so.scheduler.heartbeat_interval_ms = a.heartbeat_ms;
  so.scheduler.lease_ms = a.lease_s * 1000;
  so.scheduler.max_attempts = a.max_attempts;
  // A worker that lost us waits out its backoff (up to 32 intervals' worth of seconds) before it
  // reconnects; leases from before a restart wait that long plus the liveness window.
  so.scheduler.orphan_grace_ms =
      a.orphan_grace_ms > 0 ? a.orphan_grace_ms
                            : 32'000 + 4 * a.heartbeat_ms * so.scheduler.heartbeat_liveness;
  so.scheduler.hedge_after_ms = a.hedge_after_s * 1000;
  so.scheduler.retry_backoff_initial_ms = a.retry_backoff_ms;
  so.scheduler.retry_backoff_max_ms = std::max<int64_t>(a.retry_backoff_ms, 32'000);
  const std::string endpoint_file = a.endpoint_file;
  const std::string advertise = a.advertise_host.empty() ? ThisHostName() : a.advertise_host;
  so.on_listening = [&endpoint_file, &advertise](const std::string& bound) {
    if (endpoint_file.empty()) return;
    // Written whole, then renamed: a reader never sees half an endpoint.
    const std::string tmp = endpoint_file + ".tmp";
    {
      std::ofstream out(tmp);
      out << AdvertisedEndpoint(bound, advertise) << "\n";
    }
    std::error_code ec;
    std::filesystem::rename(tmp, endpoint_file, ec);
  };
  SystemClock clock;
  zmq::context_t context;
  Server server(context, **store, clock, so);
  std::atomic<bool> stopping{false};
  // Another process holding the database's lock past the busy timeout: wait, retry, report.
  (*store)->SetBusyRetry(Store::WaitForLocks(
      "nw coordinator", [&so](const std::string& line) { so.log(line); },
      [&stopping] { return stopping.load(); }));
  SignalStopper stopper([&server, &stopping](int) {
    stopping = true;
    server.Stop();
  });
  // After the stopper (its thread then inherits the blocked signals). It reads the database on
  // its own read-only connection and the live metrics; it stops before either goes away.
  auto dashboard = StartDashboard(a.dashboard, g.db_path, &metrics, g.quiet);
  if (!dashboard.ok()) {
    std::cerr << "nw coordinator: " << dashboard.status().ToString() << "\n";
    return 2;
  }
  auto summary = server.Serve();
  if (!summary.ok()) {
    std::cerr << "nw coordinator: " << summary.status().ToString() << "\n";
    return 1;
  }
  if (!g.quiet) {
    std::cerr << Timestamp() << " coordinator: stopped (" << summary->committed
              << " results committed, " << summary->retried << " attempts retried, "
              << summary->workers_lost << " workers lost)\n";
  }
  return 0;
}

}  // namespace

void RegisterCoordinator(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand(
      "coordinator",
      "Run the coordinator daemon: serve submitted campaigns to `nw worker` processes");
  auto a = std::make_shared<CoordinatorArgs>();
  cmd->add_option("--listen", a->listen, "Endpoint to bind, e.g. tcp://127.0.0.1:5555")->required();
  cmd->add_flag("--insecure", a->insecure,
                "Allow a non-loopback endpoint without CURVE (trusted networks only)");
  cmd->add_option("--curve-key", a->curve_key,
                  "This coordinator's key pair (NAME.key from `nw keygen`): require CURVE");
  cmd->add_option("--allow", a->allow,
                  "Public keys of the workers and clients allowed in (a file, or a directory of "
                  ".pub files)");
  cmd->add_option("--allow-work", a->allow_work,
                  "Public keys that may only work (READY, RESULT): a file or a directory");
  cmd->add_option("--allow-submit", a->allow_submit,
                  "Public keys that may only submit and control campaigns: a file or a directory");
  cmd->add_option("--model-root", a->model_roots,
                  "Submitted jobs' model folders must lie inside one of these (repeatable; "
                  "default: anywhere)");
  cmd->add_option("--max-workers", a->max_workers, "Workers registered at once, at most")
      ->capture_default_str();
  cmd->add_option("--endpoint-file", a->endpoint_file,
                  "Write the bound endpoint here (useful with tcp://127.0.0.1:*), for "
                  "`nw worker --coordinator-file`");
  cmd->add_option("--advertise-host", a->advertise_host,
                  "In --endpoint-file, this host name for a wildcard address (default: the "
                  "host's name)");
  AddDashboardFlags(cmd, a->dashboard);
  cmd->add_option("--heartbeat-ms", a->heartbeat_ms, "Heartbeat interval")->capture_default_str();
  cmd->add_option("--lease-s", a->lease_s, "Time limit of one attempt")->capture_default_str();
  cmd->add_option("--max-attempts", a->max_attempts, "Attempts per job before it fails")
      ->capture_default_str();
  cmd->add_option("--retry-backoff-ms", a->retry_backoff_ms,
                  "First retry delay of a failed attempt (doubling up to 32 s)")
      ->capture_default_str();
  cmd->add_option("--hedge-after-s", a->hedge_after_s,
                  "Run a job a second time on an idle worker when its lease is older than this "
                  "and nothing else is queued for that worker; first result wins (0: never)")
      ->capture_default_str();
  cmd->add_option("--orphan-grace-ms", a->orphan_grace_ms,
                  "After a restart, how long leases wait for their worker (default: reconnect "
                  "backoff + liveness)");
  cmd->add_flag("-v,--verbose", a->verbose, "Also log retried attempts and rejected results");
  cmd->callback([a, &g] { g.exit_code = Coordinator(*a, g); });
}

}  // namespace nw::cli
