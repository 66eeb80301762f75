#include "coordinator/server.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "coordinator/campaign_table.h"
#include "coordinator/model_probe_layers.h"
#include "coordinator/search/search_driver.h"
#include "db/search_table.h"
#include "protocol/control.h"
#include "slurm/slurm_env.h"

namespace nw {
namespace {

using json = nlohmann::json;

// The loop wakes at least this often to notice Stop().
constexpr int64_t kMaxPollMs = 50;
// Messages handled per wake-up before timers get their turn.
constexpr int kMaxMessagesPerWake = 1000;
// Completed submissions remembered, so a client's retry of the last part is answered again.
constexpr size_t kCompletedSubmissionsKept = 64;

// The loop publishes its workers and counters to ServerOptions::metrics this often.
constexpr int64_t kMetricsPublishMs = 250;

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string Hex(const std::string& identity) {
  return HexId(zmq::message_t(identity.data(), identity.size()));
}

BoundarySearchSettings SettingsOf(const SubmitSearch& s) {
  BoundarySearchSettings b;
  b.first_trials = s.first_trials;
  b.confidence = s.confidence;
  b.pass_rate = s.pass_rate;
  b.budget = s.budget;
  return b;
}

SearchStatus StatusOf(const search::SearchDriver& d) {
  SearchStatus st;
  st.grid_jobs = d.grid_jobs();
  st.asked_jobs = d.asked_jobs();
  for (const search::LineReport& l : d.Lines()) {
    ++st.lines;
    if (l.verdict.state != search::LineState::kRunning) ++st.lines_finished;
  }
  return st;
}

}  // namespace

Status ServerOptions::Validate() const {
  if (endpoint.empty()) return Status::InvalidArgument("coordinator: no endpoint");
  NW_RETURN_IF_ERROR(scheduler.Validate());
  if (result_batch_size < 1) {
    return Status::InvalidArgument("coordinator: result_batch_size must be >= 1");
  }
  if (result_batch_ms < 0) return Status::InvalidArgument("coordinator: result_batch_ms < 0");
  if (grant_interval_ms < 0) return Status::InvalidArgument("coordinator: grant_interval_ms < 0");
  if (max_frame_bytes < 1024) {
    return Status::InvalidArgument("coordinator: max_frame_bytes must be >= 1024");
  }
  if (expected_workers < 0) return Status::InvalidArgument("coordinator: expected_workers < 0");
  if (curve) {
    if (!IsZ85Key(curve->public_key) || !IsZ85Key(curve->secret_key)) {
      return Status::InvalidArgument("coordinator: curve keys must be 40-character Z85 keys");
    }
    if (curve_allow.empty() && curve_allow_work.empty() && curve_allow_submit.empty()) {
      return Status::InvalidArgument("coordinator: CURVE needs an allow-list of client keys");
    }
  }
  if (max_workers < 1) return Status::InvalidArgument("coordinator: max_workers must be >= 1");
  if (submission_idle_ms <= 0 || max_staged_submissions < 1) {
    return Status::InvalidArgument(
        "coordinator: submission_idle_ms and max_staged_submissions "
        "must be positive");
  }
  return Status::Ok();
}

// The state of one Run() or Serve().
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

  // Every line may carry a peer's strings (ids, reasons, paths): made safe here, once.
  void Log(const std::string& line) const {
    if (s.options_.log) s.options_.log(LogSafe(line, 16 * 1024));
  }
  int64_t Wall() const { return s.clock_.WallMs(); }

  void Send(const std::string& identity, const Message& m) {
    auto frames = Encode(m, limits);
    if (!frames.ok()) {
      Log("coordinator: cannot send " + CommandName(CommandOf(m)) + ": " +
          frames.status().ToString());
      return;
    }
    frames->pushstr(identity);
    // ROUTER drops (never blocks) when the peer is gone or its queue is full.
    (void)frames->send(router, ZMQ_DONTWAIT);
  }

  void Reply(const std::string& identity, const ControlReply& r) {
    ++summary.control_requests;
    auto frames = EncodeControlReply(r, limits);
    if (!frames.ok()) {
      // A status reply too large for the frame limit: say so instead.
      frames =
          EncodeControlReply(ErrorReply{frames.status().code(), frames.status().message()}, limits);
      if (!frames.ok()) return;
    }
    frames->pushstr("");
    frames->pushstr(identity);
    (void)frames->send(router, ZMQ_DONTWAIT);
  }
  void ReplyError(const std::string& identity, const Status& st) {
    Reply(identity, ErrorReply{st.code(), st.message()});
  }

  Status UpsertWorker(const std::string& worker_id, const std::string& state) {
    auto it = records.find(worker_id);
    if (it == records.end()) return Status::Ok();
    it->second.state = state;
    it->second.last_seen_ms = Wall();
    const auto t0 = std::chrono::steady_clock::now();
    const Status st = s.store_.UpsertWorker(it->second);
    if (s.options_.metrics) s.options_.metrics->ObserveDbWrite("upsert_worker", SecondsSince(t0));
    if (state != "active") {
      // A worker that left is forgotten here (the database keeps its row): memory follows the
      // workers registered now, whatever ids peers come and go with.
      records.erase(it);
      owner_of.erase(worker_id);
    }
    return st;
  }

  // Records failures and leases in one transaction, then sends the JOBs.
  Status Apply(const SchedulerEvents& ev) {
    if (ev.empty()) return Status::Ok();
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t now = s.clock_.NowMs();
    const int64_t wall = Wall();
    failure_rows.clear();
    lease_rows.clear();
    for (const auto& f : ev.failures) {
      failure_rows.push_back({f.job_key, f.attempt, &f.reason, f.will_retry});
    }
    for (const auto& g : ev.grants) {
      lease_rows.push_back({g.job_key, g.attempt, g.worker_id, wall + (g.lease_expires_ms - now)});
    }
    NW_RETURN_IF_ERROR(s.store_.RecordAttempts(failure_rows, lease_rows, wall));
    if (s.options_.metrics) {
      s.options_.metrics->ObserveDbWrite("record_attempts", SecondsSince(t0));
    }
    for (const auto& f : ev.failures) {
      if (f.will_retry) {
        ++summary.retried;
      } else {
        ++summary.failed_now;
        if (daemon ? !drivers.empty() : static_cast<bool>(s.options_.on_committed)) {
          given_up.push_back(f.job_key);
        }
      }
      Log("coordinator: job " + f.job_key + " attempt " + std::to_string(f.attempt) +
          (f.will_retry ? " failed, will retry: " : " failed, giving up: ") + f.reason.ToString());
    }
    for (const auto& lost : ev.lost_workers) {
      ++summary.workers_lost;
      Log("coordinator: " + lost.reason.message());
      auto it = identity_of.find(lost.worker_id);
      if (it != identity_of.end()) {
        worker_of.erase(it->second);
        identity_of.erase(it);
      }
      NW_RETURN_IF_ERROR(UpsertWorker(lost.worker_id, "lost"));
    }
    for (const auto& g : ev.grants) {
      if (g.hedge) {
        ++summary.hedged;
        Log("coordinator: hedging job " + g.job_key + " with attempt " + std::to_string(g.attempt) +
            " on " + g.worker_id + ": its lease is older than " +
            std::to_string(s.options_.scheduler.hedge_after_ms) + " ms (first result wins)");
      }
      auto it = identity_of.find(g.worker_id);
      if (it == identity_of.end()) continue;  // cannot happen: grants go to registered workers
      Send(it->second, JobMsg{g.job_key, g.attempt, g.lease_ms, wall + g.lease_ms, g.spec});
    }
    if (s.options_.metrics && !ev.grants.empty()) {
      s.options_.metrics->ObserveDispatch(SecondsSince(t0));
    }
    return Status::Ok();
  }

