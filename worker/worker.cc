#include "worker/worker.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <exception>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include "protocol/zmq_handoff.h"
#include "worker/gpu_busy_sampler.h"

namespace nw {
namespace {

using json = nlohmann::json;

// The loop wakes at least this often to notice Stop().
constexpr int64_t kMaxPollMs = 50;

// What a slot thread and the worker's loop hand each other. The loop puts a job (or stop) here
// and sends one byte on the slot's PAIR socket; the slot thread takes it, runs it, puts the
// result here and sends one byte back. The bytes wake the other side (the loop polls the PAIR
// sockets with the DEALER); the mutex orders the hand-over. In-process, so nothing is encoded:
// only the result for the coordinator is (once, by the loop).
struct SlotMailbox {
  std::mutex mu;
  std::optional<JobMsg> job;        // loop -> slot
  std::optional<JobResult> result;  // slot -> loop
  bool stop = false;                // loop -> slot: leave
};

constexpr char kSignal = 'n';  // "look in the mailbox"

// Runs the executor on jobs from `box` until told to stop. Owns its PAIR end; uses `executor`
// only from this thread.
// `sampler` (may be null): the GPU's busy fraction over each job goes into its result.
void SlotMain(zmq::context_t& context, const std::string& endpoint, JobExecutor& executor,
              const std::string& worker_id, GpuBusySampler* sampler, SlotMailbox& box) {
  try {
    zmq::socket_t pair(context, zmq::socket_type::pair);
    pair.set(zmq::sockopt::linger, 0);
    pair.connect(endpoint);
    while (true) {
      zmq::message_t in;
      if (!pair.recv(in)) continue;
      std::optional<JobMsg> job;
      {
        // Only stop (or a terminated context) ends the slot: the loop's shutdown sets it and then
        // joins, so the slot must not leave before it is told.
        std::lock_guard<std::mutex> l(box.mu);
        if (box.stop) return;
        job.swap(box.job);
      }
      if (!job) continue;
      const uint64_t busy_from = sampler != nullptr ? sampler->Mark() : 0;
      JobResult r;
      try {
        r = executor.Execute(job->spec, job->job_key, job->attempt);
      } catch (const std::exception& e) {
        // The contract says executors never throw; if one does, it is a bug in that job's run.
        r = JobResult{};
        r.outcome = Outcome::kEngineError;
        r.error_code = std::string(StatusCodeName(StatusCode::kInternal));
        r.error_message = std::string("executor threw: ") + e.what();
        r.retryable = false;
      } catch (...) {
        r = JobResult{};
        r.outcome = Outcome::kEngineError;
        r.error_code = std::string(StatusCodeName(StatusCode::kInternal));
        r.error_message = "executor threw a non-standard exception";
        r.retryable = false;
      }
      r.job_key = job->job_key;
      r.attempt = job->attempt;
      r.worker_id = worker_id;  // the registered id is the provenance that counts
      r.gpu_busy.reset();       // measured here or not at all
      if (sampler != nullptr) r.gpu_busy = sampler->BusyBetween(busy_from, sampler->Mark());
      {
        std::lock_guard<std::mutex> l(box.mu);
        box.result = std::move(r);
      }
      pair.send(zmq::const_buffer(&kSignal, 1));
    }
  } catch (const zmq::error_t&) {
    // Context terminated: the process is going down.
  }
}

// The result as it will be sent; a result too large for a frame (e.g. huge probes) is replaced
// by an engine_error saying so, a job outcome like any other.
std::optional<zmq::multipart_t> EncodeResult(ResultMsg& m, const CodecLimits& limits) {
  auto out = Encode(m, limits);
  if (out.ok()) return std::move(*out);
  JobResult small;
  small.job_key = m.result.job_key;
  small.attempt = m.result.attempt;
  small.outcome = Outcome::kEngineError;
  small.worker_id = m.result.worker_id;
  small.device = m.result.device;
  small.engine_version = m.result.engine_version;
  small.error_code = std::string(StatusCodeName(StatusCode::kOutOfRange));
  small.error_message = "result not sendable: " + out.status().message();
  small.retryable = false;
  m.result = std::move(small);
  out = Encode(m, limits);
  if (!out.ok()) return std::nullopt;
  return std::move(*out);
}

std::set<std::string> BackendSet(const json& caps) {
  std::set<std::string> out;
  if (!caps.is_object() || !caps.contains("backends") || !caps["backends"].is_array()) return out;
  for (const auto& b : caps["backends"]) {
    if (b.is_string()) out.insert(b.get<std::string>());
  }
  return out;
}

}  // namespace

// The state of one Run(): sockets, slots and the protocol's bookkeeping.
struct Worker::Loop {
  struct Slot {
    zmq::socket_t pair;
    std::string endpoint;
    std::unique_ptr<SlotMailbox> box;  // shared with the slot's thread (stable address)
    std::thread thread;
    std::optional<AttemptRef> running;
  };
  struct Pending {
    ResultMsg msg;
    int64_t next_send_ms = 0;
  };

