// Server::Loop's worker protocol (NWW01, protocol/messages.h): registration (READY, with the
// id's owner and the worker cap), results (plausibility, fencing, batching for the commit),
// heartbeats and departures. docs/protocol.md.
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "coordinator/server_loop.h"

namespace nw {

using json = nlohmann::json;

// Who registers a worker id: its CURVE key when there is one, else the session nonce its
// process chose (capabilities.session; docs/protocol.md, "Registration").
std::string Server::Loop::OwnerOf(const std::string& curve_key, const ReadyMsg& r) {
  if (!curve_key.empty()) return "key:" + curve_key;
  auto it = r.capabilities.find("session");
  return it != r.capabilities.end() && it->is_string() ? "session:" + it->get<std::string>()
                                                       : std::string("session:");
}

Status Server::Loop::OnReady(const std::string& identity, ReadyMsg r,
                             const std::string& curve_key) {
  const std::string owner = OwnerOf(curve_key, r);
  if (auto it = identity_of.find(r.worker_id);
      it != identity_of.end() && it->second != identity && scheduler.HasWorker(r.worker_id)) {
    auto o = owner_of.find(r.worker_id);
    if (o != owner_of.end() && o->second != owner) {
      // Another process (or key) wants a live worker's id: it waits until that worker leaves
      // or is declared lost, then registers; its leases are never handed over.
      ++summary.refused_messages;
      Log("coordinator: refused READY for worker id " + r.worker_id + " from connection " +
          HexIdentity(identity) + ": the id is registered by another " +
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

Status Server::Loop::OnDisconnect(const std::string& identity, const std::string& reason) {
  auto it = worker_of.find(identity);
  if (it == worker_of.end()) return Status::Ok();
  const std::string worker_id = it->second;
  worker_of.erase(it);
  identity_of.erase(worker_id);
  Log("coordinator: worker " + worker_id + " left: " + reason);
  NW_RETURN_IF_ERROR(Apply(scheduler.OnDisconnect(worker_id, reason)));
  return UpsertWorker(worker_id, "gone");
}

void Server::Loop::Unknown(const std::string& identity, Command cmd) {
  ++summary.unknown_worker_messages;
  Log("coordinator: " + CommandName(cmd) + " from unregistered connection " +
      HexIdentity(identity) + "; asking it to register");
  Send(identity, DisconnectMsg{"unknown worker: send READY", true});
}

Status Server::Loop::OnResult(const std::string& identity, JobResult r) {
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

Status Server::Loop::OnWorkerMessage(const std::string& identity, zmq::multipart_t& frames,
                                     const std::string& curve_key) {
  auto msg = Decode(frames, limits);
  if (!msg.ok()) {
    ++summary.malformed_messages;
    Log("coordinator: dropped malformed message from " + HexIdentity(identity) + ": " +
        msg.status().ToString());
    return Status::Ok();
  }
  const Command cmd = CommandOf(*msg);
  if (!IsWorkerCommand(cmd)) {
    ++summary.malformed_messages;
    Log("coordinator: dropped unexpected " + CommandName(cmd) + " from " + HexIdentity(identity));
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
    return Status::Ok();
  }
  const auto& hb = std::get<HeartbeatMsg>(*msg);
  if (!hb.gpu_busy) return Status::Ok();
  // A GPU worker's busy fraction over its last interval: kept with its record (the dashboard
  // reads it there) and written to table workers (`nw status`), once per report.
  auto rec = records.find(it->second);
  if (rec == records.end()) return Status::Ok();
  rec->second.gpu_busy = hb.gpu_busy;
  rec->second.gpu_busy_ms = hb.gpu_busy_ms;
  rec->second.gpu_busy_at_ms = Wall();
  return UpsertWorker(it->second, "active");
}

bool Server::Loop::MayWork(const std::string& key) const {
  return s.options_.curve_allow.count(key) != 0 || s.options_.curve_allow_work.count(key) != 0;
}
}  // namespace nw