  Status Flush() {
    if (!batch.empty()) {
      const auto t0 = std::chrono::steady_clock::now();
      NW_RETURN_IF_ERROR(s.store_.CommitResults(batch, Wall()));
      summary.committed += static_cast<int64_t>(batch.size());
      if (LiveMetrics* m = s.options_.metrics) {
        const auto t1 = std::chrono::steady_clock::now();
        m->ObserveDbWrite("commit_results", std::chrono::duration<double>(t1 - t0).count());
        for (size_t i = 0; i < batch.size(); ++i) {
          m->CountResult(OutcomeName(batch[i].outcome));
          if (i < batch_arrived.size()) {
            m->ObserveCommit(std::chrono::duration<double>(t1 - batch_arrived[i]).count());
          }
        }
      }
    }
    batch_arrived.clear();
    if (!daemon && s.options_.on_committed && (!batch.empty() || !given_up.empty())) {
      NW_ASSIGN_OR_RETURN(std::vector<JobRecord> more, s.options_.on_committed(batch, given_up));
      for (const JobRecord& j : more) {
        NW_RETURN_IF_ERROR(scheduler.AddCampaignJob(campaign_id, j.key, j.spec, j.attempts));
      }
      summary.total += static_cast<int64_t>(more.size());
      given_up.clear();
    }
    if (daemon && (!batch.empty() || !given_up.empty())) {
      NW_RETURN_IF_ERROR(AdvanceSearches());
      given_up.clear();
    }
    batch.clear();
    for (const auto& a : acks) Send(a.identity, a.ack);
    acks.clear();
    return Status::Ok();
  }

  // Serve(): tells every search of a campaign in the scheduler what was committed or given up,
  // and queues the jobs they ask for next (written to the Store and linked to the campaign by
  // the driver first). A search that has ended leaves `drivers`; its campaign finishes with its
  // last job.
  Status AdvanceSearches() {
    for (auto it = drivers.begin(); it != drivers.end();) {
      const int64_t id = it->first;
      search::SearchDriver& d = it->second;
      NW_ASSIGN_OR_RETURN(std::vector<JobRecord> more,
                          d.OnFinished(s.store_, id, batch, given_up, Wall()));
      if (!more.empty() && !scheduler.HasCampaign(id)) {
        NW_ASSIGN_OR_RETURN(auto c, table->Find(id));
        if (!c.has_value()) {
          return Status::Internal("boundary search of campaign " + std::to_string(id) +
                                  " without a coordinator_campaigns row");
        }
        NW_RETURN_IF_ERROR(
            scheduler.AddCampaign(id, c->name, c->priority, c->state == CampaignRunState::kPaused));
      }
      for (const JobRecord& j : more) {
        NW_RETURN_IF_ERROR(scheduler.AddCampaignJob(id, j.key, j.spec, j.attempts));
      }
      search_status[id] = StatusOf(d);
      it = d.finished() ? drivers.erase(it) : std::next(it);
    }
    return Status::Ok();
  }

  // Serve(): builds the campaign's search from its stored definition and replays it from the
  // stored results; links every job it has asked for to the campaign (a crash between a commit
  // and the link of the jobs it led to loses nothing). No row: a grid campaign.
  Status RestoreSearch(int64_t id) {
    NW_ASSIGN_OR_RETURN(std::optional<StoredSearch> stored, searches->Find(id));
    if (!stored) return Status::Ok();
    NW_ASSIGN_OR_RETURN(search::SearchDriver d,
                        search::SearchDriver::Create(SettingsOf(stored->settings),
                                                     stored->settings.trials, stored->grid));
    NW_ASSIGN_OR_RETURN(std::vector<JobSpec> asked, d.Start(s.store_));
    NW_RETURN_IF_ERROR(s.store_.AddJobs(id, asked, Wall()));
    search_status[id] = StatusOf(d);
    if (!d.finished()) drivers.insert_or_assign(id, std::move(d));
    return Status::Ok();
  }

  // ---- Workers ---------------------------------------------------------------------------------

  // Who registers a worker id: its CURVE key when there is one, else the session nonce its
  // process chose (capabilities.session; docs/protocol.md, "Registration").
  static std::string OwnerOf(const std::string& curve_key, const ReadyMsg& r) {
    if (!curve_key.empty()) return "key:" + curve_key;
    auto it = r.capabilities.find("session");
    return it != r.capabilities.end() && it->is_string() ? "session:" + it->get<std::string>()
                                                         : std::string("session:");
  }