  Worker& w;
  CodecLimits limits;
  json capabilities;
  std::vector<Slot> slots;
  std::optional<zmq::socket_t> dealer;
  std::deque<JobMsg> backlog;             // JOBs received while every slot was busy
  std::map<AttemptRef, Pending> unacked;  // results sent, waiting for an ACK
  int64_t next_heartbeat_ms = 0;
  int64_t liveness_deadline_ms = 0;
  int64_t reconnect_at_ms = 0;
  int64_t backoff_ms = 0;
  bool finished = false;  // DISCONNECT received
  // Drain() and idle exit (worker.h).
  bool draining = false;
  int64_t drain_deadline_ms = 0;
  bool ready_again = false;   // draining: a JOB came anyway; READY again without it
  bool heard = false;         // a valid message from the coordinator on this connection
  int64_t idle_since_ms = 0;  // since when nothing was held here (while connected)
  std::string endpoint;       // options.endpoint, or endpoint_source's latest answer
  // GPU busy (worker.h): the sampler (null without a source), where this Run() began in its
  // samples, and the last heartbeat report.
  std::unique_ptr<GpuBusySampler> sampler;
  uint64_t run_busy_from = 0;
  uint64_t report_busy_from = 0;
  int64_t next_busy_report_ms = 0;
  int64_t last_busy_report_ms = 0;

  explicit Loop(Worker& worker) : w(worker), limits{worker.options_.max_frame_bytes} {}

  ~Loop() {
    // Stop and join every slot (a running job finishes first), then close our PAIR ends.
    for (auto& s : slots) {
      if (!s.thread.joinable()) continue;
      {
        std::lock_guard<std::mutex> l(s.box->mu);
        s.box->stop = true;
      }
      try {
        s.pair.send(zmq::const_buffer(&kSignal, 1));
      } catch (const zmq::error_t&) {
      }
    }
    for (auto& s : slots) {
      if (s.thread.joinable()) s.thread.join();
    }
    // The slots used the sampler: it stops (joining its thread) only after them.
    if (sampler) {
      w.counters_.gpu_busy = sampler->BusyBetween(run_busy_from, sampler->Mark()).value_or(-1);
      sampler->Stop();
    }
  }

  int64_t Now() const { return w.clock_.NowMs(); }
  int64_t DeadAfter() const {
    return w.options_.heartbeat_interval_ms * w.options_.heartbeat_liveness;
  }
  int64_t ResendMs() const {
    return w.options_.result_resend_ms > 0 ? w.options_.result_resend_ms : DeadAfter();
  }

  void StartSlots() {
    // The slots' inproc names must be unique in the context for as long as ZeroMQ keeps a closed
    // socket's name: a Worker created where a just-destroyed one lived (the same address) would
    // otherwise find its names still bound (EADDRINUSE), so the address is joined by a random
    // nonce drawn for this run.
    std::random_device rd;
    char tag[64];
    std::snprintf(tag, sizeof(tag), "%p-%08x%08x", static_cast<const void*>(&w), rd(), rd());
    for (size_t i = 0; i < w.executors_.size(); ++i) {
      Slot s{zmq::socket_t(w.context_, zmq::socket_type::pair),
             "inproc://nw-worker-" + std::string(tag) + "-slot-" + std::to_string(i),
             std::make_unique<SlotMailbox>(), std::thread(), std::nullopt};
      s.pair.set(zmq::sockopt::linger, 0);
      s.pair.bind(s.endpoint);
      slots.push_back(std::move(s));
    }
    for (size_t i = 0; i < slots.size(); ++i) {
      slots[i].thread =
          std::thread(SlotMain, std::ref(w.context_), slots[i].endpoint, std::ref(*w.executors_[i]),
                      w.options_.worker_id, sampler.get(), std::ref(*slots[i].box));
    }
  }

