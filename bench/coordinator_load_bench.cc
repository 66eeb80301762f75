// Coordinator load benchmark: how fast one coordinator dispatches jobs and commits results, and
// how much memory a queued job costs it.
//
//   coordinator_load_bench [--jobs N] [--workers W] [--slots S] [--prefetch P] [--queued Q]
//                          [--transport inproc|tcp] [--batch B] [--grant-interval-ms G]
//
// Throughput: a real Server (the same loop `nw coordinator` runs) over a real SQLite file, and W
// real Workers (threads, each with S slots) whose executor returns at once (a no-op engine), all
// in this process. N jobs; the figures are attempts granted per second between the first and
// the last grant, and results committed per second between the first and the last commit.
// Memory: heap bytes in use (mallinfo2) with Q jobs queued in a coordinator, over Q; measured
// for the Scheduler alone and for a whole Server with the campaign loaded. Results and the
// command are recorded in docs/distributed.md.
#include <malloc.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "coordinator/scheduler.h"
#include "coordinator/server.h"
#include "db/store.h"
#include "worker/worker.h"

namespace nw {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  int64_t jobs = 20'000;
  int workers = 16;
  int slots = 1;
  int prefetch = 2;
  int64_t queued = 200'000;
  std::string transport = "inproc";
  int batch = 64;
  int64_t grant_interval_ms = 2;
};

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

int64_t HeapInUse() { return static_cast<int64_t>(mallinfo2().uordblks); }

int64_t RssBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

JobSpec Spec(int64_t i) {
  JobSpec s;
  s.model_dir = "/models/bench-model-with-a-realistic-path/v4-flash";
  s.model_digest = "4f1a3c9b7d2e8f60a5c4b3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2";
  s.engine_version = "nw-engine-0.1.0";
  s.task = "niah-single";
  s.haystack = "essay";
  s.context_length = 1024 + 64 * (i % 512);
  s.needle_position = static_cast<double>(i % 41) / 40.0;
  s.topk = 2048;
  s.backend = "cpu";
  s.seed = 12345;
  s.trial = static_cast<int>(i / 20'000);
  s.max_new_tokens = 16;
  s.probe = false;
  return s;
}

class NoOpExecutor final : public JobExecutor {
 public:
  JobResult Execute(const JobSpec&, const std::string& key, int attempt) override {
    JobResult r;
    r.job_key = key;
    r.attempt = attempt;
    r.outcome = Outcome::kPass;
    r.generated_text = "7654321";
    r.expected = "7654321";
    r.prompt_tokens = 1024;
    r.generated_tokens = 4;
    r.device = "no-op";
    return r;
  }
  nlohmann::json Capabilities() const override {
    return nlohmann::json{{"backends", {"cpu"}}, {"device", "no-op"}};
  }
};

std::filesystem::path TempDir(const std::string& what) {
  std::random_device rd;
  auto dir = std::filesystem::temp_directory_path() /
             ("nw-bench-" + what + "-" + std::to_string(getpid()) + "-" + std::to_string(rd()));
  std::filesystem::create_directories(dir);
  return dir;
}

// A campaign of n jobs in a fresh database.
Result<int64_t> MakeCampaign(Store& store, int64_t n) {
  NW_ASSIGN_OR_RETURN(int64_t id, store.UpsertCampaign("bench", "bench.yaml", "", 1));
  std::vector<JobSpec> jobs;
  jobs.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) jobs.push_back(Spec(i));
  NW_RETURN_IF_ERROR(store.AddJobs(id, jobs, 1));
  return id;
}

