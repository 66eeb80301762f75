#include "compose/embedded_run.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>
#include <utility>

#include "worker/worker.h"

namespace nw {
namespace {

std::string RandomHex() {
  std::random_device rd;
  const uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 16; ++i) out.push_back(kHex[(v >> (4 * i)) & 15]);
  return out;
}

// Stops and joins the worker threads on every way out of RunEmbedded.
class WorkerThreads {
 public:
  explicit WorkerThreads(std::vector<std::unique_ptr<Worker>>& workers) : workers_(workers) {}
  ~WorkerThreads() { StopAndJoin(); }
  WorkerThreads(const WorkerThreads&) = delete;
  WorkerThreads& operator=(const WorkerThreads&) = delete;

  void Add(std::thread t) { threads_.push_back(std::move(t)); }
  void StopAndJoin() {
    for (auto& w : workers_) w->Stop();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  std::vector<std::unique_ptr<Worker>>& workers_;
  std::vector<std::thread> threads_;
};

}  // namespace

Result<RunSummary> RunEmbedded(Store& store, int64_t campaign_id,
                               std::vector<std::unique_ptr<JobExecutor>> executors,
                               RunOptions options) {
  if (executors.empty()) return Status::InvalidArgument("embedded run: no executors");
  for (const auto& e : executors) {
    if (e == nullptr) return Status::InvalidArgument("embedded run: null executor");
  }
  if (options.slots_per_worker < 1) {
    return Status::InvalidArgument("embedded run: slots_per_worker must be >= 1");
  }
  std::vector<WorkerGroup> groups = options.groups;
  if (groups.empty()) {
    for (size_t left = executors.size(); left > 0;) {
      const size_t n = std::min(left, static_cast<size_t>(options.slots_per_worker));
      groups.push_back({static_cast<int>(n), 0});
      left -= n;
    }
  }
  size_t grouped = 0;
  for (const WorkerGroup& g : groups) {
    if (g.executors < 1 || g.prefetch < 0 || g.prefetch > 3 * g.executors) {
      return Status::InvalidArgument(
          "embedded run: a worker group needs >= 1 executors and a prefetch of 0 .. 3 x its "
          "executors (got " +
          std::to_string(g.executors) + " executors, prefetch " + std::to_string(g.prefetch) + ")");
    }
    grouped += static_cast<size_t>(g.executors);
  }
  if (grouped != executors.size()) {
    return Status::InvalidArgument("embedded run: the worker groups have " +
                                   std::to_string(grouped) + " executors, not the " +
                                   std::to_string(executors.size()) + " given");
  }
  NW_RETURN_IF_ERROR(options.scheduler.Validate());

  std::string endpoint;
  std::filesystem::path ipc_file;
  if (options.transport == EmbeddedTransport::kInproc) {
    endpoint = "inproc://nw-embedded-" + RandomHex();
  } else {
    ipc_file = options.ipc_path.empty()
                   ? std::filesystem::temp_directory_path() /
                         ("nw-" + std::to_string(::getpid()) + "-" + RandomHex() + ".sock")
                   : std::filesystem::path(options.ipc_path);
    endpoint = "ipc://" + ipc_file.string();
  }

  // One log sink for the coordinator and every worker thread.
  std::mutex log_mu;
  std::function<void(std::string_view)> log;
  if (options.log) {
    log = [&log_mu, &options](std::string_view line) {
      std::lock_guard<std::mutex> lock(log_mu);
      options.log(line);
    };
  }

  SystemClock clock;
  zmq::context_t context;  // outlives every socket below

  std::vector<std::unique_ptr<Worker>> workers;
  for (size_t first = 0, n = 0; n < groups.size(); ++n) {
    const size_t count = static_cast<size_t>(groups[n].executors);
    std::vector<std::unique_ptr<JobExecutor>> group;
    for (size_t i = 0; i < count; ++i) group.push_back(std::move(executors[first + i]));
    first += count;
    WorkerOptions wo;
    wo.endpoint = endpoint;
    wo.worker_id = options.worker_prefix + "-" + std::to_string(n);
    wo.host = "embedded";
    wo.heartbeat_interval_ms = options.scheduler.heartbeat_interval_ms;
    wo.heartbeat_liveness = options.scheduler.heartbeat_liveness;
    wo.max_frame_bytes = options.max_frame_bytes;
    wo.log = log;
    wo.gpu_busy_report_ms = options.gpu_busy_report_ms;
    if (groups[n].prefetch > 0) wo.extra_capabilities["prefetch"] = groups[n].prefetch;
    std::unique_ptr<GpuUtilizationSource> busy_source =
        options.gpu_busy_source ? options.gpu_busy_source(first - count) : nullptr;
    workers.push_back(std::make_unique<Worker>(context, clock, std::move(wo), std::move(group),
                                               std::move(busy_source)));
  }

  ServerOptions so;
  so.endpoint = endpoint;
  so.scheduler = options.scheduler;
  so.max_frame_bytes = options.max_frame_bytes;
  so.result_batch_size = options.result_batch_size;
  so.result_batch_ms = options.result_batch_ms;
  so.expected_workers = static_cast<int>(workers.size());
  so.on_progress = options.on_progress;
  so.on_committed = options.on_committed;
  so.log = log;
  so.metrics = options.metrics;
  Server server(context, store, clock, std::move(so));

  std::vector<Status> worker_status(workers.size(), Status::Ok());
  std::atomic<size_t> running{workers.size()};
  Result<RunSummary> summary = Status::Internal("embedded run: not run");
  {
    WorkerThreads threads(workers);
    for (size_t i = 0; i < workers.size(); ++i) {
      threads.Add(std::thread([&, i] {
        worker_status[i] = workers[i]->Run();
        // If every worker is gone, nobody can finish the campaign: end the run.
        if (running.fetch_sub(1) == 1) server.Stop();
      }));
    }
    std::stop_callback on_stop(options.stop, [&server] { server.Stop(); });
    summary = server.Run(campaign_id);
    threads.StopAndJoin();
  }
  if (!ipc_file.empty()) {
    std::error_code ec;
    std::filesystem::remove(ipc_file, ec);
  }
  if (!summary.ok()) return summary.status().WithContext("embedded run");
  for (size_t i = 0; i < workers.size(); ++i) {
    const WorkerStats stats = workers[i]->Stats();
    if (stats.gpu_busy) {
      summary->gpu_busy.push_back({options.worker_prefix + "-" + std::to_string(i),
                                   workers[i]->GpuBusySourceName(), *stats.gpu_busy});
    }
  }
  if (summary->stopped && !options.stop.stop_requested()) {
    for (const auto& st : worker_status) {
      if (!st.ok()) return st.WithContext("embedded run: every worker exited; first error");
    }
    return Status::Internal("embedded run: every worker exited before the campaign finished");
  }
  return summary;
}

}  // namespace nw
