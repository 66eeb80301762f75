// Worker: the worker runtime. Connects a DEALER socket to the coordinator, registers (READY)
// with its executors' capabilities, heartbeats, runs JOBs on its slots and reports RESULTs until
// they are ACKed. The protocol is protocol/messages.h; the semantics are in docs/protocol.md.
//
// Threads and ownership: Run() is the worker's loop thread; it owns the DEALER socket and one
// end of an inproc PAIR socket per slot. Each slot is a thread started and joined by Run() that
// owns the other PAIR end and exactly one JobExecutor, and runs one job at a time; jobs go down
// and results come back through the PAIR sockets, so the loop keeps heartbeating while a job
// runs. The zmq::context_t is borrowed and must outlive Run(). Stop() is the only method that may
// be called from another thread (an atomic flag the loop checks at least every 50 ms); Stop()
// lets running jobs finish (an executor cannot be interrupted), then Run() returns.
//
// Liveness (Paranoid Pirate): when nothing valid arrives from the coordinator for
// heartbeat_liveness heartbeat intervals, the worker closes its socket, waits (1 s doubling to
// 32 s, reset by any valid message) and reconnects with a new READY that lists the attempts it
// still holds (running, or results not yet ACKed), then resends the unACKed results.
//
// Draining (Drain(), e.g. on SIGTERM from a batch scheduler): the worker stops taking jobs,
// re-registers with "draining": true (the coordinator grants it nothing more) and without the
// jobs it had queued locally (the coordinator re-queues those at once, without counting an
// attempt), lets the running jobs finish and their results be acknowledged for up to
// drain_grace_ms, then sends DISCONNECT (the coordinator re-queues whatever is still running) and
// Run() returns. Idle exit (idle_exit_ms): a registered worker that has had nothing to do for that
// long leaves the same way, so a batch job gives its devices back when the work is done.
//
// GPU busy (a GPU worker given a GpuUtilizationSource, e.g. NVML's): Run() starts a
// GpuBusySampler (its own polling thread, stopped and joined before Run() returns), each slot
// marks the samples around every job and puts the GPU's busy fraction over the job in its
// result (JobResult::gpu_busy), and every gpu_busy_report_ms a HEARTBEAT carries the busy
// fraction since the last report. Without a source, or where the samples say nothing, the
// values are absent, never 0; a source's first error is logged once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/status.h"
#include "protocol/messages.h"
#include "worker/executor.h"
#include "worker/gpu_utilization.h"