int Throughput(const Args& a) {
  const auto dir = TempDir("throughput");
  auto store = Store::Open(dir / "nw.db");
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  auto campaign = MakeCampaign(**store, a.jobs);
  if (!campaign.ok()) {
    std::fprintf(stderr, "%s\n", campaign.status().ToString().c_str());
    return 1;
  }
  const std::string endpoint =
      a.transport == "tcp" ? "tcp://127.0.0.1:*" : "inproc://nw-bench-" + std::to_string(getpid());
  SystemClock clock;
  zmq::context_t server_ctx;
  zmq::context_t worker_ctx(2);  // separate I/O threads for the workers' side (tcp)
  zmq::context_t& wctx = a.transport == "tcp" ? worker_ctx : server_ctx;

  std::mutex mu;
  Clock::time_point first_grant{}, last_grant{}, first_commit{}, last_commit{};
  int64_t grants_seen = 0;
  std::string bound;
  std::atomic<bool> is_bound{false};
  ServerOptions so;
  so.endpoint = endpoint;
  so.scheduler.heartbeat_interval_ms = 1000;
  so.result_batch_size = a.batch;
  so.grant_interval_ms = a.grant_interval_ms;
  so.on_listening = [&](const std::string& ep) {
    std::lock_guard<std::mutex> l(mu);
    bound = ep;
    is_bound = true;
  };
  so.on_progress = [&](const ServerProgress& p) {
    const auto now = Clock::now();
    const int64_t granted = p.done + p.leased + p.failed;
    if (granted > grants_seen) {
      if (grants_seen == 0) first_grant = now;
      last_grant = now;
      grants_seen = granted;
    }
    if (p.done > 0 && first_commit == Clock::time_point{}) first_commit = now;
    if (p.done == a.jobs) last_commit = now;
  };
  Server server(server_ctx, **store, clock, so);

  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<std::thread> threads;
  Result<RunSummary> summary = Status::Internal("not run");
  double server_cpu_s = 0;
  std::thread server_thread([&] {
    const double cpu0 = ThreadCpuSeconds();
    summary = server.Run(*campaign);
    server_cpu_s = ThreadCpuSeconds() - cpu0;
  });
  while (!is_bound) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (int w = 0; w < a.workers; ++w) {
    WorkerOptions wo;
    {
      std::lock_guard<std::mutex> l(mu);
      wo.endpoint = bound;
    }
    wo.worker_id = "bench-" + std::to_string(w);
    wo.extra_capabilities = {{"prefetch", a.prefetch}};
    std::vector<std::unique_ptr<JobExecutor>> ex;
    for (int s = 0; s < a.slots; ++s) ex.push_back(std::make_unique<NoOpExecutor>());
    workers.push_back(std::make_unique<Worker>(wctx, clock, wo, std::move(ex)));
  }
  const auto t0 = Clock::now();
  for (auto& w : workers) threads.emplace_back([&w] { (void)w->Run(); });
  server_thread.join();
  const auto t1 = Clock::now();
  for (auto& w : workers) w->Stop();
  for (auto& t : threads) t.join();
  if (!summary.ok()) {
    std::fprintf(stderr, "%s\n", summary.status().ToString().c_str());
    return 1;
  }
  const double dispatch_s = Seconds(first_grant, last_grant);
  const double commit_s = Seconds(first_commit, last_commit);
  std::printf(
      "throughput: %lld jobs, %d workers x %d slots (prefetch %d), %s, batch %d, grants every "
      "%lld ms\n",
      static_cast<long long>(a.jobs), a.workers, a.slots, a.prefetch, a.transport.c_str(), a.batch,
      static_cast<long long>(a.grant_interval_ms));
  std::printf("  wall time                  %8.3f s (%lld committed)\n", Seconds(t0, t1),
              static_cast<long long>(summary->committed));
  std::printf("  dispatched                 %8.0f jobs/s (first to last grant, %.3f s)\n",
              static_cast<double>(grants_seen) / std::max(dispatch_s, 1e-9), dispatch_s);
  std::printf("  committed                  %8.0f results/s (first to last commit, %.3f s)\n",
              static_cast<double>(summary->committed) / std::max(commit_s, 1e-9), commit_s);
  // The coordinator thread's own CPU time (the workers compete for the same cores here).
  std::printf("  coordinator CPU            %8.1f us per job (%.3f s; %.0f jobs/s per core)\n",
              1e6 * server_cpu_s / static_cast<double>(a.jobs), server_cpu_s,
              static_cast<double>(a.jobs) / std::max(server_cpu_s, 1e-9));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return summary->committed == a.jobs ? 0 : 1;
}

