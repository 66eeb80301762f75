// Server: the coordinator runtime. A ROUTER socket bound to an endpoint (inproc://, ipc://,
// tcp://) speaking protocol/messages.h to workers; it owns the Scheduler and is the only writer
// of the Store for the duration of Run().
//
// Run(campaign): puts jobs leased by a crashed earlier run back to queued (Store::RequeueLeased),
// loads the campaign's queued jobs into the Scheduler, then serves workers until every job is
// done or failed, or Stop() is called. Durability follows Titanic: a lease is recorded before its
// JOB is sent; a result is committed (batched: up to result_batch_size results or
// result_batch_ms) before its ACK is sent; ACKs for duplicates and rejections wait for the batch
// too, so no ACK ever overtakes the commit it reports on. Malformed messages are logged and
// dropped. At the end every registered worker gets DISCONNECT (reconnect=false).
//
// Threads: Run() runs on the calling thread, which must be the Store's owning thread; it owns
// the socket. Callbacks (progress, log) are called on that thread. Stop() may be called from any
// thread (an atomic flag checked at least every 50 ms). The zmq::context_t is borrowed.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/status.h"
#include "coordinator/scheduler.h"
#include "db/store.h"
#include "protocol/messages.h"

namespace nw {

/// Campaign-wide progress, for a progress bar. done/failed include jobs finished before this run.
struct ServerProgress {
  int64_t total = 0;    // jobs of the campaign
  int64_t done = 0;     // with a committed result
  int64_t failed = 0;   // out of attempts (no result)
  int64_t queued = 0;   // in this run, waiting (or backing off)
  int64_t leased = 0;   // in this run, running
  int64_t skipped = 0;  // no worker can run them (left queued in the database)
  int64_t workers = 0;  // registered now
  friend bool operator==(const ServerProgress&, const ServerProgress&) = default;
};

/// What Run() did.
struct RunSummary {
  int64_t total = 0;              // jobs of the campaign
  int64_t done = 0, failed = 0;   // campaign-wide at the end
  int64_t done_before = 0;        // done before this run started
  int64_t failed_before = 0;      // failed before this run started (not retried: --rerun does)
  int64_t requeued_at_start = 0;  // leased jobs of a crashed run put back to queued
  int64_t committed = 0;          // results committed by this run
  int64_t failed_now = 0;         // jobs this run gave up on
  int64_t retried = 0;            // failed attempts that were requeued
  int64_t skipped = 0;            // jobs no registered worker could run (still queued)
  int64_t stale_results = 0;      // results fenced off (superseded attempt, unknown job)
  int64_t duplicate_results = 0;  // results of attempts already committed (re-ACKed)
  int64_t unknown_worker_messages = 0;  // from connections that had not sent READY
  int64_t malformed_messages = 0;       // dropped: undecodable or not a worker's command
  int64_t workers_seen = 0;             // distinct worker ids that registered
  int64_t workers_lost = 0;             // declared dead (missed heartbeats)
  bool stopped = false;                 // Stop() ended the run before the campaign finished
};

struct ServerOptions {
  std::string endpoint;  // bound by Run()
  SchedulerOptions scheduler;
  size_t max_frame_bytes = kDefaultMaxFrameBytes;
  int result_batch_size = 64;    // commit when this many results wait ...
  int64_t result_batch_ms = 50;  // ... or the oldest has waited this long
  int expected_workers = 0;      // > 0: once this many workers registered, queued jobs
                                 // none of them can run are skipped (embedded runs)
  std::function<void(const ServerProgress&)> on_progress;  // on change, from Run()'s thread
  std::function<void(std::string_view)> log;               // from Run()'s thread

  Status Validate() const;
};

class Server {
 public:
  Server(zmq::context_t& context, Store& store, const Clock& clock, ServerOptions options);
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// Serves the campaign until it is finished or Stop() is called (summary.stopped). Errors:
  /// invalid options, an unknown campaign, a database failure (fatal: the run stops, and the
  /// next run recovers from the database), a ZeroMQ failure (e.g. the endpoint is in use).
  Result<RunSummary> Run(int64_t campaign_id);
  /// Thread-safe. Leases still running are closed as failed attempts that will be retried
  /// (the jobs go back to queued), and workers are sent DISCONNECT. May come before Run(); a
  /// stopped Server stays stopped (make a new one for the next run).
  void Stop();

 private:
  struct Loop;
  zmq::context_t& context_;
  Store& store_;
  const Clock& clock_;
  ServerOptions options_;
  std::atomic<bool> stop_{false};
};

}  // namespace nw