namespace nw {

struct WorkerOptions {
  std::string endpoint;  // where the coordinator's ROUTER is bound (inproc://, ipc://, tcp://)
  /// Optional: asked for the endpoint before every (re)connect, e.g. a file the coordinator
  /// writes (`nw coordinator --endpoint-file`) so a coordinator restarted elsewhere is found; an
  /// empty answer keeps the last endpoint. Called from the Run() thread.
  std::function<std::string()> endpoint_source;
  std::string worker_id;  // unique among the coordinator's workers; required
  std::string host;       // informational
  int64_t heartbeat_interval_ms = 1000;
  int heartbeat_liveness = 3;           // coordinator silent this many intervals -> reconnect
  int64_t reconnect_initial_ms = 1000;  // backoff before reconnecting, doubling ...
  int64_t reconnect_max_ms = 32000;     // ... up to this
  int64_t result_resend_ms = 0;         // resend an unACKed RESULT this often; 0 = 3 heartbeats
  size_t max_frame_bytes = kDefaultMaxFrameBytes;
  /// Drain(): how long running jobs may take to finish and have their results acknowledged.
  int64_t drain_grace_ms = 30'000;
  /// > 0: leave (DISCONNECT, Run() returns OK) after this long connected to a coordinator that
  /// answers, with no job running or queued here and no result waiting for its ACK. 0: never.
  int64_t idle_exit_ms = 0;
  /// Extra READY capabilities, merged over the executors' own (docs/protocol.md): e.g.
  /// {"prefetch": 2} to have that many jobs queued locally beyond the slots, "models",
  /// "engine_versions", or host facts (gpu, memory) that are shown but not matched. "backends"
  /// here is ignored: it is always what every executor supports.
  nlohmann::json extra_capabilities = nlohmann::json::object();
  /// CURVE: the coordinator's public key and this worker's key pair (Z85), both or neither.
  std::string curve_server_key;
  std::string curve_public_key;
  std::string curve_secret_key;
  /// GPU busy (with a GpuUtilizationSource): a HEARTBEAT carries the GPU's busy fraction since
  /// the last report this often, and the sampler reads the source at least this often.
  int64_t gpu_busy_report_ms = 10'000;
  int64_t gpu_busy_poll_ms = 1000;
  /// Called from the Run() thread only (malformed messages, reconnects, rejected results).
  std::function<void(std::string_view)> log;
};

/// Counters, readable from any thread while Run() is going.
struct WorkerStats {
  int64_t jobs_received = 0;  // JOB messages accepted (duplicates excluded)
  int64_t jobs_executed = 0;  // results produced by the executors
  int64_t results_sent = 0;   // RESULT messages sent, resends included
  int64_t acks = 0;           // ACKs that matched an unACKed result
  int64_t reconnects = 0;     // times the socket was recreated after coordinator silence
  int64_t malformed = 0;      // coordinator messages dropped as malformed or unexpected
  int64_t handed_back = 0;    // attempts given back unfinished by Drain() (queued or running)
  bool idle_exit = false;     // Run() returned because of idle_exit_ms
  bool drained = false;       // Run() returned after a Drain()
  /// The GPU's busy fraction over the last Run() (with a GpuUtilizationSource whose samples
  /// covered it); nullopt otherwise.
  std::optional<double> gpu_busy;
};

class Worker {
 public:
  /// One slot per executor; the slots share the advertised capabilities (the intersection of
  /// the executors' backends). `gpu_busy`: the utilization source of this worker's GPU (null:
  /// GPU busy is not measured).
  Worker(zmq::context_t& context, const Clock& clock, WorkerOptions options,
         std::vector<std::unique_ptr<JobExecutor>> executors,
         std::unique_ptr<GpuUtilizationSource> gpu_busy = nullptr);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  /// Runs until the coordinator sends DISCONNECT (without reconnect) or Stop() is called; OK in
  /// both cases. Errors: invalid options, or a ZeroMQ failure (named). Call it once at a time.
  Status Run();
  /// Thread-safe: asks Run() to send DISCONNECT, let running jobs finish and return.
  void Stop();
  /// Thread-safe: asks Run() to drain (file comment): take no more jobs, hand back the queued
  /// ones, finish the running ones within drain_grace_ms, then DISCONNECT and return.
  void Drain();
  WorkerStats Stats() const;
  /// The READY capabilities this worker advertises (the first executor's, with backends
  /// narrowed to what every executor supports, and options.extra_capabilities merged in),
  /// computed once at construction.
  nlohmann::json Capabilities() const;
  /// The GPU utilization source's name; empty without one.
  std::string GpuBusySourceName() const;

 private:
  struct Loop;
  void Log(const std::string& line) const;
  static nlohmann::json MergedCapabilities(
      const std::vector<std::unique_ptr<JobExecutor>>& executors, const nlohmann::json& extra);

  zmq::context_t& context_;
  const Clock& clock_;
  WorkerOptions options_;
  std::vector<std::unique_ptr<JobExecutor>> executors_;
  std::unique_ptr<GpuUtilizationSource> gpu_busy_source_;  // may be null
  const nlohmann::json capabilities_;                      // computed once, at construction
  std::atomic<bool> stop_{false};
  std::atomic<bool> drain_{false};
  struct Counters {
    std::atomic<int64_t> jobs_received{0}, jobs_executed{0}, results_sent{0}, acks{0},
        reconnects{0}, malformed{0}, handed_back{0};
    std::atomic<bool> idle_exit{false}, drained{false};
    std::atomic<double> gpu_busy{-1};  // < 0: not measured
  };
  Counters counters_;
};

}  // namespace nw
