// Server::Loop: the state of one Server::Run() or Server::Serve(), shared by the files that
// implement it by job: server.cc (the loop, batching and commits, leases, progress),
// server_workers.cc (the worker protocol, NWW01), server_control.cc (the control protocol,
// NWC01, and the daemon's campaigns and boundary searches). Internal to those files.
// Thread-safety: owned by the thread running Run()/Serve() (coordinator/server.h, "Threads").
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "coordinator/model_probe_layers.h"
#include "coordinator/search/search_driver.h"
#include "coordinator/server.h"
#include "db/campaign_table.h"
#include "db/search_table.h"
#include "protocol/control.h"

namespace nw {

/// Printable form of a ZeroMQ routing identity, for logs.
inline std::string HexIdentity(const std::string& identity) {
  return HexId(zmq::message_t(identity.data(), identity.size()));
}

struct Server::Loop {
  struct PendingAck {
    std::string identity;
    AckMsg ack;
  };
  // A submission whose parts are still arriving.
  struct Staged {
    SubmitRequest header;  // the first part, without its jobs
    std::vector<JobSpec> jobs;
    int next_part = 0;
    int64_t last_ms = 0;
  };

  Server& s;
  const bool daemon;
  int64_t campaign_id;  // Run() only
  CodecLimits limits;
  Scheduler scheduler;
  ModelProbeLayersCache probe_layers;  // what results' probes may name, per model
  std::unique_ptr<ZapHandler> zap;     // before the router: it must outlive the handshakes
  zmq::socket_t router;
  std::unique_ptr<CampaignTable> table;   // Serve() only
  std::unique_ptr<SearchTable> searches;  // Serve() only: the submitted boundary searches
  // Serve(): the boundary searches of campaigns in the scheduler, by campaign id, and the last
  // progress of every search campaign (kept after it leaves the scheduler, for STATUS).
  std::map<int64_t, search::SearchDriver> drivers;
  std::map<int64_t, SearchStatus> search_status;
  RunSummary summary;
  std::map<std::string, std::string> worker_of;    // routing identity -> worker id
  std::map<std::string, std::string> identity_of;  // worker id -> routing identity
  std::map<std::string, WorkerRecord> records;     // worker id -> what we told the Store
  std::map<std::string, std::string> owner_of;     // worker id -> its CURVE key or session
  int64_t registrations = 0;                       // READYs of ids not registered at the time
  std::vector<JobResult> batch;                    // accepted, not yet committed
  std::vector<std::chrono::steady_clock::time_point> batch_arrived;  // for metrics, per result
  int64_t next_metrics_ms = 0;
  int64_t batch_started_ms = 0;
  std::vector<PendingAck> acks;       // sent after the batch commits
  std::vector<std::string> given_up;  // jobs out of attempts, for on_committed
  int64_t next_heartbeat_ms = 0;
  int64_t next_tick_ms = 0;  // grants wait until then (ServerOptions::grant_interval_ms)
  bool dirty = true;         // something arrived since the last Tick
  bool skip_checked = false;
  std::optional<ServerProgress> last_progress;
  std::map<std::string, Staged> staged;          // by submission id
  std::map<std::string, SubmitReply> completed;  // by submission id
  std::deque<std::string> completed_order;
  std::vector<FailureRow> failure_rows;  // Apply()'s rows for the Store, reused
  std::vector<LeaseRow> lease_rows;

  Loop(Server& server, bool is_daemon, int64_t id)
      : s(server),
        daemon(is_daemon),
        campaign_id(id),
        limits{server.options_.max_frame_bytes},
        scheduler(server.clock_, server.options_.scheduler),
        router(server.context_, zmq::socket_type::router) {}

  // ---- The loop, commits and leases (server.cc) ------------------------------------------------

  // Every line may carry a peer's strings (ids, reasons, paths): made safe here, once.
  void Log(const std::string& line) const;
  int64_t Wall() const { return s.clock_.WallMs(); }
  void Send(const std::string& identity, const Message& m);
  void Reply(const std::string& identity, const ControlReply& r);
  void ReplyError(const std::string& identity, const Status& st);
  Status UpsertWorker(const std::string& worker_id, const std::string& state);
  // Records failures and leases in one transaction, then sends the JOBs.
  Status Apply(const SchedulerEvents& ev);
  Status Flush();
  // The CURVE public key the ZAP handler authenticated for this message ("" without CURVE).
  std::string CurveKeyOf(zmq::multipart_t& frames) const;
  Status OnMessage(zmq::multipart_t& frames);
  ServerProgress Progress() const;
  // The registered workers and the loop's counters, for the dashboard.
  void PublishMetrics();
  void ReportProgress();
  Status LoadOne();
  Status Bind();
  // Serves until Run()'s campaign is finished or Stop().
  Status Serve();
  Result<RunSummary> RunOne();
  Result<RunSummary> RunDaemon();

  // ---- The worker protocol (server_workers.cc) -------------------------------------------------

  // Who registers a worker id: its CURVE key when there is one, else the session nonce its
  // process chose (capabilities.session; docs/protocol.md, "Registration").
  static std::string OwnerOf(const std::string& curve_key, const ReadyMsg& r);
  Status OnReady(const std::string& identity, ReadyMsg r, const std::string& curve_key);
  Status OnDisconnect(const std::string& identity, const std::string& reason);
  void Unknown(const std::string& identity, Command cmd);
  Status OnResult(const std::string& identity, JobResult r);
  Status OnWorkerMessage(const std::string& identity, zmq::multipart_t& frames,
                         const std::string& curve_key);
  bool MayWork(const std::string& key) const;

  // ---- The control protocol and the daemon's campaigns (server_control.cc) --------------------

  struct LoadCounts {
    int64_t jobs = 0, done = 0, runnable = 0;
  };

  // Serve(): tells every search of a campaign in the scheduler what was committed or given up,
  // and queues the jobs they ask for next (written to the Store and linked to the campaign by
  // the driver first). A search that has ended leaves `drivers`; its campaign finishes with its
  // last job.
  Status AdvanceSearches();
  // Serve(): builds the campaign's search from its stored definition and replays it from the
  // stored results; links every job it has asked for to the campaign (a crash between a commit
  // and the link of the jobs it led to loses nothing). No row: a grid campaign.
  Status RestoreSearch(int64_t id);
  bool MaySubmit(const std::string& key) const;
  // Puts a campaign's queued and leased jobs into the scheduler. Leased jobs become orphan
  // leases that their worker may adopt when it re-registers (coordinator restart).
  Result<LoadCounts> LoadCampaign(const CampaignControl& c);
  Status LoadDaemon();
  Result<CampaignControl> ControlOf(const std::string& name);
  Result<SubmitReply> ApplySubmission(Staged& st);
  void OnSubmit(const std::string& identity, SubmitRequest r);
  Result<StatusReply> BuildStatus(const std::string& only);
  Result<CampaignOpReply> ApplyOp(const CampaignOpRequest& op);
  Status OnControl(const std::string& identity, const zmq::multipart_t& frames);
  // Finished campaigns leave the scheduler (their jobs with them), so memory follows the work
  // in progress.
  void TakeFinished();
  void ExpireStaged();
};

}  // namespace nw