  Status OnReady(const std::string& identity, ReadyMsg r, const std::string& curve_key) {
    const std::string owner = OwnerOf(curve_key, r);
    if (auto it = identity_of.find(r.worker_id);
        it != identity_of.end() && it->second != identity && scheduler.HasWorker(r.worker_id)) {
      auto o = owner_of.find(r.worker_id);
      if (o != owner_of.end() && o->second != owner) {
        // Another process (or key) wants a live worker's id: it waits until that worker leaves
        // or is declared lost, then registers; its leases are never handed over.
        ++summary.refused_messages;
        Log("coordinator: refused READY for worker id " + r.worker_id + " from connection " +
            Hex(identity) + ": the id is registered by another " +
            (curve_key.empty() ? "process (session)" : "CURVE key") + " that is still alive");
        return Status::Ok();
      }
    }
    if (!scheduler.HasWorker(r.worker_id) && scheduler.Counts().workers >= s.options_.max_workers) {
      ++summary.refused_messages;
      Log("coordinator: refused READY of worker " + r.worker_id + ": " +
          std::to_string(s.options_.max_workers) + " workers are registered already (the limit)");
      return Status::Ok();
    }
    // A connection that re-registers under another id: the old id has left.
    if (auto it = worker_of.find(identity); it != worker_of.end() && it->second != r.worker_id) {
      NW_RETURN_IF_ERROR(OnDisconnect(identity, "re-registered as " + r.worker_id));
    }
    if (auto it = identity_of.find(r.worker_id); it != identity_of.end()) {
      worker_of.erase(it->second);  // the same worker on a new connection
    }
    worker_of[identity] = r.worker_id;
    identity_of[r.worker_id] = identity;
    owner_of[r.worker_id] = owner;
    if (!scheduler.HasWorker(r.worker_id)) ++registrations;
    r.capabilities.erase("session");  // a nonce, not a capability: never stored or shown
    WorkerInfo info{r.worker_id, r.host, r.slots, r.capabilities};
    SchedulerEvents ev = scheduler.OnReady(info, r.held);
    if (!ev.adopted.empty()) {
      summary.orphans_adopted += static_cast<int64_t>(ev.adopted.size());
      Log("coordinator: worker " + r.worker_id + " took back " + std::to_string(ev.adopted.size()) +
          " leases from before the restart");
    }
    NW_RETURN_IF_ERROR(Apply(ev));
    WorkerRecord& rec = records[r.worker_id];
    if (rec.id.empty()) rec.first_seen_ms = Wall();
    rec.id = r.worker_id;
    rec.host = r.host;
    rec.device = r.capabilities.value("device", json()).is_string()
                     ? r.capabilities["device"].get<std::string>()
                     : std::string();
    rec.capabilities = r.capabilities;
    Log("coordinator: worker " + r.worker_id + " ready (" + std::to_string(r.slots) +
        " slots, backends " + r.capabilities["backends"].dump() + ", holds " +
        std::to_string(r.held.size()) + ")");
    return UpsertWorker(r.worker_id, "active");
  }

  Status OnDisconnect(const std::string& identity, const std::string& reason) {
    auto it = worker_of.find(identity);
    if (it == worker_of.end()) return Status::Ok();
    const std::string worker_id = it->second;
    worker_of.erase(it);
    identity_of.erase(worker_id);
    Log("coordinator: worker " + worker_id + " left: " + reason);
    NW_RETURN_IF_ERROR(Apply(scheduler.OnDisconnect(worker_id, reason)));
    return UpsertWorker(worker_id, "gone");
  }

  void Unknown(const std::string& identity, Command cmd) {
    ++summary.unknown_worker_messages;
    Log("coordinator: " + CommandName(cmd) + " from unregistered connection " + Hex(identity) +
        "; asking it to register");
    Send(identity, DisconnectMsg{"unknown worker: send READY", true});
  }

  Status OnResult(const std::string& identity, JobResult r) {
    auto it = worker_of.find(identity);
    if (it == worker_of.end()) {
      Unknown(identity, Command::kResult);
      return Status::Ok();
    }
    const std::string& worker_id = it->second;
    r.worker_id = worker_id;  // the registered id, whatever the executor wrote
    const std::optional<JobSpec> spec = scheduler.SpecOfJob(r.job_key);
    const ModelProbeLayers* layers = spec && !r.probes.empty() ? probe_layers.For(*spec) : nullptr;
    if (Status plausible = CheckResultBounds(r, spec ? &*spec : nullptr, layers); !plausible.ok()) {
      // Not written: the attempt fails (retried elsewhere) and the worker is told why.
      ++summary.implausible_results;
      JobResult failed;
      failed.job_key = r.job_key;
      failed.attempt = r.attempt;
      failed.worker_id = worker_id;
      failed.outcome = Outcome::kEngineError;
      failed.retryable = true;
      failed.error_code = std::string(StatusCodeName(StatusCode::kInvalidArgument));
      failed.error_message = "implausible result: " + plausible.message();
      Log("coordinator: worker " + worker_id + " sent an implausible result for " + r.job_key +
          " attempt " + std::to_string(r.attempt) + ": " + plausible.message());
      r = std::move(failed);
    }
    ResultDecision d = scheduler.OnResult(worker_id, r);
    AckMsg ack{r.job_key, r.attempt, AckStatus::kCommitted, ""};
    switch (d.verdict) {
      case ResultVerdict::kCommit:
        if (batch.empty()) batch_started_ms = s.clock_.NowMs();
        batch.push_back(std::move(r));
        if (s.options_.metrics) batch_arrived.push_back(std::chrono::steady_clock::now());
        break;
      case ResultVerdict::kDuplicate:
        ++summary.duplicate_results;
        ack.status = AckStatus::kDuplicate;
        break;
      case ResultVerdict::kStale:
      case ResultVerdict::kUnknownJob:
        ++summary.stale_results;
        ack.status = AckStatus::kRejected;
        ack.reason = d.reason;
        Log("coordinator: rejected " + d.reason);
        break;
      case ResultVerdict::kAttemptFailed:
        NW_RETURN_IF_ERROR(Apply(d.events));
        ack.status = AckStatus::kFailed;
        ack.reason = d.reason;
        break;
      case ResultVerdict::kUnknownWorker:
        Unknown(identity, Command::kResult);
        return Status::Ok();
    }
    acks.push_back({identity, std::move(ack)});
    return Status::Ok();
  }

  Status OnWorkerMessage(const std::string& identity, zmq::multipart_t& frames,
                         const std::string& curve_key) {
    auto msg = Decode(frames, limits);
    if (!msg.ok()) {
      ++summary.malformed_messages;
      Log("coordinator: dropped malformed message from " + Hex(identity) + ": " +
          msg.status().ToString());
      return Status::Ok();
    }
    const Command cmd = CommandOf(*msg);
    if (!IsWorkerCommand(cmd)) {
      ++summary.malformed_messages;
      Log("coordinator: dropped unexpected " + CommandName(cmd) + " from " + Hex(identity));
      return Status::Ok();
    }
    if (s.options_.curve && !MayWork(curve_key)) {
      ++summary.refused_messages;
      Log("coordinator: refused " + CommandName(cmd) + " from CURVE key " + curve_key +
          ": the key may submit, not work");
      Send(identity, DisconnectMsg{"this key is not allowed to work for this coordinator", false});
      return Status::Ok();
    }
    if (auto* r = std::get_if<ReadyMsg>(&*msg)) {
      return OnReady(identity, std::move(*r), curve_key);
    }
    if (auto* r = std::get_if<ResultMsg>(&*msg)) return OnResult(identity, std::move(r->result));
    if (auto* d = std::get_if<DisconnectMsg>(&*msg)) return OnDisconnect(identity, d->reason);
    // HEARTBEAT
    auto it = worker_of.find(identity);
    if (it == worker_of.end() || !scheduler.OnHeartbeat(it->second).ok()) {
      Unknown(identity, cmd);
    }
    return Status::Ok();
  }

