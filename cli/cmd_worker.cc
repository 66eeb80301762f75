// nw worker --coordinator tcp://HOST:PORT [--cpu | --gpu N | --gpus all] [--slots K]: a worker
// process. It registers with the coordinator, advertising what it can run (backends, device,
// engine version, host facts), runs the jobs it is granted on K engine slots and reports the
// results until they are acknowledged. It reconnects by itself (1 s doubling to 32 s) when the
// coordinator goes away, and runs until SIGINT/SIGTERM or until the coordinator tells it to exit.
//
// The first SIGINT/SIGTERM drains the worker (worker/worker.h: no more jobs, queued ones handed
// back, running ones get --drain-s to finish and be acknowledged, then it leaves); a second one
// stops it at once. A job still running when the grace is over has been handed back to the
// coordinator, and the process exits without waiting for it (an engine cannot be interrupted),
// a few seconds after the grace. --idle-exit-s makes it leave when it has had nothing to do for
// that long, so a batch job gives its node back. --coordinator-file reads the endpoint from the
// file `nw coordinator --endpoint-file` writes (waiting for it to appear), again at every
// reconnect. Inside a Slurm job the worker reports the job and node (slurm/slurm_env.h).
//
// --gpu N / --gpus all|0,2 need a build with CUDA, an engine with a CUDA backend to run the jobs
// with, and the GPUs (worker/gpu_plan.h); otherwise the worker refuses with the reason (exit 2)
// and never falls back to the CPU. A build without the CUDA engine backend refuses every GPU
// request. `--gpus` starts one `nw worker --gpu i` process per GPU and waits for them.
//
// TEST DOUBLE: the hidden option --test-executor sleep:MS replaces the engine with an executor
// that sleeps MS milliseconds per job and answers "pass" or "miss" from the job key without
// running any model. It exists only for the scheduler, load and fault tests (tests/dist/,
// bench/); results it writes are marked device "test-double". The product always runs the
// real engine (EngineExecutor).
//
// Exit codes: 0 stopped (signal, or told to exit); 1 a runtime failure; 2 bad arguments.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stop_token>
#include <thread>

#include "cli/commands.h"
#include "common/clock.h"
#include "common/signal_stopper.h"
#include "common/stopwatch.h"
#include "coordinator/curve.h"
#include "engine/backend_catalog.h"
#include "engine/checkpoint/model_files.h"
#include "engine/engine.h"
#include "report/stats.h"
#include "slurm/slurm_env.h"
#include "worker/engine_executor.h"
#include "worker/gpu_plan.h"
#include "worker/gpu_utilization.h"
#include "worker/worker.h"

extern char** environ;

