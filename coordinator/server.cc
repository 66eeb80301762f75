// Server: the loop (Serve), batching and commits (Flush), leases and failures (Apply), message
// routing between the two protocols (OnMessage), progress and metrics, and Run()/Serve(). The
// worker protocol is server_workers.cc; the control protocol and the daemon's campaigns are
// server_control.cc (coordinator/server_loop.h holds the state they share).
#include "coordinator/server.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "coordinator/job_order.h"
#include "coordinator/server_loop.h"
#include "protocol/zmq_handoff.h"

namespace nw {
namespace {

// The loop wakes at least this often to notice Stop().
constexpr int64_t kMaxPollMs = 50;
// Messages handled per wake-up before timers get their turn.
constexpr int kMaxMessagesPerWake = 1000;

// The loop publishes its workers and counters to ServerOptions::metrics this often.
constexpr int64_t kMetricsPublishMs = 250;

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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

// Every line may carry a peer's strings (ids, reasons, paths): made safe here, once.
void Server::Loop::Log(const std::string& line) const {
  if (s.options_.log) s.options_.log(LogSafe(line, 16 * 1024));
}

void Server::Loop::Send(const std::string& identity, const Message& m) {
  auto frames = Encode(m, limits);
  if (!frames.ok()) {
    Log("coordinator: cannot send " + CommandName(CommandOf(m)) + ": " +
        frames.status().ToString());
    return;
  }
  frames->pushstr(identity);
  // ROUTER drops (never blocks) when the peer is gone or its queue is full.
  (void)SendFrames(*frames, router, ZMQ_DONTWAIT);
}

void Server::Loop::Reply(const std::string& identity, const ControlReply& r) {
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
  (void)SendFrames(*frames, router, ZMQ_DONTWAIT);
}

void Server::Loop::ReplyError(const std::string& identity, const Status& st) {
  Reply(identity, ErrorReply{st.code(), st.message()});
}

Status Server::Loop::UpsertWorker(const std::string& worker_id, const std::string& state) {
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
Status Server::Loop::Apply(const SchedulerEvents& ev) {
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

Status Server::Loop::Flush() {
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

// The CURVE public key the ZAP handler authenticated for this message ("" without CURVE).
std::string Server::Loop::CurveKeyOf(zmq::multipart_t& frames) const {
  if (!s.options_.curve || frames.empty()) return std::string();
  const char* user = zmq_msg_gets(frames.back().handle(), "User-Id");
  return user != nullptr ? std::string(user) : std::string();
}

Status Server::Loop::OnMessage(zmq::multipart_t& frames) {
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

ServerProgress Server::Loop::Progress() const {
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
void Server::Loop::PublishMetrics() {
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
    if (auto rec = records.find(w.id); rec != records.end()) lw.gpu_busy = rec->second.gpu_busy;
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

void Server::Loop::ReportProgress() {
  if (!s.options_.on_progress) return;
  const ServerProgress p = Progress();
  if (last_progress && *last_progress == p) return;
  last_progress = p;
  s.options_.on_progress(p);
}

Status Server::Loop::LoadOne() {
  // Reading the campaign first also checks that it exists before anything is written.
  NW_ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, s.store_.CampaignJobs(campaign_id));
  NW_ASSIGN_OR_RETURN(summary.requeued_at_start, s.store_.RequeueLeased(Wall()));
  if (summary.requeued_at_start > 0) {
    Log("coordinator: " + std::to_string(summary.requeued_at_start) +
        " jobs leased by an earlier run were put back to queued");
  }
  NW_RETURN_IF_ERROR(scheduler.AddCampaign(campaign_id, "", 0));
  summary.total = static_cast<int64_t>(jobs.size());
  for (size_t i : InterleaveByLength(jobs)) {  // long and short prompts side by side
    const JobRecord& j = jobs[i];
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

Status Server::Loop::Bind() {
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
Status Server::Loop::Serve() {
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
        if (!RecvFrames(frames, router, ZMQ_DONTWAIT)) break;
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

Result<RunSummary> Server::Loop::RunOne() {
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

Result<RunSummary> Server::Loop::RunDaemon() {
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