  bool MayWork(const std::string& key) const {
    return s.options_.curve_allow.count(key) != 0 || s.options_.curve_allow_work.count(key) != 0;
  }
  bool MaySubmit(const std::string& key) const {
    return s.options_.curve_allow.count(key) != 0 || s.options_.curve_allow_submit.count(key) != 0;
  }

  // The CURVE public key the ZAP handler authenticated for this message ("" without CURVE).
  std::string CurveKeyOf(zmq::multipart_t& frames) const {
    if (!s.options_.curve || frames.empty()) return std::string();
    const char* user = zmq_msg_gets(frames.back().handle(), "User-Id");
    return user != nullptr ? std::string(user) : std::string();
  }

  Status OnMessage(zmq::multipart_t& frames) {
    if (frames.empty()) return Status::Ok();
    const std::string identity = frames.popstr();
    const std::string curve_key = CurveKeyOf(frames);
    // [""][NWC01][command][payload] from a REQ client; everything else is a worker's.
    if (frames.size() >= 2 && frames[0].size() == 0 &&
        frames[1].to_string_view() == kControlVersion) {
      frames.pop();  // the delimiter
      if (s.options_.curve && !MaySubmit(curve_key)) {
        ++summary.refused_messages;
        Log("coordinator: refused a control request from CURVE key " + curve_key +
            ": the key may work, not submit or control campaigns");
        ReplyError(identity, Status::FailedPrecondition(
                                 "this CURVE key may work for this coordinator, not submit or "
                                 "control campaigns (it is not on the submit allow-list)"));
        return Status::Ok();
      }
      return OnControl(identity, frames);
    }
    return OnWorkerMessage(identity, frames, curve_key);
  }

  // ---- Campaigns (Serve) -----------------------------------------------------------------------

  struct LoadCounts {
    int64_t jobs = 0, done = 0, runnable = 0;
  };