namespace nw::cli {
namespace {

using json = nlohmann::json;

struct WorkerArgs {
  std::string coordinator;
  std::string coordinator_file;
  int64_t coordinator_wait_s = 600;
  int64_t idle_exit_s = 0;
  int64_t drain_s = 30;
  bool cpu = false;
  int gpu = -1;
  std::string gpus;
  bool gpu_visible = false;
  int slots = 1;
  int prefetch = -1;  // -1: one per slot
  std::string id;
  int64_t heartbeat_ms = 1000;
  std::string server_key;
  std::string curve_key;
  std::string test_executor;
  std::vector<std::string> models;
  bool verbose = false;
};

// The test double (see the file comment). Deterministic: the outcome depends on the key only.
class TestDoubleExecutor final : public JobExecutor {
 public:
  explicit TestDoubleExecutor(int64_t sleep_ms) : sleep_ms_(sleep_ms) {}
  JobResult Execute(const JobSpec& spec, const std::string& key, int attempt) override {
    const auto t0 = std::chrono::steady_clock::now();
    if (sleep_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    JobResult r;
    r.job_key = key;
    r.attempt = attempt;
    const bool pass = !key.empty() && (key.back() % 2 == 0);
    r.outcome = pass ? Outcome::kPass : Outcome::kMiss;
    r.expected = "test-double";
    r.generated_text = pass ? "test-double" : "test-double-miss";
    r.prompt_tokens = spec.context_length;
    r.device = "test-double";
    r.engine_version = spec.engine_version;
    r.total_ms = MsSince(t0);
    return r;
  }
  json Capabilities() const override {
    return json{{"backends", AvailableBackends()}, {"device", "test-double"}};
  }

 private:
  int64_t sleep_ms_;
};

Result<int64_t> ParseTestExecutor(const std::string& spec) {
  const std::string prefix = "sleep:";
  if (spec.rfind(prefix, 0) != 0) {
    return Status::InvalidArgument("--test-executor: expected sleep:MS, got '" + spec + "'");
  }
  const std::string ms = spec.substr(prefix.size());
  char* end = nullptr;
  const long long v = std::strtoll(ms.c_str(), &end, 10);
  if (ms.empty() || end == nullptr || *end != '\0' || v < 0 || v > 3'600'000) {
    return Status::InvalidArgument("--test-executor: MS must be 0..3600000, got '" + ms + "'");
  }
  return static_cast<int64_t>(v);
}

std::string Hostname() {
  std::array<char, 256> buf{};
  if (gethostname(buf.data(), buf.size() - 1) != 0) return "host";
  return buf.data();
}

// Output of a command (empty if it cannot run), for nvidia-smi queries.
std::string Capture(const std::string& cmd) {
  std::string out;
  std::FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (p == nullptr) return out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  pclose(p);
  return out;
}

// Host facts for the READY capabilities (shown by `nw status --coordinator`, never matched).
json HostFacts() {
  json facts;
  facts["host"] = Hostname();
  facts["pid"] = static_cast<int64_t>(getpid());
  if (auto slurm = SlurmFactsFromEnv([](const char* v) { return std::getenv(v); })) {
    facts["slurm"] = *slurm;
  }
  facts["cpus"] = static_cast<int64_t>(std::thread::hardware_concurrency());
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) facts["memory_bytes"] = static_cast<int64_t>(pages) * page;
  return facts;
}

// The GPUs nvidia-smi lists (none when it is missing or fails).
std::vector<GpuDevice> ListGpus() {
  auto devices = ParseNvidiaSmiGpus(Capture(std::string(kNvidiaSmiGpuQuery)));
  return devices.ok() ? *devices : std::vector<GpuDevice>();
}

// --gpus: one `nw worker --gpu i` process per GPU (worker/gpu_plan.h); waits for them and passes
// SIGINT/SIGTERM on.
int RunPerGpu(const std::vector<GpuWorkerProcess>& plan) {
  std::array<char, 4096> self{};
  const ssize_t n = readlink("/proc/self/exe", self.data(), self.size() - 1);
  if (n <= 0) {
    std::cerr << "nw worker: cannot find my own executable\n";
    return 1;
  }
  std::vector<pid_t> children;
  for (const GpuWorkerProcess& p : plan) {
    std::vector<std::string> args = p.argv;
    std::vector<char*> argv;
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, self.data(), nullptr, nullptr, argv.data(), environ) != 0) {
      std::cerr << "nw worker: cannot start the worker for GPU " << p.gpu << "\n";
      continue;
    }
    children.push_back(pid);
  }
  SignalStopper stopper([&children](int sig) {
    for (pid_t c : children) kill(c, sig);
  });
  int rc = children.size() == plan.size() ? 0 : 1;
  for (pid_t c : children) {
    int status = 0;
    while (waitpid(c, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  return rc;
}

// The endpoint in FILE (as `nw coordinator --endpoint-file` writes it: one line), or empty when
// the file is missing or empty.
std::string ReadEndpointFile(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

// Waits up to `wait_s` for the endpoint file to name an endpoint.
Result<std::string> AwaitEndpointFile(const std::string& path, int64_t wait_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(wait_s);
  while (true) {
    std::string ep = ReadEndpointFile(path);
    if (!ep.empty()) {
      if (ep.find("://") == std::string::npos) {
        return Status::InvalidArgument("--coordinator-file " + path + ": '" + ep +
                                       "' is not an endpoint (expected tcp://HOST:PORT)");
      }
      return ep;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::DeadlineExceeded("--coordinator-file " + path + ": no endpoint after " +
                                      std::to_string(wait_s) +
                                      " s (is `nw coordinator --endpoint-file` running?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// After a drain request, the process ends by `grace`: Worker::Run() has handed back what still
// runs by then, but it waits for the running engines before it returns. This exits the process
// when Run() has not returned a few seconds after the grace (the coordinator already re-queued
// those jobs). Owned by RunWorker; armed from the signal thread, so its own thread starts there
// and inherits that thread's blocked SIGINT/SIGTERM.
class DrainDeadline {
 public:
  DrainDeadline() = default;
  DrainDeadline(const DrainDeadline&) = delete;
  DrainDeadline& operator=(const DrainDeadline&) = delete;

  // The first call starts the clock; later ones keep it.
  void Arm(std::chrono::milliseconds after) {
    std::lock_guard<std::mutex> l(mu_);
    if (thread_.joinable()) return;
    const auto deadline = std::chrono::steady_clock::now() + after;
    thread_ = std::jthread([this, deadline](std::stop_token st) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_until(lock, st, deadline, [] { return false; });
      if (st.stop_requested()) return;
      std::cerr << "nw worker: jobs still running after the drain grace; they were handed back "
                   "to the coordinator; exiting without them\n";
      std::cerr.flush();
      std::_Exit(0);
    });
  }

 private:
  std::mutex mu_;
  std::condition_variable_any cv_;
  std::jthread thread_;  // last: stopped and joined before the members it uses go
};

int RunWorker(const WorkerArgs& a, const Globals& g) {
  if (a.coordinator.empty() == a.coordinator_file.empty()) {
    std::cerr << "nw worker: give one of --coordinator EP (or NW_COORDINATOR) and "
                 "--coordinator-file FILE\n";
    return 2;
  }
  if (a.idle_exit_s < 0 || a.drain_s < 0 || a.coordinator_wait_s < 0) {
    std::cerr << "nw worker: --idle-exit-s, --drain-s and --coordinator-wait-s must be >= 0\n";
    return 2;
  }
  const int device_flags =
      (a.cpu ? 1 : 0) + (a.gpu >= 0 ? 1 : 0) + (a.gpus.empty() ? 0 : 1) + (a.gpu_visible ? 1 : 0);
  if (device_flags > 1) {
    std::cerr << "nw worker: give one of --cpu, --gpu N, --gpus all, --gpu-visible\n";
    return 2;
  }
  const bool gpu_request = a.gpu >= 0 || !a.gpus.empty() || a.gpu_visible;
  const char* gpu_flag = a.gpu >= 0 ? "--gpu" : a.gpu_visible ? "--gpu-visible" : "--gpus";
  std::string visible;  // --gpu-visible: CUDA_VISIBLE_DEVICES as the batch system set it
  std::vector<GpuDevice> devices;
  std::vector<int> gpus;
  if (gpu_request && a.test_executor.empty()) {
    // Refuse honestly: no CUDA, no CUDA engine backend, or no such GPU (worker/gpu_plan.h).
    const GpuSupport support = ThisBuildGpuSupport();
    if (support.cuda_build && !GpuBackends(support).empty()) devices = ListGpus();
    Status st = CheckGpuWorkerSupport(support, devices);
    if (st.ok() && a.gpu_visible) {
      const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
      visible = v != nullptr ? v : "";
      if (visible.empty() || visible.find(',') != std::string::npos) {
        st = Status::InvalidArgument(
            "CUDA_VISIBLE_DEVICES must name exactly one GPU (Slurm sets it for "
            "--gpus-per-task=1), got '" +
            visible + "'");
      }
    } else if (st.ok()) {
      auto selected =
          SelectGpus(a.gpu >= 0 ? std::optional<int>(a.gpu) : std::nullopt, a.gpus, devices);
      if (selected.ok()) {
        gpus = *selected;
      } else {
        st = selected.status();
      }
    }
    if (!st.ok()) {
      std::cerr << "nw worker: " << gpu_flag << ": " << st.message() << "\n";
      return 2;
    }
  } else if (gpu_request) {
    std::cerr << "nw worker: --test-executor runs no engine; it takes no " << gpu_flag << "\n";
    return 2;
  }
  if (a.slots < 1 || a.slots > kMaxSlots || a.prefetch > 3 * a.slots) {
    std::cerr << "nw worker: --slots must be 1.." << kMaxSlots
              << " and --prefetch at most 3 x slots\n";
    return 2;
  }
  if (a.heartbeat_ms <= 0) {
    std::cerr << "nw worker: --heartbeat-ms must be positive\n";
    return 2;
  }
  if (!a.gpus.empty()) {
    std::vector<std::string> tail = {"--slots",        std::to_string(a.slots),
                                     "--heartbeat-ms", std::to_string(a.heartbeat_ms),
                                     "--idle-exit-s",  std::to_string(a.idle_exit_s),
                                     "--drain-s",      std::to_string(a.drain_s)};
    if (!a.coordinator.empty()) {
      tail.insert(tail.begin(), {"--coordinator", a.coordinator});
    } else {
      tail.insert(tail.begin(), {"--coordinator-file", a.coordinator_file, "--coordinator-wait-s",
                                 std::to_string(a.coordinator_wait_s)});
    }
    if (a.prefetch >= 0) tail.insert(tail.end(), {"--prefetch", std::to_string(a.prefetch)});
    if (!a.server_key.empty()) tail.insert(tail.end(), {"--server-key", a.server_key});
    if (!a.curve_key.empty()) tail.insert(tail.end(), {"--curve-key", a.curve_key});
    for (const auto& m : a.models) tail.insert(tail.end(), {"--model", m});
    if (a.verbose) tail.push_back("-v");
    std::vector<std::string> globals = {"--db", g.db_path};
    if (g.quiet) globals.push_back("-q");
    return RunPerGpu(PlanGpuWorkers("nw", globals, gpus, a.id, tail));
  }

  WorkerOptions wo;
  wo.endpoint = a.coordinator;
  if (!a.coordinator_file.empty()) {
    auto ep = AwaitEndpointFile(a.coordinator_file, a.coordinator_wait_s);
    if (!ep.ok()) {
      std::cerr << "nw worker: " << ep.status().message() << "\n";
      return ep.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
    }
    wo.endpoint = *ep;
    // A coordinator restarted elsewhere (e.g. a requeued Slurm job) rewrites the file.
    wo.endpoint_source = [path = a.coordinator_file] { return ReadEndpointFile(path); };
  }
  json extra = HostFacts();
  std::string default_id = Hostname() + "-" + std::to_string(getpid());
  if (extra.contains("slurm")) {
    // e.g. slurm-1234_3-node7-4711: the job in `nw status`, unique across requeues (new pid).
    default_id = "slurm-" + SlurmJobLabel(extra["slurm"]) + "-" + default_id;
  }
  wo.worker_id = !a.id.empty() ? a.id : default_id;
  wo.host = Hostname();
  wo.heartbeat_interval_ms = a.heartbeat_ms;
  wo.idle_exit_ms = a.idle_exit_s * 1000;
  wo.drain_grace_ms = a.drain_s * 1000;
  if (!a.server_key.empty() || !a.curve_key.empty()) {
    if (a.server_key.empty() || a.curve_key.empty()) {
      std::cerr << "nw worker: CURVE needs both --server-key (the coordinator's public key) and "
                   "--curve-key (this worker's key pair)\n";
      return 2;
    }
    auto server = ReadCurvePublicKey(a.server_key);
    auto mine = ReadCurveSecretKeyFile(a.curve_key);
    if (!server.ok() || !mine.ok()) {
      std::cerr << "nw worker: " << (!server.ok() ? server.status() : mine.status()).ToString()
                << "\n";
      return 2;
    }
    wo.curve_server_key = *server;
    wo.curve_public_key = mine->public_key;
    wo.curve_secret_key = mine->secret_key;
  }
  if (!a.models.empty()) {
    // Only jobs of these models (matched by digest), e.g. the ones this host has on disk.
    json digests = json::array();
    for (const auto& dir : a.models) {
      auto files = LocateModel(dir);
      if (!files.ok()) {
        std::cerr << "nw worker: --model " << dir << ": " << files.status().ToString() << "\n";
        return 2;
      }
      digests.push_back(files->digest);
    }
    extra["models"] = digests;
  }
  extra["prefetch"] = a.prefetch >= 0 ? a.prefetch : a.slots;
  extra["engine_versions"] = json::array({std::string(kEngineVersion)});

  std::vector<std::unique_ptr<JobExecutor>> executors;
  std::unique_ptr<GpuUtilizationSource> gpu_busy;  // a GPU worker's NVML samples, where available
  std::string gpu_busy_absent;                     // why not, said once below
  if (!a.test_executor.empty()) {
    auto sleep_ms = ParseTestExecutor(a.test_executor);
    if (!sleep_ms.ok()) {
      std::cerr << "nw worker: " << sleep_ms.status().message() << "\n";
      return 2;
    }
    // The test double runs whatever engine version the jobs name.
    extra.erase("engine_versions");
    for (int i = 0; i < a.slots; ++i) {
      executors.push_back(std::make_unique<TestDoubleExecutor>(*sleep_ms));
    }
  } else {
    std::vector<std::string> backends;
    const bool gpu = a.gpu >= 0 || a.gpu_visible;
    if (a.gpu_visible) {
      // The batch system chose the GPU: CUDA_VISIBLE_DEVICES stays as it set it (device 0 is
      // that GPU). SLURM_JOB_GPUS names it in nvidia-smi's numbering, for the name shown.
      extra["gpu"] = {{"visible", visible}};
      const char* job_gpus = std::getenv("SLURM_JOB_GPUS");
      for (const GpuDevice& d : devices) {
        if (job_gpus != nullptr && std::to_string(d.index) == job_gpus) {
          extra["gpu"] = {{"visible", visible},
                          {"index", d.index},
                          {"name", d.name},
                          {"memory_mib", d.memory_mib}};
        }
      }
      backends = GpuBackends(ThisBuildGpuSupport());
    } else if (gpu) {
      // One engine per GPU: the process sees only its GPU, as CUDA's device 0.
      for (const auto& [k, v] : GpuWorkerEnvironment(a.gpu)) setenv(k.c_str(), v.c_str(), 1);
      for (const GpuDevice& d : devices) {
        if (d.index == a.gpu) {
          extra["gpu"] = {{"index", d.index}, {"name", d.name}, {"memory_mib", d.memory_mib}};
        }
      }
      backends = GpuBackends(ThisBuildGpuSupport());
    } else {
      for (const auto& b : AvailableBackends()) {
        const BackendInfo* info = FindBackend(b);
        if (info != nullptr && info->device == DeviceKind::kCpu) backends.push_back(b);
      }
    }
    for (int i = 0; i < a.slots; ++i) {
      EngineExecutorOptions eo;
      eo.worker_id = wo.worker_id;
      eo.backends = backends;
      executors.push_back(std::make_unique<EngineExecutor>(eo));
    }
    if (gpu) {
      extra["device"] = extra.contains("gpu") ? extra["gpu"].value("name", std::string("cuda"))
                                              : std::string("cuda");
      // CUDA's device 0 is this worker's GPU (above); NVML finds it by its PCI bus id.
      auto source = OpenGpuUtilization(0);
      if (source.ok()) {
        gpu_busy = std::move(*source);
      } else {
        gpu_busy_absent = source.status().message();
      }
    }
  }
  wo.extra_capabilities = extra;

  std::mutex log_mu;
  const bool quiet = g.quiet;
  const bool verbose = a.verbose;
  wo.log = [&log_mu, quiet, verbose](std::string_view line) {
    if (quiet) return;
    if (!verbose && line.find(" rejected") != std::string_view::npos) return;
    std::lock_guard<std::mutex> l(log_mu);
    std::cerr << line << "\n";
  };
  SystemClock clock;
  zmq::context_t context;
  const std::string gpu_busy_name = gpu_busy ? gpu_busy->Name() : std::string();
  Worker worker(context, clock, wo, std::move(executors), std::move(gpu_busy));
  if (!g.quiet) {
    std::cerr << "worker " << wo.worker_id << ": " << a.slots << " slots, coordinator "
              << wo.endpoint << (a.test_executor.empty() ? "" : " (TEST DOUBLE executor)") << "\n";
    if (!gpu_busy_name.empty()) {
      std::cerr << "worker " << wo.worker_id << ": GPU busy measured with " << gpu_busy_name
                << "\n";
    } else if (!gpu_busy_absent.empty()) {
      std::cerr << "worker " << wo.worker_id
                << ": GPU busy not measured (reported as unknown): " << gpu_busy_absent << "\n";
    }
  }
  DrainDeadline deadline;
  const auto drain_ms = std::chrono::milliseconds(wo.drain_grace_ms);
  int signals = 0;  // used only by the signal thread
  SignalStopper stopper(
      [&worker, &deadline, &signals, drain_ms](int) {
        // First signal: drain; the process ends by the grace (+5 s). A second: stop now.
        if (++signals == 1) {
          worker.Drain();
          deadline.Arm(drain_ms + std::chrono::seconds(5));
        } else {
          worker.Stop();
        }
      },
      SignalStopper::Deliver::kEvery);
  Status st = worker.Run();
  if (!st.ok()) {
    std::cerr << "nw worker: " << st.ToString() << "\n";
    return 1;
  }
  if (!g.quiet) {
    const WorkerStats s = worker.Stats();
    std::cerr << "worker " << wo.worker_id << ": "
              << (s.idle_exit ? "idle, left"
                  : s.drained ? "drained"
                              : "stopped")
              << " after " << s.jobs_executed << " jobs (" << s.acks << " acknowledged, "
              << s.handed_back << " handed back, " << s.reconnects << " reconnects)";
    if (s.gpu_busy) std::cerr << ", GPU busy " << report::FormatBusy(*s.gpu_busy) << " of the time";
    std::cerr << "\n";
  }
  return 0;
}

}  // namespace

void RegisterWorker(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand(
      "worker", "Run a worker process: take jobs from a coordinator and run them on this host");
  auto a = std::make_shared<WorkerArgs>();
  cmd->add_option("--coordinator", a->coordinator, "The coordinator's endpoint (tcp://HOST:PORT)")
      ->envname("NW_COORDINATOR");
  cmd->add_option("--coordinator-file", a->coordinator_file,
                  "Read the endpoint from this file (`nw coordinator --endpoint-file`), waiting "
                  "for it; read again at every reconnect");
  cmd->add_option("--coordinator-wait-s", a->coordinator_wait_s,
                  "With --coordinator-file: how long to wait for the file")
      ->capture_default_str();
  cmd->add_option("--idle-exit-s", a->idle_exit_s,
                  "Leave after this long connected with nothing to do (0: never), e.g. to give a "
                  "batch job's node back")
      ->capture_default_str();
  cmd->add_option("--drain-s", a->drain_s,
                  "On SIGTERM/SIGINT: take no more jobs, give queued ones back, let running ones "
                  "finish for this long, then leave (a second signal: leave at once)")
      ->capture_default_str();
  cmd->add_flag("--cpu", a->cpu, "Run on the CPU backends (the default)");
  cmd->add_option("--gpu", a->gpu,
                  "Run one engine on GPU N (needs a CUDA build with a CUDA engine backend; "
                  "refused otherwise)");
  cmd->add_option("--gpus", a->gpus,
                  "'all' or a list like 0,2: one `nw worker --gpu i` process per GPU (same "
                  "requirements as --gpu)");
  cmd->add_flag("--gpu-visible", a->gpu_visible,
                "Run one engine on the one GPU CUDA_VISIBLE_DEVICES names, left as the batch "
                "system set it (Slurm --gpus-per-task=1; same requirements as --gpu)");
  cmd->add_option("--slots", a->slots, "Jobs run at once (one engine each)")->capture_default_str();
  cmd->add_option("--prefetch", a->prefetch,
                  "Jobs queued locally beyond the slots (default: one per slot)");
  cmd->add_option("--id", a->id, "Worker id, unique per coordinator (default: HOST-PID)");
  cmd->add_option("--model", a->models,
                  "Only run jobs of this model folder (repeatable; default: any model)");
  cmd->add_option("--heartbeat-ms", a->heartbeat_ms, "Heartbeat interval (as the coordinator's)")
      ->capture_default_str();
  cmd->add_option("--server-key", a->server_key,
                  "The coordinator's public key (NAME.pub or Z85): use CURVE");
  cmd->add_option("--curve-key", a->curve_key, "This worker's key pair (NAME.key)");
  // Hidden: a test double for scheduler, load and fault tests (see the file comment).
  cmd->add_option("--test-executor", a->test_executor, "")->group("");
  cmd->add_flag("-v,--verbose", a->verbose, "Log rejected results too");
  cmd->callback([a, &g] { g.exit_code = RunWorker(*a, g); });
}

}  // namespace nw::cli
