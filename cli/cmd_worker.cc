// nw worker --coordinator tcp://HOST:PORT [--cpu | --gpu N | --gpus all] [--slots K]: a worker
// process. It registers with the coordinator, advertising what it can run (backends, device,
// engine version, host facts), runs the jobs it is granted on K engine slots and reports the
// results until they are acknowledged. It reconnects by itself (1 s doubling to 32 s) when the
// coordinator goes away, and runs until SIGINT/SIGTERM or until the coordinator tells it to exit.
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
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <thread>

#include "cli/commands.h"
#include "common/clock.h"
#include "coordinator/curve.h"
#include "coordinator/process_util.h"
#include "engine/backend_catalog.h"
#include "engine/checkpoint/model_files.h"
#include "engine/engine.h"
#include "worker/engine_executor.h"
#include "worker/gpu_plan.h"
#include "worker/worker.h"

extern char** environ;

namespace nw::cli {
namespace {

using json = nlohmann::json;

struct WorkerArgs {
  std::string coordinator;
  bool cpu = false;
  int gpu = -1;
  std::string gpus;
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
    r.total_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
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

int RunWorker(const WorkerArgs& a, const Globals& g) {
  const int device_flags = (a.cpu ? 1 : 0) + (a.gpu >= 0 ? 1 : 0) + (a.gpus.empty() ? 0 : 1);
  if (device_flags > 1) {
    std::cerr << "nw worker: give one of --cpu, --gpu N, --gpus all\n";
    return 2;
  }
  const bool gpu_request = a.gpu >= 0 || !a.gpus.empty();
  std::vector<GpuDevice> devices;
  std::vector<int> gpus;
  if (gpu_request && a.test_executor.empty()) {
    // Refuse honestly: no CUDA, no CUDA engine backend, or no such GPU (worker/gpu_plan.h).
    const GpuSupport support = ThisBuildGpuSupport();
    if (support.cuda_build && !GpuBackends(support).empty()) devices = ListGpus();
    Status st = CheckGpuWorkerSupport(support, devices);
    if (st.ok()) {
      auto selected =
          SelectGpus(a.gpu >= 0 ? std::optional<int>(a.gpu) : std::nullopt, a.gpus, devices);
      if (selected.ok()) {
        gpus = *selected;
      } else {
        st = selected.status();
      }
    }
    if (!st.ok()) {
      std::cerr << "nw worker: " << (a.gpu >= 0 ? "--gpu" : "--gpus") << ": " << st.message()
                << "\n";
      return 2;
    }
  } else if (gpu_request) {
    std::cerr << "nw worker: --test-executor runs no engine; it takes no --gpu/--gpus\n";
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
    std::vector<std::string> tail = {"--coordinator",  a.coordinator,
                                     "--slots",        std::to_string(a.slots),
                                     "--heartbeat-ms", std::to_string(a.heartbeat_ms)};
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
  wo.worker_id = !a.id.empty() ? a.id : Hostname() + "-" + std::to_string(getpid());
  wo.host = Hostname();
  wo.heartbeat_interval_ms = a.heartbeat_ms;
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
  json extra = HostFacts();
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
    const bool gpu = a.gpu >= 0;
    if (gpu) {
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
    if (gpu) extra["device"] = extra.contains("gpu") ? extra["gpu"]["name"] : json("cuda");
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
  Worker worker(context, clock, wo, std::move(executors));
  if (!g.quiet) {
    std::cerr << "worker " << wo.worker_id << ": " << a.slots << " slots, coordinator "
              << a.coordinator << (a.test_executor.empty() ? "" : " (TEST DOUBLE executor)")
              << "\n";
  }
  SignalStopper stopper([&worker](int) { worker.Stop(); });
  Status st = worker.Run();
  if (!st.ok()) {
    std::cerr << "nw worker: " << st.ToString() << "\n";
    return 1;
  }
  if (!g.quiet) {
    const WorkerStats s = worker.Stats();
    std::cerr << "worker " << wo.worker_id << ": stopped after " << s.jobs_executed << " jobs ("
              << s.acks << " acknowledged, " << s.reconnects << " reconnects)\n";
  }
  return 0;
}

}  // namespace

void RegisterWorker(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand(
      "worker", "Run a worker process: take jobs from a coordinator and run them on this host");
  auto a = std::make_shared<WorkerArgs>();
  cmd->add_option("--coordinator", a->coordinator, "The coordinator's endpoint (tcp://HOST:PORT)")
      ->required()
      ->envname("NW_COORDINATOR");
  cmd->add_flag("--cpu", a->cpu, "Run on the CPU backends (the default)");
  cmd->add_option("--gpu", a->gpu,
                  "Run one engine on GPU N (needs a CUDA build with a CUDA engine backend; "
                  "refused otherwise)");
  cmd->add_option("--gpus", a->gpus,
                  "'all' or a list like 0,2: one `nw worker --gpu i` process per GPU (same "
                  "requirements as --gpu)");
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
