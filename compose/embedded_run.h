// RunEmbedded: `nw run` in one process. A coordinator (Server, on the calling thread) and one
// Worker per group of executors (each on its own thread) talk the same NWW01 protocol that
// crosses the network, over inproc:// (default) or ipc://, through one zmq::context_t owned here.
//
// Thread-safety: call from the thread that owns the Store. The progress callback runs on the
// calling thread; the log callback is serialized (it may be called from worker threads, never
// concurrently). options.stop may be requested from any thread (e.g. a signal-handling thread):
// running jobs finish, their leases go back to queued, and the summary says stopped.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "coordinator/scheduler.h"
#include "coordinator/server.h"
#include "db/store.h"
#include "worker/executor.h"
#include "worker/gpu_utilization.h"

namespace nw {

enum class EmbeddedTransport {
  kInproc,  // inproc://nw-embedded-<random>: no files, no ports
  kIpc,     // ipc://<ipc_path>: a Unix socket, as a multi-process setup would use locally
};

/// One worker of an embedded run: the next `executors` executors (in order) are its slots, and
/// it asks the coordinator for `prefetch` jobs queued locally beyond them (READY capability
/// "prefetch", as `nw worker --prefetch`), so a finished job's slot has its next job at once
/// instead of after a result -> grant -> job round trip.
struct WorkerGroup {
  int executors = 1;  // >= 1
  int prefetch = 0;   // 0 .. 3 x executors (`nw worker`'s bound)
};

struct RunOptions {
  EmbeddedTransport transport = EmbeddedTransport::kInproc;
  std::string ipc_path;  // kIpc: the socket file; empty = a fresh name in the temp dir
  /// The workers, in executor order; their executors must add up to the executors given. Empty:
  /// workers of slots_per_worker executors each (the last one may have fewer), no prefetch.
  std::vector<WorkerGroup> groups;
  int slots_per_worker = 1;  // without groups: executors are grouped into workers of this many
  std::string worker_prefix = "embedded";  // worker ids: <prefix>-0, <prefix>-1, ...
  SchedulerOptions scheduler;  // heartbeats, leases, retries (workers use the same heartbeat)
  int result_batch_size = 64;
  int64_t result_batch_ms = 50;
  size_t max_frame_bytes = kDefaultMaxFrameBytes;
  std::function<void(const ServerProgress&)> on_progress;
  std::function<void(std::string_view)> log;
  /// Jobs to add as results are committed (ServerOptions::on_committed): an adaptive search.
  std::function<Result<std::vector<JobRecord>>(const std::vector<JobResult>&,
                                               const std::vector<std::string>&)>
      on_committed;
  std::stop_token stop;            // request_stop() ends the run early (summary.stopped)
  LiveMetrics* metrics = nullptr;  // borrowed, may be null: ServerOptions::metrics
  /// GPU busy: called once per worker with the index (in `executors`) of its first executor;
  /// the source it returns (null: none) measures that worker's GPU (worker/worker.h). The
  /// summary's gpu_busy then has the busy fraction of each worker whose samples covered its run.
  std::function<std::unique_ptr<GpuUtilizationSource>(size_t first_executor)> gpu_busy_source;
  int64_t gpu_busy_report_ms = 10'000;  // WorkerOptions::gpu_busy_report_ms
};

/// Runs the campaign's queued jobs (and jobs leased by a crashed earlier run) on `executors`
/// until each is done or failed, writing results to `store`. Jobs whose backend no executor
/// supports are skipped (left queued; summary.skipped). Errors: invalid options or executors,
/// an unknown campaign, a database failure, a transport failure, or every worker exiting with
/// an error before the campaign finished.
Result<RunSummary> RunEmbedded(Store& store, int64_t campaign_id,
                               std::vector<std::unique_ptr<JobExecutor>> executors,
                               RunOptions options = {});

}  // namespace nw