  // Sends on the DEALER if connected; false if not (the message is then simply not sent).
  bool Send(const Message& m) {
    if (!dealer) return false;
    auto frames = Encode(m, limits);
    if (!frames.ok()) {
      w.Log("worker " + w.options_.worker_id + ": cannot send: " + frames.status().ToString());
      return false;
    }
    return SendFrames(*frames, *dealer, ZMQ_DONTWAIT);
  }

  std::vector<AttemptRef> Held() const {
    std::vector<AttemptRef> held;
    for (const auto& s : slots) {
      if (s.running) held.push_back(*s.running);
    }
    for (const auto& j : backlog) held.push_back({j.job_key, j.attempt});
    for (const auto& [ref, p] : unacked) held.push_back(ref);
    return held;
  }

  void SendReady() {
    ReadyMsg r;
    r.worker_id = w.options_.worker_id;
    r.host = w.options_.host;
    r.slots = static_cast<int>(slots.size());
    r.capabilities = capabilities;
    r.held = Held();
    Send(r);
  }

  void SendResult(Pending& p) {
    if (Send(p.msg)) w.counters_.results_sent++;
    p.next_send_ms = Now() + ResendMs();
  }

  void Connect() {
    dealer.emplace(w.context_, zmq::socket_type::dealer);
    dealer->set(zmq::sockopt::linger, 0);
    dealer->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(limits.max_frame_bytes));
    if (!w.options_.curve_server_key.empty()) {
      dealer->set(zmq::sockopt::curve_serverkey, w.options_.curve_server_key);
      dealer->set(zmq::sockopt::curve_publickey, w.options_.curve_public_key);
      dealer->set(zmq::sockopt::curve_secretkey, w.options_.curve_secret_key);
    }
    if (w.options_.endpoint_source) {
      std::string ep = w.options_.endpoint_source();
      if (!ep.empty() && ep != endpoint) {
        if (!endpoint.empty())
          w.Log("worker " + w.options_.worker_id + ": coordinator now at " + ep);
        endpoint = std::move(ep);
      }
    }
    dealer->connect(endpoint);
    const int64_t now = Now();
    heard = false;
    idle_since_ms = now;
    liveness_deadline_ms = now + DeadAfter();
    next_heartbeat_ms = now + w.options_.heartbeat_interval_ms;
    SendReady();
    for (auto& [ref, p] : unacked) SendResult(p);
  }

  void Disconnected(int64_t now) {
    w.Log("worker " + w.options_.worker_id + ": coordinator silent for " +
          std::to_string(now - (liveness_deadline_ms - DeadAfter())) + " ms; reconnecting in " +
          std::to_string(backoff_ms) + " ms");
    dealer.reset();
    reconnect_at_ms = now + backoff_ms;
    backoff_ms = std::min(backoff_ms * 2, w.options_.reconnect_max_ms);
    w.counters_.reconnects++;
  }

  bool Dispatch(const JobMsg& job) {
    for (auto& s : slots) {
      if (s.running) continue;
      {
        std::lock_guard<std::mutex> l(s.box->mu);
        s.box->job = job;
      }
      s.pair.send(zmq::const_buffer(&kSignal, 1));
      s.running = AttemptRef{job.job_key, job.attempt};
      return true;
    }
    return false;
  }

  bool Holds(const AttemptRef& ref) const {
    for (const auto& s : slots) {
      if (s.running && *s.running == ref) return true;
    }
    for (const auto& j : backlog) {
      if (j.job_key == ref.job_key && j.attempt == ref.attempt) return true;
    }
    return unacked.count(ref) != 0;
  }

