// Server: the coordinator runtime. A ROUTER socket bound to an endpoint (inproc://, ipc://,
// tcp://) speaking protocol/messages.h to workers and protocol/control.h to clients; it owns the
// Scheduler and is the only writer of the Store while it runs. Two modes share one loop:
//
// Run(campaign) (the embedded `nw run`): puts jobs leased by a crashed earlier run back to queued
// (Store::RequeueLeased), loads the campaign's queued jobs, then serves workers until every job is
// done or failed, or Stop() is called; at the end every registered worker gets DISCONNECT
// (reconnect=false). Control requests are answered with an error.
//
// Serve() (the `nw coordinator` daemon): serves every campaign submitted to it (CampaignTable)
// until Stop(), taking SUBMIT / STATUS / CANCEL / PAUSE / RESUME from clients on the same
// endpoint. Campaigns have priorities and share workers fairly (coordinator/scheduler.h). A
// campaign submitted with a boundary search (SUBMIT's `search`) runs only the jobs its search
// asks for (coordinator/search/search_driver.h): they join the campaign as results are committed,
// and after a restart the searches are replayed from the stored results. After a
// restart it recovers from the database: leases still recorded as running are kept for the
// workers that re-register holding them (orphan leases, SchedulerOptions::orphan_grace_ms), so
// results they finished meanwhile are committed, not redone; the rest are retried. Stopping
// leaves leases recorded (the next start recovers them) and tells workers nothing: they
// reconnect to the next coordinator by themselves.
//
// Durability follows Titanic in both modes: a lease is recorded before its JOB is sent; a result
// is committed (batched: up to result_batch_size results or result_batch_ms) before its ACK is
// sent; ACKs for duplicates and rejections wait for the batch too, so no ACK ever overtakes the
// commit it reports on. Malformed messages are logged and dropped (a malformed control request
// gets an ERROR reply). With `curve` set the endpoint requires CURVE and a client key on the
// allow-list (coordinator/curve.h).
//
// Threads: Run()/Serve() run on the calling thread, which must be the Store's owning thread; it
// owns the socket. Callbacks (progress, log) are called on that thread, except that the log is
// also called from the ZAP handler's thread when CURVE is on. Stop() may be called from any
// thread (an atomic flag checked at least every 50 ms). The zmq::context_t is borrowed.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/status.h"
#include "coordinator/campaign/job_check.h"
#include "coordinator/curve.h"
#include "coordinator/scheduler.h"
#include "dashboard/live_metrics.h"
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
  int64_t workers_seen = 0;             // registrations of ids not registered at the time
  int64_t workers_lost = 0;             // declared dead (missed heartbeats)
  int64_t control_requests = 0;         // Serve(): control requests answered (errors included)
  int64_t orphans_adopted = 0;          // Serve(): leases from before a restart kept
  int64_t hedged = 0;                   // second leases of straggling jobs (hedge_after_ms)
  int64_t refused_messages = 0;         // READYs for an id another connection holds, messages
                                        // outside their key's role, registrations over the cap
  int64_t implausible_results = 0;      // results that failed CheckResultBounds
  bool stopped = false;                 // Stop() ended the run before the campaign finished
  /// RunEmbedded only (compose/embedded_run.h): per worker that measured its GPU (NVML), the
  /// GPU's busy fraction over the worker's whole run; empty otherwise (Server leaves it empty).
  struct GpuBusy {
    std::string worker_id;
    std::string gpu;  // what was measured: the source's name ("NVML GPU 0000:19:00.0")
    double busy = 0;
  };
  std::vector<GpuBusy> gpu_busy;
};

struct ServerOptions {
  std::string endpoint;  // bound by Run()
  SchedulerOptions scheduler;
  size_t max_frame_bytes = kDefaultMaxFrameBytes;
  int result_batch_size = 64;     // commit when this many results wait ...
  int64_t result_batch_ms = 50;   // ... or the oldest has waited this long
  int64_t grant_interval_ms = 2;  // leases are granted and recorded at most this often (one
                                  // transaction for all of them; 0: after every wake-up)
  int expected_workers = 0;       // > 0: once this many workers registered, queued jobs
                                  // none of them can run are skipped (embedded runs)
  std::function<void(const ServerProgress&)> on_progress;  // on change, from Run()'s thread
  std::function<void(std::string_view)> log;               // see "Threads" above
  /// Run() only: called after each batch of results is committed (and when jobs are given up),
  /// on Run()'s thread, with those results and the keys of the jobs given up. The jobs it returns
  /// (key, spec, attempts so far) must already be in the Store and linked to the campaign; they are
  /// queued in this run (the campaign grows: an adaptive search, coordinator/search/). An error
  /// stops the run.
  std::function<Result<std::vector<JobRecord>>(const std::vector<JobResult>& committed,
                                               const std::vector<std::string>& given_up)>
      on_committed;
  /// Called once the endpoint is bound, with the address actually bound (tcp://127.0.0.1:*
  /// picks a free port), from Run()'s thread.
  std::function<void(const std::string&)> on_listening;

  /// CURVE: the server's key pair and the client keys allowed (workers and control clients).
  /// Without it the endpoint is plain; the daemon refuses non-loopback plain endpoints unless
  /// told --insecure (cli/cmd_coordinator.cc).
  std::optional<CurveKeyPair> curve;
  std::set<std::string> curve_allow;
  /// Role-scoped allow lists (CURVE only): keys here may only work (READY, RESULT, ...) or only
  /// submit and control campaigns (NWC01); keys in curve_allow may do both. A message outside
  /// its key's role is refused with the reason.
  std::set<std::string> curve_allow_work;
  std::set<std::string> curve_allow_submit;
  /// At most this many workers registered at once; a READY beyond it is refused (the worker
  /// retries), so no peer can grow the coordinator's tables without bound.
  int max_workers = 4096;
  /// Serve(): every submitted job is checked as `nw validate` checks the jobs a campaign expands
  /// to (coordinator/campaign/job_check.h); a submission with one bad job is refused whole, with
  /// the job and the reason. model_roots here confine model paths (`--model-root`).
  JobCheckOptions job_check = DefaultJobCheckOptions();
  /// Serve(): a staged SUBMIT (parts still to come) is dropped after this long without a part;
  /// at most this many submissions are staged at once.
  int64_t submission_idle_ms = 300'000;
  int max_staged_submissions = 4;
  /// Borrowed, may be null: latency histograms, committed outcomes, the loop's counters and the
  /// registered workers for the dashboard (dashboard/live_metrics.h). Must outlive Run()/Serve().
  LiveMetrics* metrics = nullptr;

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
  /// Serves the submitted campaigns (and control requests) until Stop(); returns the summary
  /// with stopped = true. Errors as Run(), plus the campaign table (db/campaign_table.h).
  Result<RunSummary> Serve();
  /// Thread-safe. Run(): leases still running are closed as failed attempts that will be retried
  /// (the jobs go back to queued), and workers are sent DISCONNECT. Serve(): pending results are
  /// committed and leases stay recorded for the next start. May come before Run()/Serve(); a
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
