#include "coordinator/server.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace nw {
namespace {

using json = nlohmann::json;

// The loop wakes at least this often to notice Stop().
constexpr int64_t kMaxPollMs = 50;
// Messages handled per wake-up before timers get their turn.
constexpr int kMaxMessagesPerWake = 1000;

}  // namespace

Status ServerOptions::Validate() const {
  if (endpoint.empty()) return Status::InvalidArgument("coordinator: no endpoint");
  NW_RETURN_IF_ERROR(scheduler.Validate());
  if (result_batch_size < 1) {
    return Status::InvalidArgument("coordinator: result_batch_size must be >= 1");
  }
  if (result_batch_ms < 0) return Status::InvalidArgument("coordinator: result_batch_ms < 0");
  if (max_frame_bytes < 1024) {
    return Status::InvalidArgument("coordinator: max_frame_bytes must be >= 1024");
  }
  if (expected_workers < 0) return Status::InvalidArgument("coordinator: expected_workers < 0");
  return Status::Ok();
}

// The state of one Run().
struct Server::Loop {
  struct PendingAck {
    std::string identity;
    AckMsg ack;
  };

  Server& s;
  int64_t campaign_id;
  CodecLimits limits;
  Scheduler scheduler;
  zmq::socket_t router;
  RunSummary summary;
  std::map<std::string, std::string> worker_of;    // routing identity -> worker id
  std::map<std::string, std::string> identity_of;  // worker id -> routing identity
  std::map<std::string, WorkerRecord> records;     // worker id -> what we told the Store
  std::set<std::string> seen;                      // worker ids ever registered
  std::vector<JobResult> batch;                    // accepted, not yet committed
  int64_t batch_started_ms = 0;
  std::vector<PendingAck> acks;  // sent after the batch commits
  int64_t next_heartbeat_ms = 0;
  bool skip_checked = false;
  std::optional<ServerProgress> last_progress;

  Loop(Server& server, int64_t id)
      : s(server),
        campaign_id(id),
        limits{server.options_.max_frame_bytes},
        scheduler(server.clock_, server.options_.scheduler),
        router(server.context_, zmq::socket_type::router) {}