  // Puts a campaign's queued and leased jobs into the scheduler. Leased jobs become orphan
  // leases that their worker may adopt when it re-registers (coordinator restart).
  Result<LoadCounts> LoadCampaign(const CampaignControl& c) {
    NW_ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, s.store_.CampaignJobs(c.campaign_id));
    LoadCounts counts;
    counts.jobs = static_cast<int64_t>(jobs.size());
    NW_RETURN_IF_ERROR(scheduler.AddCampaign(c.campaign_id, c.name, c.priority,
                                             c.state == CampaignRunState::kPaused));
    const int64_t now = s.clock_.NowMs();
    const int64_t wall = Wall();
    for (const auto& j : jobs) {
      switch (j.state) {
        case JobState::kDone:
          ++counts.done;
          break;
        case JobState::kFailed:
          break;
        case JobState::kQueued:
          ++counts.runnable;
          NW_RETURN_IF_ERROR(scheduler.AddCampaignJob(c.campaign_id, j.key, j.spec, j.attempts));
          break;
        case JobState::kLeased: {
          ++counts.runnable;
          NW_ASSIGN_OR_RETURN(std::vector<AttemptRecord> attempts, s.store_.Attempts(j.key));
          const AttemptRecord* running = nullptr;
          for (const auto& a : attempts) {
            if (a.status == "running" && (running == nullptr || a.attempt > running->attempt)) {
              running = &a;
            }
          }
          if (running == nullptr) {
            NW_RETURN_IF_ERROR(scheduler.AddCampaignJob(c.campaign_id, j.key, j.spec, j.attempts));
          } else {
            NW_RETURN_IF_ERROR(scheduler.AddOrphanLease(c.campaign_id, j.key, j.spec,
                                                        running->attempt, running->worker_id,
                                                        now + (running->lease_expires_ms - wall)));
          }
          break;
        }
      }
    }
    return counts;
  }

  Status LoadDaemon() {
    NW_ASSIGN_OR_RETURN(table, CampaignTable::Open(s.store_.path()));
    NW_ASSIGN_OR_RETURN(searches, SearchTable::Open(s.store_.path()));
    NW_ASSIGN_OR_RETURN(std::vector<CampaignControl> campaigns, table->List());
    int64_t loaded = 0;
    for (const auto& c : campaigns) {
      if (c.state == CampaignRunState::kCancelled) continue;
      NW_RETURN_IF_ERROR(RestoreSearch(c.campaign_id).WithContext("campaign " + c.name));
      NW_ASSIGN_OR_RETURN(LoadCounts counts, LoadCampaign(c));
      if (counts.runnable > 0) {
        ++loaded;
        Log("coordinator: campaign " + c.name + " (" + std::string(CampaignRunStateName(c.state)) +
            ", priority " + std::to_string(c.priority) + "): " + std::to_string(counts.runnable) +
            " of " + std::to_string(counts.jobs) + " jobs to run");
      }
    }
    // Leases of cancelled campaigns' jobs from before the restart: nobody waits for those
    // results, so they are closed and the jobs go back to queued, as a cancel leaves them.
    // (A job another campaign still wants was loaded above and keeps its lease.)
    for (const auto& c : campaigns) {
      if (c.state != CampaignRunState::kCancelled) continue;
      NW_ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, s.store_.CampaignJobs(c.campaign_id));
      for (const auto& j : jobs) {
        if (j.state != JobState::kLeased || scheduler.StateOf(j.key) != "unknown") continue;
        NW_ASSIGN_OR_RETURN(std::vector<AttemptRecord> attempts, s.store_.Attempts(j.key));
        for (const auto& a : attempts) {
          if (a.status != "running") continue;
          NW_RETURN_IF_ERROR(
              s.store_.RecordFailure(j.key, a.attempt,
                                     Status::Cancelled("campaign " + c.name +
                                                       " is cancelled (lease from before a "
                                                       "coordinator restart)"),
                                     /*will_retry=*/true, Wall()));
        }
      }
    }
    const SchedulerCounts sc = scheduler.Counts();
    Log("coordinator: serving " + std::to_string(loaded) + " campaigns, " +
        std::to_string(sc.queued) + " jobs queued, " + std::to_string(sc.leased) +
        " leases from before the restart awaiting their workers");
    TakeFinished();
    return Status::Ok();
  }

  Result<CampaignControl> ControlOf(const std::string& name) {
    NW_ASSIGN_OR_RETURN(auto record, s.store_.FindCampaign(name));
    if (record.has_value()) {
      NW_ASSIGN_OR_RETURN(auto control, table->Find(record->id));
      if (control.has_value()) return *control;
    }
    return Status::NotFound("campaign '" + name + "' was not submitted to this coordinator");
  }

  Result<SubmitReply> ApplySubmission(Staged& st) {
    const SubmitRequest& h = st.header;
    const int64_t wall = Wall();
    // A search: the submitted jobs are the grid; the campaign's jobs are those the search asks
    // for, starting from what the database knows (as `nw run` starts it).
    std::optional<search::SearchDriver> driver;
    std::vector<JobSpec> search_jobs;
    if (h.search) {
      if (h.rerun) {
        return Status::InvalidArgument(
            "campaign " + h.campaign +
            ": rerun is not supported for a boundary search (its jobs depend on the stored "
            "results); submit the grid campaign again instead");
      }
      NW_ASSIGN_OR_RETURN(
          search::SearchDriver d,
          search::SearchDriver::Create(SettingsOf(*h.search), h.search->trials, st.jobs));
      NW_ASSIGN_OR_RETURN(search_jobs, d.Start(s.store_));
      driver.emplace(std::move(d));
    }
    const std::vector<JobSpec>& jobs = driver ? search_jobs : st.jobs;
    std::vector<std::string> keys;
    keys.reserve(jobs.size());
    for (const auto& j : jobs) keys.push_back(j.Key());
    int64_t id = 0;
    int64_t retried_infra = 0;
    const Status written = s.store_.InTransaction([&]() -> Status {
      NW_ASSIGN_OR_RETURN(id,
                          s.store_.UpsertCampaign(h.campaign, h.source_path, h.source_text, wall));
      NW_RETURN_IF_ERROR(s.store_.SetCampaignJobs(id, jobs, wall));
      if (h.rerun) {
        NW_RETURN_IF_ERROR(s.store_.RequeueJobs(keys, wall));
      } else {
        // Jobs that failed only because workers did not finish them run again.
        NW_ASSIGN_OR_RETURN(retried_infra, s.store_.RequeueInfrastructureFailures(keys, wall));
      }
      return Status::Ok();
    });
    if (!written.ok()) return written;
    // The search's definition before the campaign's control row: a daemon that stops in between
    // does not serve the campaign (no row) rather than serve it as a grid.
    if (driver) {
      NW_RETURN_IF_ERROR(searches->Put(StoredSearch{id, *h.search, st.jobs}, wall));
      search_status[id] = StatusOf(*driver);
      if (driver->finished()) {
        drivers.erase(id);
      } else {
        drivers.insert_or_assign(id, std::move(*driver));
      }
    } else {
      NW_RETURN_IF_ERROR(searches->Remove(id));
      drivers.erase(id);
      search_status.erase(id);
    }
    NW_ASSIGN_OR_RETURN(auto existing, table->Find(id));
    CampaignControl c;
    c.campaign_id = id;
    c.name = h.campaign;
    c.priority = h.priority;
    c.state = CampaignRunState::kActive;
    c.submitted_ms = existing ? existing->submitted_ms : wall;
    c.updated_ms = wall;
    NW_RETURN_IF_ERROR(table->Put(c));
    // The campaign's jobs may have changed: load it afresh. Running attempts go on either way.
    if (scheduler.HasCampaign(id)) NW_RETURN_IF_ERROR(scheduler.RemoveCampaign(id).status());
    NW_ASSIGN_OR_RETURN(LoadCounts counts, LoadCampaign(c));
    if (h.rerun) {
      for (const auto& k : keys) (void)scheduler.Requeue(k);
    }
    SubmitReply reply;
    reply.campaign = h.campaign;
    reply.part = st.next_part - 1;
    reply.complete = true;
    reply.campaign_id = id;
    reply.jobs = counts.jobs;
    reply.already_done = counts.done;
    reply.queued = counts.runnable;
    Log("coordinator: campaign " + h.campaign + " submitted (priority " +
        std::to_string(h.priority) + "): " + std::to_string(counts.jobs) + " jobs" +
        (h.search
             ? " (boundary search so far, of " + std::to_string(st.jobs.size()) + " in the grid)"
             : std::string()) +
        ", " + std::to_string(counts.done) + " already done, " + std::to_string(counts.runnable) +
        " to run" +
        (retried_infra > 0 ? " (" + std::to_string(retried_infra) +
                                 " of them failed before only through expired leases or lost "
                                 "workers)"
                           : std::string()));
    return reply;
  }

  void OnSubmit(const std::string& identity, SubmitRequest r) {
    const int64_t now = s.clock_.NowMs();
    if (auto done = completed.find(r.submission); done != completed.end()) {
      SubmitReply again = done->second;
      if (r.part != again.part) again = SubmitReply{r.campaign, r.part, false, 0, 0, 0, 0};
      Reply(identity, again);
      return;
    }
    auto it = staged.find(r.submission);
    if (it == staged.end()) {
      if (r.part != 0) {
        ReplyError(identity, Status::FailedPrecondition(
                                 "submission " + r.submission + ": part " + std::to_string(r.part) +
                                 " without part 0 (the coordinator "
                                 "may have restarted meanwhile; submit again)"));
        return;
      }
      if (static_cast<int>(staged.size()) >= s.options_.max_staged_submissions) {
        ReplyError(identity,
                   Status::ResourceExhausted("too many submissions in progress (" +
                                             std::to_string(staged.size()) + "); try again later"));
        return;
      }
      Staged st;
      st.header = r;
      st.header.jobs.clear();
      st.jobs.reserve(static_cast<size_t>(r.total_jobs));
      it = staged.emplace(r.submission, std::move(st)).first;
    }
    Staged& st = it->second;
    const SubmitRequest& h = st.header;
    if (r.part == st.next_part - 1) {  // a retry of the part we have
      Reply(identity, SubmitReply{h.campaign, r.part, false, 0, 0, 0, 0});
      return;
    }
    Status bad;
    if (r.part != st.next_part) {
      bad = Status::FailedPrecondition("submission " + r.submission + ": expected part " +
                                       std::to_string(st.next_part) + ", got " +
                                       std::to_string(r.part));
    } else if (r.campaign != h.campaign || r.parts != h.parts || r.total_jobs != h.total_jobs ||
               r.priority != h.priority || r.rerun != h.rerun || r.search != h.search) {
      bad = Status::InvalidArgument("submission " + r.submission + ": part " +
                                    std::to_string(r.part) + " disagrees with part 0");
    } else if (static_cast<int64_t>(st.jobs.size() + r.jobs.size()) > h.total_jobs) {
      bad = Status::InvalidArgument("submission " + r.submission + ": more than total_jobs (" +
                                    std::to_string(h.total_jobs) + ") jobs");
    }
    for (size_t i = 0; bad.ok() && i < r.jobs.size(); ++i) {
      if (Status ok = CheckJobSpec(r.jobs[i], s.options_.job_check); !ok.ok()) {
        bad = Status::InvalidArgument("submission " + r.submission + " of campaign " + h.campaign +
                                      ": job " + std::to_string(st.jobs.size() + i) +
                                      " refused: " + ok.message());
      }
    }
    if (!bad.ok()) {
      staged.erase(it);
      Log("coordinator: " + bad.message());
      ReplyError(identity, bad);
      return;
    }
    for (auto& j : r.jobs) st.jobs.push_back(std::move(j));
    st.next_part = r.part + 1;
    st.last_ms = now;
    if (st.next_part < h.parts) {
      Reply(identity, SubmitReply{h.campaign, r.part, false, 0, 0, 0, 0});
      return;
    }
    if (static_cast<int64_t>(st.jobs.size()) != h.total_jobs) {
      const Status short_st = Status::InvalidArgument(
          "submission " + r.submission + ": " + std::to_string(st.jobs.size()) +
          " jobs received, total_jobs says " + std::to_string(h.total_jobs));
      staged.erase(it);
      ReplyError(identity, short_st);
      return;
    }
    auto reply = ApplySubmission(st);
    const std::string id = r.submission;
    staged.erase(it);
    if (!reply.ok()) {
      Log("coordinator: submission of " + r.campaign + " failed: " + reply.status().ToString());
      ReplyError(identity, reply.status());
      return;
    }
    completed[id] = *reply;
    completed_order.push_back(id);
    if (completed_order.size() > kCompletedSubmissionsKept) {
      completed.erase(completed_order.front());
      completed_order.pop_front();
    }
    Reply(identity, *reply);
  }

  Result<StatusReply> BuildStatus(const std::string& only) {
    StatusReply out;
    NW_ASSIGN_OR_RETURN(std::vector<CampaignControl> campaigns, table->List());
    for (const auto& c : campaigns) {
      if (!only.empty() && c.name != only) continue;
      NW_ASSIGN_OR_RETURN(CampaignProgress p, s.store_.Progress(c.campaign_id));
      CampaignStatus cs;
      cs.name = c.name;
      cs.id = c.campaign_id;
      cs.priority = c.priority;
      cs.state = std::string(CampaignRunStateName(c.state));
      if (c.state == CampaignRunState::kActive && !scheduler.HasCampaign(c.campaign_id)) {
        cs.state = "finished";
      }
      cs.total = p.total;
      cs.queued = p.queued;
      cs.leased = p.leased;
      cs.done = p.done;
      cs.failed = p.failed;
      cs.pass = p.pass;
      cs.miss = p.miss;
      cs.other = p.other;
      if (auto it = search_status.find(c.campaign_id); it != search_status.end()) {
        cs.search = it->second;
      }
      out.campaigns.push_back(std::move(cs));
    }
    if (!only.empty() && out.campaigns.empty()) {
      return Status::NotFound("campaign '" + only + "' was not submitted to this coordinator");
    }
    for (const WorkerView& w : scheduler.Workers()) {
      WorkerStatus ws;
      ws.id = w.id;
      ws.host = w.host;
      ws.slots = w.slots;
      ws.busy = w.busy;
      ws.backends = w.backends;
      auto d = w.capabilities.find("device");
      if (d != w.capabilities.end() && d->is_string()) ws.device = d->get<std::string>();
      SlurmPlacement(w.capabilities, &ws.slurm_job, &ws.node);
      ws.draining = w.draining;
      out.workers.push_back(std::move(ws));
    }
    return out;
  }

  Result<CampaignOpReply> ApplyOp(const CampaignOpRequest& op) {
    NW_ASSIGN_OR_RETURN(CampaignControl c, ControlOf(op.campaign));
    CampaignOpReply reply;
    reply.campaign = c.name;
    switch (op.op) {
      case CampaignOp::kCancel:
        c.state = CampaignRunState::kCancelled;
        drivers.erase(c.campaign_id);  // its search asks for nothing more
        if (scheduler.HasCampaign(c.campaign_id)) {
          NW_ASSIGN_OR_RETURN(reply.queued_removed, scheduler.RemoveCampaign(c.campaign_id));
        }
        break;
      case CampaignOp::kPause:
        if (c.state == CampaignRunState::kCancelled) {
          return Status::FailedPrecondition("campaign '" + c.name + "' is cancelled");
        }
        c.state = CampaignRunState::kPaused;
        if (scheduler.HasCampaign(c.campaign_id)) {
          NW_RETURN_IF_ERROR(scheduler.SetCampaignPaused(c.campaign_id, true));
        }
        break;
      case CampaignOp::kResume:
        if (c.state == CampaignRunState::kCancelled) {
          return Status::FailedPrecondition("campaign '" + c.name +
                                            "' is cancelled; submit it again to run it");
        }
        c.state = CampaignRunState::kActive;
        if (scheduler.HasCampaign(c.campaign_id)) {
          NW_RETURN_IF_ERROR(scheduler.SetCampaignPaused(c.campaign_id, false));
        }
        break;
    }
    c.updated_ms = Wall();
    NW_RETURN_IF_ERROR(table->Put(c));
    if (c.state == CampaignRunState::kActive && !scheduler.HasCampaign(c.campaign_id)) {
      NW_RETURN_IF_ERROR(LoadCampaign(c).status());
    }
    reply.state = std::string(CampaignRunStateName(c.state));
    Log("coordinator: campaign " + c.name + " " + std::string(CampaignOpName(op.op)) +
        (op.op == CampaignOp::kCancel
             ? ": " + std::to_string(reply.queued_removed) + " queued jobs taken out"
             : std::string()));
    return reply;
  }

  Status OnControl(const std::string& identity, const zmq::multipart_t& frames) {
    auto req = DecodeControlRequest(frames, limits);
    if (!req.ok()) {
      ++summary.malformed_messages;
      Log("coordinator: malformed control request from " + Hex(identity) + ": " +
          req.status().ToString());
      ReplyError(identity, req.status());
      return Status::Ok();
    }
    if (!daemon) {
      ReplyError(identity, Status::FailedPrecondition(
                               "this coordinator runs one campaign for `nw run`; control "
                               "requests need a `nw coordinator` daemon"));
      return Status::Ok();
    }
    if (auto* sub = std::get_if<SubmitRequest>(&*req)) {
      // Writing a large campaign keeps the loop busy; workers could not be heard meanwhile.
      const int64_t t0 = s.clock_.NowMs();
      OnSubmit(identity, std::move(*sub));
      scheduler.ExcuseSilence(s.clock_.NowMs() - t0);
    } else if (auto* st = std::get_if<StatusRequest>(&*req)) {
      auto reply = BuildStatus(st->campaign);
      if (reply.ok()) {
        Reply(identity, *reply);
      } else {
        ReplyError(identity, reply.status());
      }
    } else {
      auto reply = ApplyOp(std::get<CampaignOpRequest>(*req));
      if (reply.ok()) {
        Reply(identity, *reply);
      } else {
        ReplyError(identity, reply.status());
      }
    }
    return Status::Ok();
  }

  // Finished campaigns leave the scheduler (their jobs with them), so memory follows the work
  // in progress.
  void TakeFinished() {
    for (int64_t id : scheduler.TakeFinishedCampaigns()) {
      auto c = table->Find(id);
      const std::string name = c.ok() && c->has_value() ? (*c)->name : std::to_string(id);
      Log("coordinator: campaign " + name + " has no job left to run");
    }
  }

  void ExpireStaged() {
    const int64_t now = s.clock_.NowMs();
    for (auto it = staged.begin(); it != staged.end();) {
      if (now - it->second.last_ms > s.options_.submission_idle_ms) {
        Log("coordinator: dropped the unfinished submission " + it->first + " of " +
            it->second.header.campaign + " (no part for " +
            std::to_string(s.options_.submission_idle_ms) + " ms)");
        it = staged.erase(it);
      } else {
        ++it;
      }
    }
  }

  // ---- Progress, loading, the loop -------------------------------------------------------------

  ServerProgress Progress() const {
    const SchedulerCounts c = scheduler.Counts();
    ServerProgress p;
    p.total = daemon ? c.total : summary.total;
    p.done = summary.done_before + summary.committed;
    p.failed = summary.failed_before + summary.failed_now;
    p.queued = c.queued;
    p.leased = c.leased;
    p.skipped = summary.skipped;
    p.workers = c.workers;
    return p;
  }

  // The registered workers and the loop's counters, for the dashboard.
  void PublishMetrics() {
    if (!s.options_.metrics) return;
    const int64_t now = s.clock_.NowMs();
    std::vector<LiveWorker> workers;
    for (const WorkerView& w : scheduler.Workers()) {
      LiveWorker lw;
      lw.id = w.id;
      lw.host = w.host;
      lw.slots = w.slots;
      lw.busy = w.busy;
      lw.draining = w.draining;
      lw.backends = w.backends;
      lw.heartbeat_age_ms = std::max<int64_t>(0, now - w.last_seen_ms);
      if (auto d = w.capabilities.find("device"); d != w.capabilities.end() && d->is_string()) {
        lw.device = d->get<std::string>();
      }
      if (auto g = w.capabilities.find("gpu"); g != w.capabilities.end() && g->is_object()) {
        if (auto n = g->find("name"); n != g->end() && n->is_string()) {
          lw.gpu_name = n->get<std::string>();
        }
        if (auto m = g->find("memory_mib"); m != g->end() && m->is_number_integer()) {
          lw.gpu_memory_bytes = m->get<int64_t>() * 1024 * 1024;
        }
      }
      workers.push_back(std::move(lw));
    }
    std::map<std::string, int64_t> events = {
        {"committed", summary.committed},
        {"retried", summary.retried},
        {"given_up", summary.failed_now},
        {"skipped", summary.skipped},
        {"stale_results", summary.stale_results},
        {"duplicate_results", summary.duplicate_results},
        {"implausible_results", summary.implausible_results},
        {"malformed_messages", summary.malformed_messages},
        {"refused_messages", summary.refused_messages},
        {"unknown_worker_messages", summary.unknown_worker_messages},
        {"workers_registered", registrations},
        {"workers_lost", summary.workers_lost},
        {"hedged", summary.hedged},
        {"orphans_adopted", summary.orphans_adopted},
        {"control_requests", summary.control_requests}};
    s.options_.metrics->Publish(std::move(workers), std::move(events), Wall());
  }

  void ReportProgress() {
    if (!s.options_.on_progress) return;
    const ServerProgress p = Progress();
    if (last_progress && *last_progress == p) return;
    last_progress = p;
    s.options_.on_progress(p);
  }

  Status LoadOne() {
    // Reading the campaign first also checks that it exists before anything is written.
    NW_ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, s.store_.CampaignJobs(campaign_id));
    NW_ASSIGN_OR_RETURN(summary.requeued_at_start, s.store_.RequeueLeased(Wall()));
    if (summary.requeued_at_start > 0) {
      Log("coordinator: " + std::to_string(summary.requeued_at_start) +
          " jobs leased by an earlier run were put back to queued");
    }
    NW_RETURN_IF_ERROR(scheduler.AddCampaign(campaign_id, "", 0));
    summary.total = static_cast<int64_t>(jobs.size());
    for (const auto& j : jobs) {
      switch (j.state) {
        case JobState::kDone:
          ++summary.done_before;
          break;
        case JobState::kFailed:
          ++summary.failed_before;
          break;
        case JobState::kQueued:
        case JobState::kLeased:  // queued again by RequeueLeased above
          NW_RETURN_IF_ERROR(scheduler.AddCampaignJob(campaign_id, j.key, j.spec, j.attempts));
          break;
      }
    }
    return Status::Ok();
  }

  Status Bind() {
    router.set(zmq::sockopt::linger, 0);
    router.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(limits.max_frame_bytes));
    if (s.options_.curve) {
      std::set<std::string> allowed = s.options_.curve_allow;
      allowed.insert(s.options_.curve_allow_work.begin(), s.options_.curve_allow_work.end());
      allowed.insert(s.options_.curve_allow_submit.begin(), s.options_.curve_allow_submit.end());
      NW_ASSIGN_OR_RETURN(zap, ZapHandler::Start(s.context_, std::move(allowed), s.options_.log));
      router.set(zmq::sockopt::curve_server, true);
      router.set(zmq::sockopt::curve_secretkey, s.options_.curve->secret_key);
      router.set(zmq::sockopt::curve_publickey, s.options_.curve->public_key);
      router.set(zmq::sockopt::zap_domain, "nw");
    }
    router.bind(s.options_.endpoint);
    if (s.options_.on_listening) {
      s.options_.on_listening(router.get(zmq::sockopt::last_endpoint));
    }
    return Status::Ok();
  }

  // Serves until Run()'s campaign is finished or Stop().
  Status Serve() {
    const int64_t hb = s.options_.scheduler.heartbeat_interval_ms;
    next_heartbeat_ms = s.clock_.NowMs() + hb;
    std::vector<zmq_pollitem_t> items = {{router.handle(), 0, ZMQ_POLLIN, 0}};
    ReportProgress();
    while (true) {
      if (s.stop_.load(std::memory_order_relaxed)) {
        summary.stopped = daemon || !scheduler.Finished();
        break;
      }
      if (!daemon && scheduler.Finished() && batch.empty() && acks.empty() && given_up.empty()) {
        break;
      }

      int64_t now = s.clock_.NowMs();
      int64_t wake = std::min(now + kMaxPollMs, next_heartbeat_ms);
      const std::optional<int64_t> deadline = scheduler.NextDeadlineMs();
      if (deadline) wake = std::min(wake, std::max(*deadline, next_tick_ms));
      if (dirty) wake = std::min(wake, next_tick_ms);
      if (!batch.empty()) wake = std::min(wake, batch_started_ms + s.options_.result_batch_ms);
      if (!acks.empty() && batch.empty()) wake = now;
      zmq::poll(items, std::chrono::milliseconds(std::max<int64_t>(0, wake - now)));
      // A stall of the loop (a write waiting for another process's database lock, a large
      // submission) is not the workers' silence: excused at the end of this turn.
      const int64_t turn_started = s.clock_.NowMs();
      if ((items[0].revents & ZMQ_POLLIN) != 0) {
        for (int i = 0; i < kMaxMessagesPerWake; ++i) {
          zmq::multipart_t frames;
          if (!frames.recv(router, ZMQ_DONTWAIT)) break;
          NW_RETURN_IF_ERROR(OnMessage(frames));
          dirty = true;
          if (static_cast<int>(batch.size()) >= s.options_.result_batch_size) {
            NW_RETURN_IF_ERROR(Flush());
          }
        }
      }

      if (s.options_.expected_workers > 0 && !skip_checked &&
          scheduler.Counts().workers >= s.options_.expected_workers) {
        skip_checked = true;
        for (const auto& sk : scheduler.DropUnschedulable()) {
          ++summary.skipped;
          Log("coordinator: skipping job " + sk.job_key + ": " + sk.reason.message());
        }
      }
      // Leases are granted (and recorded, in one transaction) at most once per grant interval,
      // so that under load many grants share a transaction; the workers' prefetch hides it.
      now = s.clock_.NowMs();
      const bool timer_due = deadline.has_value() && now >= *deadline;
      if (now >= next_tick_ms && (dirty || timer_due)) {
        NW_RETURN_IF_ERROR(Apply(scheduler.Tick()));
        dirty = false;
        next_tick_ms = now + s.options_.grant_interval_ms;
      }

      now = s.clock_.NowMs();
      if (batch.empty() || static_cast<int>(batch.size()) >= s.options_.result_batch_size ||
          now >= batch_started_ms + s.options_.result_batch_ms) {
        const bool had_results = !batch.empty();
        NW_RETURN_IF_ERROR(Flush());
        if (daemon && had_results) TakeFinished();
      }
      if (now >= next_heartbeat_ms) {
        for (const auto& [id, identity] : identity_of) Send(identity, HeartbeatMsg{});
        next_heartbeat_ms = now + hb;
        if (daemon) {
          ExpireStaged();
          // Not while results or given-up jobs wait for the searches: a search campaign whose
          // jobs are all finished may be about to get more.
          if (batch.empty() && given_up.empty()) TakeFinished();
        }
      }
      ReportProgress();
      if (s.options_.metrics && s.clock_.NowMs() >= next_metrics_ms) {
        PublishMetrics();
        next_metrics_ms = s.clock_.NowMs() + kMetricsPublishMs;
      }
      if (const int64_t stalled = s.clock_.NowMs() - turn_started; stalled > hb) {
        scheduler.ExcuseSilence(stalled);
      }
    }
    NW_RETURN_IF_ERROR(Flush());
    PublishMetrics();
    return Status::Ok();
  }

  Result<RunSummary> RunOne() {
    NW_RETURN_IF_ERROR(Bind());
    NW_RETURN_IF_ERROR(LoadOne());
    Log("coordinator: campaign " + std::to_string(campaign_id) + ": " +
        std::to_string(summary.total) + " jobs, " + std::to_string(scheduler.Counts().queued) +
        " to run on " + s.options_.endpoint);
    NW_RETURN_IF_ERROR(Serve());
    if (summary.stopped) {
      NW_RETURN_IF_ERROR(Apply(scheduler.ReleaseAll(Status::Cancelled("coordinator stopped"))));
    }
    const std::string reason = summary.stopped ? "coordinator stopped" : "campaign finished";
    for (const auto& [id, identity] : identity_of) {
      Send(identity, DisconnectMsg{reason, false});
      NW_RETURN_IF_ERROR(UpsertWorker(id, "gone"));
    }
    // Give the DISCONNECTs a moment to leave before the socket closes.
    router.set(zmq::sockopt::linger, 1000);
    summary.done = summary.done_before + summary.committed;
    summary.failed = summary.failed_before + summary.failed_now;
    summary.workers_seen = registrations;
    ReportProgress();
    Log("coordinator: campaign " + std::to_string(campaign_id) + " " + reason + ": " +
        std::to_string(summary.done) + " done, " + std::to_string(summary.failed) + " failed of " +
        std::to_string(summary.total));
    return summary;
  }

  Result<RunSummary> RunDaemon() {
    NW_RETURN_IF_ERROR(LoadDaemon());
    NW_RETURN_IF_ERROR(Bind());
    Log("coordinator: listening on " + std::string(router.get(zmq::sockopt::last_endpoint)) +
        (s.options_.curve
             ? " (CURVE, " + std::to_string(s.options_.curve_allow.size()) + " keys allowed)"
             : " (no encryption)"));
    NW_RETURN_IF_ERROR(Serve());
    // Leases stay recorded: the next start keeps them for the workers that hold them.
    router.set(zmq::sockopt::linger, 500);
    summary.done = summary.committed;
    summary.failed = summary.failed_now;
    summary.workers_seen = registrations;
    Log("coordinator: stopped after committing " + std::to_string(summary.committed) + " results");
    return summary;
  }
};

Server::Server(zmq::context_t& context, Store& store, const Clock& clock, ServerOptions options)
    : context_(context), store_(store), clock_(clock), options_(std::move(options)) {}

void Server::Stop() { stop_.store(true); }

Result<RunSummary> Server::Run(int64_t campaign_id) {
  NW_RETURN_IF_ERROR(options_.Validate());
  try {
    Loop loop(*this, /*is_daemon=*/false, campaign_id);
    return loop.RunOne();
  } catch (const zmq::error_t& e) {
    return Status::Unavailable("coordinator on " + options_.endpoint +
                               ": ZeroMQ error: " + e.what());
  }
}

Result<RunSummary> Server::Serve() {
  NW_RETURN_IF_ERROR(options_.Validate());
  try {
    Loop loop(*this, /*is_daemon=*/true, 0);
    return loop.RunDaemon();
  } catch (const zmq::error_t& e) {
    return Status::Unavailable("coordinator on " + options_.endpoint +
                               ": ZeroMQ error: " + e.what());
  }
}

}  // namespace nw