  void OnCoordinatorMessage(const zmq::multipart_t& frames) {
    auto msg = Decode(frames, limits);
    if (!msg.ok()) {
      w.counters_.malformed++;
      w.Log("worker " + w.options_.worker_id +
            ": dropped malformed message from coordinator: " + msg.status().ToString());
      return;
    }
    const Command cmd = CommandOf(*msg);
    if (!IsCoordinatorCommand(cmd)) {
      w.counters_.malformed++;
      w.Log("worker " + w.options_.worker_id + ": dropped unexpected " + CommandName(cmd) +
            " from coordinator");
      return;
    }
    // Any valid message proves the coordinator alive.
    liveness_deadline_ms = Now() + DeadAfter();
    backoff_ms = w.options_.reconnect_initial_ms;
    heard = true;
    if (auto* job = std::get_if<JobMsg>(&*msg)) {
      const AttemptRef ref{job->job_key, job->attempt};
      if (Holds(ref)) return;  // a repeated grant
      if (draining) {
        // Granted before the coordinator read our draining READY: give it back.
        w.counters_.handed_back++;
        ready_again = true;
        return;
      }
      w.counters_.jobs_received++;
      if (!Dispatch(*job)) backlog.push_back(std::move(*job));
    } else if (auto* ack = std::get_if<AckMsg>(&*msg)) {
      if (unacked.erase({ack->job_key, ack->attempt}) != 0) w.counters_.acks++;
      if (ack->status == AckStatus::kRejected || ack->status == AckStatus::kFailed) {
        w.Log("worker " + w.options_.worker_id + ": result " + ack->job_key + " attempt " +
              std::to_string(ack->attempt) + " " + std::string(AckStatusName(ack->status)) +
              (ack->reason.empty() ? "" : ": " + ack->reason));
      }
    } else if (auto* d = std::get_if<DisconnectMsg>(&*msg)) {
      if (d->reconnect) {
        w.Log("worker " + w.options_.worker_id + ": coordinator asks to register again (" +
              d->reason + ")");
        SendReady();
        for (auto& [ref, p] : unacked) SendResult(p);
      } else {
        w.Log("worker " + w.options_.worker_id + ": coordinator disconnected us: " + d->reason);
        finished = true;
      }
    }
    // HEARTBEAT: nothing more to do.
  }

  void OnSlotMessage(Slot& s) {
    zmq::message_t signal;
    if (!s.pair.recv(signal, zmq::recv_flags::dontwait)) return;
    std::optional<JobResult> result;
    {
      std::lock_guard<std::mutex> l(s.box->mu);
      result.swap(s.box->result);
    }
    if (!result) return;
    s.running.reset();
    w.counters_.jobs_executed++;
    ResultMsg m{std::move(*result)};
    std::optional<zmq::multipart_t> frames = EncodeResult(m, limits);
    if (!frames) {
      w.Log("worker " + w.options_.worker_id + ": cannot encode the result of job " +
            m.result.job_key + "; dropped (the coordinator retries the job when its lease ends)");
      return;
    }
    const AttemptRef ref{m.result.job_key, m.result.attempt};
    auto [it, inserted] = unacked.insert_or_assign(ref, Pending{std::move(m), 0});
    // The first send uses the frames encoded above; resends encode again.
    if (dealer && SendFrames(*frames, *dealer, ZMQ_DONTWAIT)) w.counters_.results_sent++;
    it->second.next_send_ms = Now() + ResendMs();
    if (!backlog.empty() && Dispatch(backlog.front())) backlog.pop_front();
  }

  bool HoldsNothing() const {
    if (!backlog.empty() || !unacked.empty()) return false;
    for (const auto& s : slots) {
      if (s.running) return false;
    }
    return true;
  }

  int RunningCount() const {
    int n = 0;
    for (const auto& s : slots) n += s.running ? 1 : 0;
    return n;
  }

  // Drain(): no more jobs; the queued ones go back at once (READY without them, "draining").
  void StartDrain(int64_t now) {
    draining = true;
    drain_deadline_ms = now + std::max<int64_t>(0, w.options_.drain_grace_ms);
    capabilities["draining"] = true;
    const auto queued = static_cast<int64_t>(backlog.size());
    backlog.clear();
    w.counters_.handed_back += queued;
    w.Log("worker " + w.options_.worker_id + ": draining: " + std::to_string(queued) +
          " queued jobs handed back, " + std::to_string(RunningCount()) + " running get up to " +
          std::to_string(w.options_.drain_grace_ms) + " ms");
    SendReady();
  }

  // Draining: the reason to leave now, if it is time.
  std::optional<std::string> DrainOver(int64_t now) {
    if (unacked.empty() && RunningCount() == 0) return std::string("worker drained");
    if (now < drain_deadline_ms) return std::nullopt;
    const int running = RunningCount();
    w.counters_.handed_back += running;
    return "worker drain grace over: " + std::to_string(running) + " running jobs handed back, " +
           std::to_string(unacked.size()) + " results unacknowledged";
  }

  // A HEARTBEAT, with the GPU's busy fraction since the last report when one is due and known.
  HeartbeatMsg Heartbeat(int64_t now) {
    HeartbeatMsg hb;
    if (!sampler) return hb;
    if (auto error = sampler->TakeFirstError()) {
      w.Log("worker " + w.options_.worker_id + ": GPU busy not measured while " + sampler->Name() +
            " fails: " + *error);
    }
    if (now < next_busy_report_ms) return hb;
    const uint64_t to = sampler->Mark();
    hb.gpu_busy = sampler->BusyBetween(report_busy_from, to);
    hb.gpu_busy_ms = now - last_busy_report_ms;
    if (hb.gpu_busy) {
      report_busy_from = to;
      last_busy_report_ms = now;
    }
    next_busy_report_ms = now + std::max<int64_t>(1, w.options_.gpu_busy_report_ms);
    return hb;
  }