  void Log(const std::string& line) const {
    if (s.options_.log) s.options_.log(line);
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

  Status UpsertWorker(const std::string& worker_id, const std::string& state) {
    auto it = records.find(worker_id);
    if (it == records.end()) return Status::Ok();
    it->second.state = state;
    it->second.last_seen_ms = Wall();
    return s.store_.UpsertWorker(it->second);
  }

  // Records failures and leases in one transaction, then sends the JOBs.
  Status Apply(const SchedulerEvents& ev) {
    if (ev.empty()) return Status::Ok();
    const int64_t now = s.clock_.NowMs();
    const int64_t wall = Wall();
    const Status written = s.store_.InTransaction([&]() -> Status {
      for (const auto& f : ev.failures) {
        NW_RETURN_IF_ERROR(
            s.store_.RecordFailure(f.job_key, f.attempt, f.reason, f.will_retry, wall));
      }
      for (const auto& g : ev.grants) {
        NW_RETURN_IF_ERROR(s.store_.RecordLease(g.job_key, g.attempt, g.worker_id,
                                                wall + (g.lease_expires_ms - now), wall));
      }
      return Status::Ok();
    });
    if (!written.ok()) return written;
    for (const auto& f : ev.failures) {
      if (f.will_retry) {
        ++summary.retried;
      } else {
        ++summary.failed_now;
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
      auto it = identity_of.find(g.worker_id);
      if (it == identity_of.end()) continue;  // cannot happen: grants go to registered workers
      Send(it->second, JobMsg{g.job_key, g.attempt, g.lease_ms, wall + g.lease_ms, g.spec});
    }
    return Status::Ok();
  }

  Status Flush() {
    if (!batch.empty()) {
      NW_RETURN_IF_ERROR(s.store_.CommitResults(batch, Wall()));
      summary.committed += static_cast<int64_t>(batch.size());
      batch.clear();
    }
    for (const auto& a : acks) Send(a.identity, a.ack);
    acks.clear();
    return Status::Ok();
  }

  Status OnReady(const std::string& identity, ReadyMsg r) {
    // A connection that re-registers under another id: the old id has left.
    if (auto it = worker_of.find(identity); it != worker_of.end() && it->second != r.worker_id) {
      NW_RETURN_IF_ERROR(OnDisconnect(identity, "re-registered as " + r.worker_id));
    }
    if (auto it = identity_of.find(r.worker_id); it != identity_of.end()) {
      worker_of.erase(it->second);  // the same worker on a new connection
    }
    worker_of[identity] = r.worker_id;
    identity_of[r.worker_id] = identity;
    seen.insert(r.worker_id);
    WorkerInfo info{r.worker_id, r.host, r.slots, r.capabilities};
    NW_RETURN_IF_ERROR(Apply(scheduler.OnReady(info, r.held)));
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
    Log("coordinator: " + CommandName(cmd) + " from unregistered connection " +
        HexId(zmq::message_t(identity.data(), identity.size())) + "; asking it to register");
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
    ResultDecision d = scheduler.OnResult(worker_id, r);
    AckMsg ack{r.job_key, r.attempt, AckStatus::kCommitted, ""};
    switch (d.verdict) {
      case ResultVerdict::kCommit:
        if (batch.empty()) batch_started_ms = s.clock_.NowMs();
        batch.push_back(std::move(r));
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

  Status OnMessage(zmq::multipart_t& frames) {
    if (frames.empty()) return Status::Ok();
    const std::string identity = frames.popstr();
    auto msg = Decode(frames, limits);
    if (!msg.ok()) {
      ++summary.malformed_messages;
      Log("coordinator: dropped malformed message from " +
          HexId(zmq::message_t(identity.data(), identity.size())) + ": " + msg.status().ToString());
      return Status::Ok();
    }
    const Command cmd = CommandOf(*msg);
    if (!IsWorkerCommand(cmd)) {
      ++summary.malformed_messages;
      Log("coordinator: dropped unexpected " + CommandName(cmd) + " from " +
          HexId(zmq::message_t(identity.data(), identity.size())));
      return Status::Ok();
    }
    if (auto* r = std::get_if<ReadyMsg>(&*msg)) return OnReady(identity, std::move(*r));
    if (auto* r = std::get_if<ResultMsg>(&*msg)) return OnResult(identity, std::move(r->result));
    if (auto* d = std::get_if<DisconnectMsg>(&*msg)) return OnDisconnect(identity, d->reason);
    // HEARTBEAT
    auto it = worker_of.find(identity);
    if (it == worker_of.end() || !scheduler.OnHeartbeat(it->second).ok()) {
      Unknown(identity, cmd);
    }
    return Status::Ok();
  }

  ServerProgress Progress() const {
    const SchedulerCounts c = scheduler.Counts();
    ServerProgress p;
    p.total = summary.total;
    p.done = summary.done_before + summary.committed;
    p.failed = summary.failed_before + summary.failed_now;
    p.queued = c.queued;
    p.leased = c.leased;
    p.skipped = summary.skipped;
    p.workers = c.workers;
    return p;
  }

  void ReportProgress() {
    if (!s.options_.on_progress) return;
    const ServerProgress p = Progress();
    if (last_progress && *last_progress == p) return;
    last_progress = p;
    s.options_.on_progress(p);
  }

  Status Load() {
    // Reading the campaign first also checks that it exists before anything is written.
    NW_ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, s.store_.CampaignJobs(campaign_id));
    NW_ASSIGN_OR_RETURN(summary.requeued_at_start, s.store_.RequeueLeased(Wall()));
    if (summary.requeued_at_start > 0) {
      Log("coordinator: " + std::to_string(summary.requeued_at_start) +
          " jobs leased by an earlier run were put back to queued");
    }
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
          NW_RETURN_IF_ERROR(scheduler.AddJob(j.key, j.spec, j.attempts));
          break;
      }
    }
    return Status::Ok();
  }

  Result<RunSummary> Run() {
    router.set(zmq::sockopt::linger, 0);
    router.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(limits.max_frame_bytes));
    router.bind(s.options_.endpoint);
    NW_RETURN_IF_ERROR(Load());
    Log("coordinator: campaign " + std::to_string(campaign_id) + ": " +
        std::to_string(summary.total) + " jobs, " + std::to_string(scheduler.Counts().queued) +
        " to run on " + s.options_.endpoint);
    const int64_t hb = s.options_.scheduler.heartbeat_interval_ms;
    next_heartbeat_ms = s.clock_.NowMs() + hb;
    std::vector<zmq_pollitem_t> items = {{router.handle(), 0, ZMQ_POLLIN, 0}};
    ReportProgress();
    while (true) {
      if (s.stop_.load(std::memory_order_relaxed)) {
        summary.stopped = !scheduler.Finished();
        break;
      }
      if (scheduler.Finished() && batch.empty() && acks.empty()) break;

      int64_t now = s.clock_.NowMs();
      int64_t wake = std::min(now + kMaxPollMs, next_heartbeat_ms);
      if (auto d = scheduler.NextDeadlineMs()) wake = std::min(wake, *d);
      if (!batch.empty()) wake = std::min(wake, batch_started_ms + s.options_.result_batch_ms);
      if (!acks.empty() && batch.empty()) wake = now;
      zmq::poll(items, std::chrono::milliseconds(std::max<int64_t>(0, wake - now)));
      if ((items[0].revents & ZMQ_POLLIN) != 0) {
        for (int i = 0; i < kMaxMessagesPerWake; ++i) {
          zmq::multipart_t frames;
          if (!frames.recv(router, ZMQ_DONTWAIT)) break;
          NW_RETURN_IF_ERROR(OnMessage(frames));
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
      NW_RETURN_IF_ERROR(Apply(scheduler.Tick()));

      now = s.clock_.NowMs();
      if (batch.empty() || static_cast<int>(batch.size()) >= s.options_.result_batch_size ||
          now >= batch_started_ms + s.options_.result_batch_ms) {
        NW_RETURN_IF_ERROR(Flush());
      }
      if (now >= next_heartbeat_ms) {
        for (const auto& [id, identity] : identity_of) Send(identity, HeartbeatMsg{});
        next_heartbeat_ms = now + hb;
      }
      ReportProgress();
    }
    NW_RETURN_IF_ERROR(Flush());
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
    summary.workers_seen = static_cast<int64_t>(seen.size());
    ReportProgress();
    Log("coordinator: campaign " + std::to_string(campaign_id) + " " + reason + ": " +
        std::to_string(summary.done) + " done, " + std::to_string(summary.failed) + " failed of " +
        std::to_string(summary.total));
    return summary;
  }
};

Server::Server(zmq::context_t& context, Store& store, const Clock& clock, ServerOptions options)
    : context_(context), store_(store), clock_(clock), options_(std::move(options)) {}

void Server::Stop() { stop_.store(true); }

Result<RunSummary> Server::Run(int64_t campaign_id) {
  NW_RETURN_IF_ERROR(options_.Validate());
  try {
    Loop loop(*this, campaign_id);
    return loop.Run();
  } catch (const zmq::error_t& e) {
    return Status::Unavailable("coordinator on " + options_.endpoint +
                               ": ZeroMQ error: " + e.what());
  }
}

}  // namespace nw