int Memory(const Args& a) {
  // The scheduler alone.
  {
    SystemClock clock;
    std::vector<JobSpec> specs;
    specs.reserve(static_cast<size_t>(a.queued));
    std::vector<std::string> keys;
    keys.reserve(static_cast<size_t>(a.queued));
    for (int64_t i = 0; i < a.queued; ++i) {
      specs.push_back(Spec(i));
      keys.push_back(specs.back().Key());
    }
    const int64_t before = HeapInUse();
    {
      Scheduler s(clock, SchedulerOptions{});
      if (!s.AddCampaign(1, "bench", 0).ok()) return 1;
      for (int64_t i = 0; i < a.queued; ++i) {
        if (!s.AddCampaignJob(1, keys[static_cast<size_t>(i)], specs[static_cast<size_t>(i)], 0)
                 .ok()) {
          return 1;
        }
      }
      const int64_t after = HeapInUse();
      std::printf("memory: %lld queued jobs\n", static_cast<long long>(a.queued));
      std::printf("  scheduler alone            %8.0f bytes per queued job\n",
                  static_cast<double>(after - before) / static_cast<double>(a.queued));
    }
  }
  // A whole coordinator (Server) with the campaign loaded from SQLite and waiting for workers.
  const auto dir = TempDir("memory");
  auto store = Store::Open(dir / "nw.db");
  if (!store.ok()) return 1;
  auto campaign = MakeCampaign(**store, a.queued);
  if (!campaign.ok()) return 1;
  malloc_trim(0);
  const int64_t heap_before = HeapInUse();
  const int64_t rss_before = RssBytes();
  SystemClock clock;
  zmq::context_t ctx;
  std::atomic<int64_t> heap_loaded{0}, rss_loaded{0};
  ServerOptions so;
  so.endpoint = "inproc://nw-bench-memory";
  so.on_progress = [&](const ServerProgress& p) {
    if (p.queued == a.queued && heap_loaded == 0) {
      heap_loaded = HeapInUse();
      rss_loaded = RssBytes();
    }
  };
  Server server(ctx, **store, clock, so);
  Result<RunSummary> summary = Status::Internal("not run");
  std::thread t([&] { summary = server.Run(*campaign); });
  while (heap_loaded == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  server.Stop();
  t.join();
  std::printf(
      "  coordinator (Server)       %8.0f bytes per queued job (heap in use; RSS grew "
      "%.0f bytes per job)\n",
      static_cast<double>(heap_loaded - heap_before) / static_cast<double>(a.queued),
      static_cast<double>(rss_loaded - rss_before) / static_cast<double>(a.queued));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}

// Parses the command line (CLI11); exits 0 after --help, 2 on a bad option or value.
Args ParseArgs(int argc, char** argv) {
  Args a;
  CLI::App app{"Coordinator load: dispatch and commit rates, memory per queued job"};
  app.add_option("--jobs", a.jobs, "Jobs for the throughput run")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--workers", a.workers, "Worker threads")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--slots", a.slots, "Slots per worker")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--prefetch", a.prefetch, "Jobs a worker may hold beyond its slots")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  app.add_option("--queued", a.queued, "Jobs queued for the memory measurement")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--transport", a.transport, "Worker transport")
      ->check(CLI::IsMember({"inproc", "tcp"}))
      ->capture_default_str();
  app.add_option("--batch", a.batch, "Results per commit")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--grant-interval-ms", a.grant_interval_ms, "Grant pass interval")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
  return a;
}

}  // namespace
}  // namespace nw

int main(int argc, char** argv) {
  const nw::Args a = nw::ParseArgs(argc, argv);
  const int rc = nw::Throughput(a);
  return rc != 0 ? rc : nw::Memory(a);
}