  void StartSampler() {
    if (!w.gpu_busy_source_) return;
    sampler = std::make_unique<GpuBusySampler>(
        *w.gpu_busy_source_,
        std::chrono::milliseconds(std::max<int64_t>(1, w.options_.gpu_busy_poll_ms)));
    run_busy_from = report_busy_from = sampler->Mark();
    last_busy_report_ms = Now();
    next_busy_report_ms = last_busy_report_ms + std::max<int64_t>(1, w.options_.gpu_busy_report_ms);
    sampler->Start();
  }

  Status Run() {
    endpoint = w.options_.endpoint;
    backoff_ms = w.options_.reconnect_initial_ms;
    capabilities = w.capabilities_;
    StartSampler();
    StartSlots();
    Connect();
    std::vector<zmq_pollitem_t> items;
    std::string leave_reason = "worker stopping";
    while (!finished && !w.stop_.load(std::memory_order_relaxed)) {
      int64_t now = Now();
      int64_t wake = now + kMaxPollMs;
      if (dealer) {
        wake = std::min({wake, next_heartbeat_ms, liveness_deadline_ms});
        for (const auto& [ref, p] : unacked) wake = std::min(wake, p.next_send_ms);
      } else {
        wake = std::min(wake, reconnect_at_ms);
      }
      items.clear();
      if (dealer) items.push_back({dealer->handle(), 0, ZMQ_POLLIN, 0});
      const size_t first_slot = items.size();
      for (auto& s : slots) items.push_back({s.pair.handle(), 0, ZMQ_POLLIN, 0});
      zmq::poll(items, std::chrono::milliseconds(std::max<int64_t>(0, wake - now)));

      if (dealer && (items[0].revents & ZMQ_POLLIN) != 0) {
        for (int i = 0; i < 1000 && dealer && !finished; ++i) {
          zmq::multipart_t frames;
          if (!RecvFrames(frames, *dealer, ZMQ_DONTWAIT)) break;
          OnCoordinatorMessage(frames);
        }
      }
      for (size_t i = 0; i < slots.size(); ++i) {
        if ((items[first_slot + i].revents & ZMQ_POLLIN) != 0) OnSlotMessage(slots[i]);
      }
      if (finished) break;

      now = Now();
      if (ready_again) {
        ready_again = false;
        SendReady();
      }
      if (!draining && w.drain_.load(std::memory_order_relaxed)) StartDrain(now);
      if (draining) {
        if (auto reason = DrainOver(now)) {
          leave_reason = *reason;
          w.counters_.drained = true;
          w.Log("worker " + w.options_.worker_id + ": " + leave_reason);
          break;
        }
      } else if (w.options_.idle_exit_ms > 0) {
        if (!dealer || !HoldsNothing()) idle_since_ms = now;
        if (dealer && heard && now - idle_since_ms >= w.options_.idle_exit_ms) {
          leave_reason = "worker idle for " + std::to_string(now - idle_since_ms) + " ms";
          w.counters_.idle_exit = true;
          w.Log("worker " + w.options_.worker_id + ": " + leave_reason + "; leaving");
          break;
        }
      }
      if (dealer) {
        if (now >= liveness_deadline_ms) {
          Disconnected(now);
          continue;
        }
        if (now >= next_heartbeat_ms) {
          Send(Heartbeat(now));
          next_heartbeat_ms = now + w.options_.heartbeat_interval_ms;
        }
        for (auto& [ref, p] : unacked) {
          if (now >= p.next_send_ms) SendResult(p);
        }
      } else if (now >= reconnect_at_ms) {
        Connect();
      }
    }
    if (dealer && !finished) {
      // Stop(), drained or idle: tell the coordinator, so it requeues whatever we still hold now
      // rather than after 3 s.
      Send(DisconnectMsg{leave_reason, false});
      dealer->set(zmq::sockopt::linger, 250);
    }
    dealer.reset();
    return Status::Ok();
  }
};

namespace {

// A nonce for this process in READY's capabilities: the coordinator lets a new connection take
// over this worker id only when it presents the same one (or the same CURVE key), so no other
// process can (docs/protocol.md, "Registration").
json WithSession(json caps) {
  std::random_device rd;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string session;
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = rd();
    for (int b = 0; b < 8; ++b) session.push_back(kHex[(v >> (4 * b)) & 15]);
  }
  caps["session"] = session;
  return caps;
}

}  // namespace

