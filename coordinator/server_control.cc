// Server::Loop's control protocol (NWC01, protocol/control.h) and the daemon's campaigns:
// submissions in parts, STATUS, CANCEL / PAUSE / RESUME, loading campaigns at start (orphan
// leases), finished campaigns leaving the scheduler, and the boundary searches of campaigns
// submitted with `search:` (coordinator/search/). docs/distributed.md.
#include <string>
#include <utility>
#include <vector>

#include "coordinator/job_order.h"
#include "coordinator/server_loop.h"
#include "slurm/slurm_env.h"

namespace nw {
namespace {

// Completed submissions remembered, so a client's retry of the last part is answered again.
constexpr size_t kCompletedSubmissionsKept = 64;

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

// Serve(): tells every search of a campaign in the scheduler what was committed or given up,
// and queues the jobs they ask for next (written to the Store and linked to the campaign by
// the driver first). A search that has ended leaves `drivers`; its campaign finishes with its
// last job.
Status Server::Loop::AdvanceSearches() {
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
Status Server::Loop::RestoreSearch(int64_t id) {
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

bool Server::Loop::MaySubmit(const std::string& key) const {
  return s.options_.curve_allow.count(key) != 0 || s.options_.curve_allow_submit.count(key) != 0;
}

// Puts a campaign's queued and leased jobs into the scheduler. Leased jobs become orphan
// leases that their worker may adopt when it re-registers (coordinator restart).
Result<Server::Loop::LoadCounts> Server::Loop::LoadCampaign(const CampaignControl& c) {
  NW_ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, s.store_.CampaignJobs(c.campaign_id));
  LoadCounts counts;
  counts.jobs = static_cast<int64_t>(jobs.size());
  NW_RETURN_IF_ERROR(scheduler.AddCampaign(c.campaign_id, c.name, c.priority,
                                           c.state == CampaignRunState::kPaused));
  const int64_t now = s.clock_.NowMs();
  const int64_t wall = Wall();
  for (size_t i : InterleaveByLength(jobs)) {  // long and short prompts side by side
    const JobRecord& j = jobs[i];
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

Status Server::Loop::LoadDaemon() {
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

Result<CampaignControl> Server::Loop::ControlOf(const std::string& name) {
  NW_ASSIGN_OR_RETURN(auto record, s.store_.FindCampaign(name));
  if (record.has_value()) {
    NW_ASSIGN_OR_RETURN(auto control, table->Find(record->id));
    if (control.has_value()) return *control;
  }
  return Status::NotFound("campaign '" + name + "' was not submitted to this coordinator");
}

Result<SubmitReply> Server::Loop::ApplySubmission(Staged& st) {
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
  Log("coordinator: campaign " + h.campaign + " submitted (priority " + std::to_string(h.priority) +
      "): " + std::to_string(counts.jobs) + " jobs" +
      (h.search ? " (boundary search so far, of " + std::to_string(st.jobs.size()) + " in the grid)"
                : std::string()) +
      ", " + std::to_string(counts.done) + " already done, " + std::to_string(counts.runnable) +
      " to run" +
      (retried_infra > 0 ? " (" + std::to_string(retried_infra) +
                               " of them failed before only through expired leases or lost "
                               "workers)"
                         : std::string()));
  return reply;
}

void Server::Loop::OnSubmit(const std::string& identity, SubmitRequest r) {
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

Result<StatusReply> Server::Loop::BuildStatus(const std::string& only) {
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
    if (auto rec = records.find(w.id); rec != records.end() && rec->second.gpu_busy) {
      ws.gpu_busy = rec->second.gpu_busy;
      ws.gpu_busy_ms = rec->second.gpu_busy_ms;
    }
    out.workers.push_back(std::move(ws));
  }
  return out;
}

Result<CampaignOpReply> Server::Loop::ApplyOp(const CampaignOpRequest& op) {
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

Status Server::Loop::OnControl(const std::string& identity, const zmq::multipart_t& frames) {
  auto req = DecodeControlRequest(frames, limits);
  if (!req.ok()) {
    ++summary.malformed_messages;
    Log("coordinator: malformed control request from " + HexIdentity(identity) + ": " +
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
void Server::Loop::TakeFinished() {
  for (int64_t id : scheduler.TakeFinishedCampaigns()) {
    auto c = table->Find(id);
    const std::string name = c.ok() && c->has_value() ? (*c)->name : std::to_string(id);
    Log("coordinator: campaign " + name + " has no job left to run");
  }
}

void Server::Loop::ExpireStaged() {
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
}  // namespace nw