Worker::Worker(zmq::context_t& context, const Clock& clock, WorkerOptions options,
               std::vector<std::unique_ptr<JobExecutor>> executors,
               std::unique_ptr<GpuUtilizationSource> gpu_busy)
    : context_(context),
      clock_(clock),
      options_(std::move(options)),
      executors_(std::move(executors)),
      gpu_busy_source_(std::move(gpu_busy)),
      capabilities_(WithSession(MergedCapabilities(executors_, options_.extra_capabilities))) {}

Worker::~Worker() = default;

void Worker::Stop() { stop_.store(true); }

void Worker::Drain() { drain_.store(true); }

void Worker::Log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

WorkerStats Worker::Stats() const {
  WorkerStats s;
  s.jobs_received = counters_.jobs_received.load();
  s.jobs_executed = counters_.jobs_executed.load();
  s.results_sent = counters_.results_sent.load();
  s.acks = counters_.acks.load();
  s.reconnects = counters_.reconnects.load();
  s.malformed = counters_.malformed.load();
  s.handed_back = counters_.handed_back.load();
  s.idle_exit = counters_.idle_exit.load();
  s.drained = counters_.drained.load();
  if (const double busy = counters_.gpu_busy.load(); busy >= 0) s.gpu_busy = busy;
  return s;
}

json Worker::Capabilities() const { return capabilities_; }

std::string Worker::GpuBusySourceName() const {
  return gpu_busy_source_ ? gpu_busy_source_->Name() : std::string();
}

json Worker::MergedCapabilities(const std::vector<std::unique_ptr<JobExecutor>>& executors,
                                const json& extra) {
  if (executors.empty() || executors[0] == nullptr) return json{{"backends", json::array()}};
  json caps = executors[0]->Capabilities();
  if (!caps.is_object()) caps = json::object();
  if (extra.is_object()) {
    for (const auto& [k, v] : extra.items()) {
      if (k != "backends") caps[k] = v;
    }
  }
  std::set<std::string> backends = BackendSet(caps);
  for (size_t i = 1; i < executors.size(); ++i) {
    if (executors[i] == nullptr) continue;
    const std::set<std::string> other = BackendSet(executors[i]->Capabilities());
    std::set<std::string> both;
    std::set_intersection(backends.begin(), backends.end(), other.begin(), other.end(),
                          std::inserter(both, both.begin()));
    backends = std::move(both);
  }
  caps["backends"] = backends;
  return caps;
}

Status Worker::Run() {
  const std::string who = "worker '" + options_.worker_id + "'";
  if (options_.worker_id.empty() || options_.worker_id.size() > kMaxIdBytes) {
    return Status::InvalidArgument("worker: worker_id must have 1.." + std::to_string(kMaxIdBytes) +
                                   " bytes");
  }
  if (options_.endpoint.empty()) return Status::InvalidArgument(who + ": no endpoint");
  if (executors_.empty() || executors_.size() > static_cast<size_t>(kMaxSlots)) {
    return Status::InvalidArgument(who + ": needs 1.." + std::to_string(kMaxSlots) +
                                   " executors, got " + std::to_string(executors_.size()));
  }
  for (const auto& e : executors_) {
    if (e == nullptr) return Status::InvalidArgument(who + ": null executor");
  }
  const bool any_curve = !options_.curve_server_key.empty() || !options_.curve_public_key.empty() ||
                         !options_.curve_secret_key.empty();
  if (any_curve &&
      (options_.curve_server_key.size() != 40 || options_.curve_public_key.size() != 40 ||
       options_.curve_secret_key.size() != 40)) {
    return Status::InvalidArgument(who +
                                   ": CURVE needs the server key and this worker's key "
                                   "pair, each 40 Z85 characters");
  }
  if (options_.heartbeat_interval_ms <= 0 || options_.heartbeat_liveness < 1 ||
      options_.reconnect_initial_ms <= 0 ||
      options_.reconnect_max_ms < options_.reconnect_initial_ms) {
    return Status::InvalidArgument(who + ": invalid heartbeat/reconnect timing");
  }
  try {
    Loop loop(*this);
    return loop.Run();
  } catch (const zmq::error_t& e) {
    return Status::Unavailable(who + ": ZeroMQ error on " + options_.endpoint + ": " + e.what());
  }
}

}  // namespace nw
