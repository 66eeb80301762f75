// The worker runtime against a fake coordinator (a raw ROUTER socket driven by the test):
// registration, heartbeats while a job runs, results resent until ACKed, reconnect after
// coordinator silence with the held attempts, DISCONNECT handling, malformed input.
// Timing is polled with generous deadlines; no sleep decides an outcome.
#include "worker/worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "protocol/zmq_handoff.h"

namespace nw {
namespace {

using json = nlohmann::json;
constexpr int64_t kDeadlineMs = 10'000;

JobSpec Spec(int trial) {
  JobSpec s;
  s.model_dir = "/m";
  s.model_digest = "d";
  s.engine_version = "e";
  s.task = "niah-single";
  s.haystack = "noise";
  s.context_length = 128;
  s.backend = "cpu";
  s.trial = trial;
  return s;
}

// Opens when the test says so; executors wait on it.
class Gate {
 public:
  void Open() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

class FakeExecutor : public JobExecutor {
 public:
  explicit FakeExecutor(std::vector<std::string> backends, Gate* gate = nullptr)
      : backends_(std::move(backends)), gate_(gate) {}
  JobResult Execute(const JobSpec& spec, const std::string& key, int attempt) override {
    started++;
    if (gate_ != nullptr) gate_->Wait();
    JobResult r;
    r.job_key = key;
    r.attempt = attempt;
    r.outcome = spec.trial % 2 == 0 ? Outcome::kPass : Outcome::kMiss;
    r.generated_text = "trial " + std::to_string(spec.trial);
    r.device = "fake";
    return r;
  }
  json Capabilities() const override {
    return json{{"backends", backends_}, {"device", "fake"}, {"models", json::array()}};
  }
  std::atomic<int> started{0};

 private:
  std::vector<std::string> backends_;
  Gate* gate_;
};

struct Received {
  std::string identity;
  Message msg;
};

// A coordinator played by the test: a ROUTER socket on an inproc endpoint.
class FakeCoordinator {
 public:
  FakeCoordinator(zmq::context_t& ctx, const std::string& endpoint)
      : router_(ctx, zmq::socket_type::router) {
    router_.set(zmq::sockopt::linger, 0);
    router_.bind(endpoint);
  }

  // The next decodable message (malformed ones fail the test), or nullopt at the deadline.
  std::optional<Received> Recv(int64_t timeout_ms = kDeadlineMs) {
    std::vector<zmq_pollitem_t> items = {{router_.handle(), 0, ZMQ_POLLIN, 0}};
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < end) {
      zmq::poll(items, std::chrono::milliseconds(20));
      if ((items[0].revents & ZMQ_POLLIN) == 0) continue;
      zmq::multipart_t frames;
      if (!RecvFrames(frames, router_, ZMQ_DONTWAIT)) continue;
      std::string id = frames.popstr();
      auto m = Decode(frames);
      EXPECT_TRUE(m.ok()) << m.status().ToString();
      if (!m.ok()) continue;
      return Received{id, std::move(*m)};
    }
    return std::nullopt;
  }

  // Receives until a message of type T arrives (others are passed to `other`).
  template <typename T>
  std::optional<std::pair<std::string, T>> RecvA(
      const std::function<void(const Received&)>& other = nullptr,
      int64_t timeout_ms = kDeadlineMs) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < end) {
      auto r = Recv(20);
      if (!r) continue;
      if (auto* t = std::get_if<T>(&r->msg)) return std::make_pair(r->identity, *t);
      if (other) other(*r);
    }
    return std::nullopt;
  }

  void Send(const std::string& identity, const Message& m) {
    auto frames = Encode(m);
    ASSERT_TRUE(frames.ok());
    frames->pushstr(identity);
    ASSERT_TRUE(SendFrames(*frames, router_));
  }
  void SendRaw(const std::string& identity, zmq::multipart_t frames) {
    frames.pushstr(identity);
    ASSERT_TRUE(SendFrames(frames, router_));
  }

 private:
  zmq::socket_t router_;
};

class WorkerTest : public ::testing::Test {
 protected:
  WorkerOptions Options(const std::string& endpoint) {
    WorkerOptions o;
    o.endpoint = endpoint;
    o.worker_id = "w-test";
    o.host = "testhost";
    o.heartbeat_interval_ms = 30;
    o.heartbeat_liveness = 200;  // effectively never reconnect, unless a test lowers it
    o.reconnect_initial_ms = 30;
    o.reconnect_max_ms = 120;
    o.result_resend_ms = 60;
    o.log = [this](std::string_view line) {
      std::lock_guard<std::mutex> l(log_mu_);
      log_.emplace_back(line);
    };
    return o;
  }

  // The worker under test lives in the fixture, so a failed ASSERT still stops and joins it
  // (TearDown) before the context goes away.
  Worker& Make(WorkerOptions o, std::vector<std::unique_ptr<JobExecutor>> executors) {
    worker_ = std::make_unique<Worker>(ctx_, clock_, std::move(o), std::move(executors));
    return *worker_;
  }
  void Start(Worker& w) {
    thread_ = std::thread([this, &w] {
      run_status_ = w.Run();
      returned_ = true;
    });
  }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  void TearDown() override {
    if (thread_.joinable()) {
      worker_->Stop();
      thread_.join();
    }
  }
  bool Logged(const std::string& needle) {
    std::lock_guard<std::mutex> l(log_mu_);
    for (const auto& line : log_) {
      if (line.find(needle) != std::string::npos) return true;
    }
    return false;
  }

  zmq::context_t ctx_;
  SystemClock clock_;
  std::unique_ptr<Worker> worker_;
  std::thread thread_;
  Status run_status_ = Status::Internal("not run");
  std::atomic<bool> returned_{false};
  std::mutex log_mu_;
  std::vector<std::string> log_;
};

std::vector<std::unique_ptr<JobExecutor>> Executors(std::vector<FakeExecutor*>* out, int n,
                                                    std::vector<std::vector<std::string>> backends,
                                                    Gate* gate = nullptr) {
  std::vector<std::unique_ptr<JobExecutor>> v;
  for (int i = 0; i < n; ++i) {
    auto e =
        std::make_unique<FakeExecutor>(backends[static_cast<size_t>(i) % backends.size()], gate);
    if (out != nullptr) out->push_back(e.get());
    v.push_back(std::move(e));
  }
  return v;
}

JobMsg Job(int trial, int attempt = 1) {
  return JobMsg{Spec(trial).Key(), attempt, 60'000, 0, Spec(trial)};
}

TEST_F(WorkerTest, InvalidOptions) {
  WorkerOptions o = Options("inproc://unused");
  o.worker_id = "";
  Worker a(ctx_, clock_, o, Executors(nullptr, 1, {{"cpu"}}));
  EXPECT_EQ(a.Run().code(), StatusCode::kInvalidArgument);
  Worker b(ctx_, clock_, Options("inproc://unused"), {});
  EXPECT_EQ(b.Run().code(), StatusCode::kInvalidArgument);
  o = Options("");
  Worker c(ctx_, clock_, o, Executors(nullptr, 1, {{"cpu"}}));
  EXPECT_EQ(c.Run().code(), StatusCode::kInvalidArgument);
}

TEST_F(WorkerTest, ReadyHeartbeatJobResultAckDisconnect) {
  FakeCoordinator coord(ctx_, "inproc://wt-basic");
  std::vector<FakeExecutor*> execs;
  Worker& w =
      Make(Options("inproc://wt-basic"), Executors(&execs, 2, {{"cpu", "cpu-paged"}, {"cpu"}}));
  EXPECT_EQ(w.Capabilities()["backends"], json({"cpu"}));
  Start(w);

  auto ready = coord.RecvA<ReadyMsg>();
  ASSERT_TRUE(ready);
  const std::string id = ready->first;
  EXPECT_EQ(ready->second.worker_id, "w-test");
  EXPECT_EQ(ready->second.host, "testhost");
  EXPECT_EQ(ready->second.slots, 2);
  EXPECT_EQ(ready->second.capabilities["backends"], json({"cpu"}));
  EXPECT_EQ(ready->second.capabilities["device"], "fake");
  EXPECT_TRUE(ready->second.held.empty());

  // Heartbeats arrive on their own.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(coord.RecvA<HeartbeatMsg>());

  coord.Send(id, Job(0));
  coord.Send(id, Job(0));  // a repeated grant is ignored
  auto res = coord.RecvA<ResultMsg>();
  ASSERT_TRUE(res);
  EXPECT_EQ(res->second.result.job_key, Spec(0).Key());
  EXPECT_EQ(res->second.result.attempt, 1);
  EXPECT_EQ(res->second.result.outcome, Outcome::kPass);
  EXPECT_EQ(res->second.result.worker_id, "w-test");
  EXPECT_EQ(res->second.result.generated_text, "trial 0");

  // Not ACKed: it comes again.
  auto again = coord.RecvA<ResultMsg>();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->second.result.job_key, Spec(0).Key());
  coord.Send(id, AckMsg{Spec(0).Key(), 1, AckStatus::kCommitted, ""});
  // Drain what was in flight before the ACK, then make sure resends stop: within the next 10
  // heartbeats (300 ms, 5 resend periods) no RESULT arrives.
  int results_after_ack = 0;
  int heartbeats = 0;
  while (heartbeats < 12) {
    auto r = coord.Recv();
    ASSERT_TRUE(r);
    if (std::holds_alternative<HeartbeatMsg>(r->msg)) ++heartbeats;
    if (std::holds_alternative<ResultMsg>(r->msg) && heartbeats >= 3) ++results_after_ack;
  }
  EXPECT_EQ(results_after_ack, 0);
  EXPECT_EQ(execs[0]->started + execs[1]->started, 1);

  coord.Send(id, DisconnectMsg{"campaign finished", false});
  Join();
  EXPECT_TRUE(run_status_.ok()) << run_status_.ToString();
  const WorkerStats s = w.Stats();
  EXPECT_EQ(s.jobs_received, 1);
  EXPECT_EQ(s.jobs_executed, 1);
  EXPECT_GE(s.results_sent, 2);
  EXPECT_EQ(s.acks, 1);
  EXPECT_TRUE(Logged("campaign finished"));
}

TEST_F(WorkerTest, HeartbeatsContinueWhileAJobRunsAndSlotsRunInParallel) {
  FakeCoordinator coord(ctx_, "inproc://wt-busy");
  Gate gate;
  std::vector<FakeExecutor*> execs;
  Worker& w = Make(Options("inproc://wt-busy"), Executors(&execs, 2, {{"cpu"}}, &gate));
  Start(w);
  auto ready = coord.RecvA<ReadyMsg>();
  ASSERT_TRUE(ready);
  coord.Send(ready->first, Job(1));
  coord.Send(ready->first, Job(2));
  coord.Send(ready->first, Job(3));  // more than the slots: waits in the backlog
  // Both slots start (the gate is closed, so both jobs are running at once).
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (execs[0]->started + execs[1]->started < 2 && std::chrono::steady_clock::now() < end) {
    ASSERT_TRUE(coord.RecvA<HeartbeatMsg>());
  }
  EXPECT_EQ(execs[0]->started, 1);
  EXPECT_EQ(execs[1]->started, 1);
  // While they are stuck, heartbeats keep coming.
  for (int i = 0; i < 5; ++i) {
    auto hb = coord.RecvA<HeartbeatMsg>([](const Received& r) {
      ADD_FAILURE() << "unexpected " << CommandName(CommandOf(r.msg)) << " while jobs run";
    });
    ASSERT_TRUE(hb);
  }
  gate.Open();
  std::set<int> trials;
  while (trials.size() < 3) {
    auto r = coord.RecvA<ResultMsg>();
    ASSERT_TRUE(r);
    trials.insert(std::stoi(r->second.result.generated_text.substr(6)));
    coord.Send(r->first, AckMsg{r->second.result.job_key, 1, AckStatus::kCommitted, ""});
  }
  EXPECT_EQ(trials, (std::set<int>{1, 2, 3}));
  w.Stop();
  // Stop() says goodbye.
  auto bye = coord.RecvA<DisconnectMsg>();
  ASSERT_TRUE(bye);
  EXPECT_FALSE(bye->second.reconnect);
  Join();
  EXPECT_TRUE(run_status_.ok());
}

TEST_F(WorkerTest, ReconnectsAfterSilenceWithHeldAttemptsAndResendsResult) {
  FakeCoordinator coord(ctx_, "inproc://wt-silence");
  Gate gate;
  WorkerOptions o = Options("inproc://wt-silence");
  // Silent for 600 ms -> reconnect. The silence counts from the worker's connect, so the JOB
  // must arrive within it for the next READY to list it: 90 ms was missed under ThreadSanitizer
  // on a loaded machine (the worker came back holding nothing).
  o.heartbeat_liveness = 20;
  Worker& w = Make(o, Executors(nullptr, 1, {{"cpu"}}, &gate));
  Start(w);
  auto ready = coord.RecvA<ReadyMsg>();
  ASSERT_TRUE(ready);
  coord.Send(ready->first, Job(4, 7));
  // We never answer heartbeats: the worker gives up on this connection and comes back with a
  // new READY (new routing identity) that lists the running attempt.
  auto again = coord.RecvA<ReadyMsg>();
  ASSERT_TRUE(again);
  EXPECT_NE(again->first, ready->first);
  ASSERT_EQ(again->second.held.size(), 1u);
  EXPECT_EQ(again->second.held[0], (AttemptRef{Spec(4).Key(), 7}));
  EXPECT_GE(w.Stats().reconnects, 1);
  EXPECT_TRUE(Logged("coordinator silent"));

  // Keep it alive from now on, let the job finish; the result arrives, unACKed it is held.
  std::string id = again->first;
  gate.Open();
  std::optional<std::pair<std::string, ResultMsg>> res;
  while (!res) {
    coord.Send(id, HeartbeatMsg{});
    res = coord.RecvA<ResultMsg>(
        [&](const Received& r) {
          if (std::holds_alternative<ReadyMsg>(r.msg)) id = r.identity;
        },
        20);
  }
  EXPECT_EQ(res->second.result.attempt, 7);
  // Go silent again: the next READY holds the unACKed result's attempt, which is resent.
  auto third = coord.RecvA<ReadyMsg>();
  ASSERT_TRUE(third);
  ASSERT_EQ(third->second.held.size(), 1u);
  EXPECT_EQ(third->second.held[0].attempt, 7);
  // Keep this connection alive until the resent result arrives on it.
  std::string live = third->first;
  bool resent = false;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!resent && std::chrono::steady_clock::now() < end) {
    coord.Send(live, HeartbeatMsg{});
    auto r = coord.Recv(20);
    if (!r) continue;
    if (std::holds_alternative<ReadyMsg>(r->msg)) live = r->identity;
    if (auto* rm = std::get_if<ResultMsg>(&r->msg); rm != nullptr && r->identity == live) {
      EXPECT_EQ(rm->result.attempt, 7);
      resent = true;
    }
  }
  ASSERT_TRUE(resent);
  coord.Send(live, AckMsg{Spec(4).Key(), 7, AckStatus::kCommitted, ""});
  coord.Send(live, DisconnectMsg{"done", false});
  Join();
  EXPECT_TRUE(run_status_.ok());
  EXPECT_EQ(w.Stats().acks, 1);
}

TEST_F(WorkerTest, KeepsReconnectingUntilACoordinatorAppears) {
  // No coordinator on this endpoint for a while: the worker keeps trying (backoff 30, 60, 120,
  // 120 ms ...), and registers as soon as one binds.
  WorkerOptions o = Options("inproc://wt-nobody");
  o.heartbeat_liveness = 2;  // 60 ms
  Worker& w = Make(o, Executors(nullptr, 1, {{"cpu"}}));
  Start(w);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (w.Stats().reconnects < 4 && std::chrono::steady_clock::now() < end) {
    std::this_thread::yield();
  }
  EXPECT_GE(w.Stats().reconnects, 4);
  // Now a coordinator appears and the worker registers with it. (Connections of the earlier,
  // closed sockets may deliver their stale READYs too: answer every READY.)
  FakeCoordinator coord(ctx_, "inproc://wt-nobody");
  int readies = 0;
  const auto end2 = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!returned_ && std::chrono::steady_clock::now() < end2) {
    auto r = coord.Recv(20);
    if (r && std::holds_alternative<ReadyMsg>(r->msg)) {
      ++readies;
      coord.Send(r->identity, DisconnectMsg{"bye", false});
    }
  }
  EXPECT_GE(readies, 1);
  ASSERT_TRUE(returned_);
  Join();
  EXPECT_TRUE(run_status_.ok());
}

TEST_F(WorkerTest, DisconnectWithReconnectMeansRegisterAgain) {
  FakeCoordinator coord(ctx_, "inproc://wt-rereg");
  Worker& w = Make(Options("inproc://wt-rereg"), Executors(nullptr, 1, {{"cpu"}}));
  Start(w);
  auto ready = coord.RecvA<ReadyMsg>();
  ASSERT_TRUE(ready);
  coord.Send(ready->first, DisconnectMsg{"unknown worker", true});
  auto again = coord.RecvA<ReadyMsg>();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->first, ready->first);  // same connection
  coord.Send(ready->first, DisconnectMsg{"bye", false});
  Join();
  EXPECT_TRUE(run_status_.ok());
}

TEST_F(WorkerTest, MalformedAndUnexpectedMessagesAreDroppedAndLogged) {
  FakeCoordinator coord(ctx_, "inproc://wt-bad");
  Worker& w = Make(Options("inproc://wt-bad"), Executors(nullptr, 1, {{"cpu"}}));
  Start(w);
  auto ready = coord.RecvA<ReadyMsg>();
  ASSERT_TRUE(ready);
  zmq::multipart_t bad;
  bad.addstr("");
  bad.addstr("NWW99");
  bad.addstr("\x02");
  bad.addstr("{}");
  coord.SendRaw(ready->first, std::move(bad));
  zmq::multipart_t junk;
  junk.addstr("hello");
  coord.SendRaw(ready->first, std::move(junk));
  // A READY is a worker's command: unexpected from a coordinator.
  coord.Send(ready->first, ReadyMsg{"x", "", 1, {{"backends", {"cpu"}}}, {}});
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (w.Stats().malformed < 3 && std::chrono::steady_clock::now() < end) {
    ASSERT_TRUE(coord.RecvA<HeartbeatMsg>());
  }
  EXPECT_EQ(w.Stats().malformed, 3);
  EXPECT_TRUE(Logged("version frame 'NWW99'"));
  EXPECT_TRUE(Logged("expected 4 frames"));
  EXPECT_TRUE(Logged("unexpected READY"));
  // Still working normally.
  coord.Send(ready->first, Job(2));
  auto res = coord.RecvA<ResultMsg>();
  ASSERT_TRUE(res);
  coord.Send(ready->first, DisconnectMsg{"bye", false});
  Join();
  EXPECT_TRUE(run_status_.ok());
}

}  // namespace
}  // namespace nw

namespace nw {
namespace {

// Drain() (SIGTERM under Slurm): READY again with "draining" and without the queued job, the
// running job finishes and is acknowledged, a JOB granted meanwhile is handed back, then
// DISCONNECT and Run() returns.
TEST_F(WorkerTest, DrainHandsBackQueuedJobsFinishesTheRunningOneAndLeaves) {
  FakeCoordinator coord(ctx_, "inproc://wt-drain");
  Gate gate;
  std::vector<FakeExecutor*> execs;
  WorkerOptions o = Options("inproc://wt-drain");
  o.drain_grace_ms = 30'000;
  Worker& w = Make(o, Executors(&execs, 1, {{"cpu"}}, &gate));
  Start(w);
  auto ready = coord.RecvA<ReadyMsg>();
  ASSERT_TRUE(ready);
  const std::string id = ready->first;
  coord.Send(id, Job(1));
  coord.Send(id, Job(2));  // queued behind the running one
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (execs[0]->started < 1 && std::chrono::steady_clock::now() < end) {
    ASSERT_TRUE(coord.RecvA<HeartbeatMsg>());
  }
  w.Drain();
  auto again = coord.RecvA<ReadyMsg>();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->second.capabilities["draining"], true);
  ASSERT_EQ(again->second.held.size(), 1u);  // the running job only: job 2 is handed back
  EXPECT_EQ(again->second.held[0].job_key, Spec(1).Key());
  coord.Send(id, Job(3));  // granted before the coordinator read the READY: handed back too
  auto third = coord.RecvA<ReadyMsg>();
  ASSERT_TRUE(third);
  EXPECT_EQ(third->second.held.size(), 1u);
  gate.Open();
  auto res = coord.RecvA<ResultMsg>();
  ASSERT_TRUE(res);
  EXPECT_EQ(res->second.result.job_key, Spec(1).Key());
  EXPECT_FALSE(returned_);  // waits for the ACK
  coord.Send(id, AckMsg{Spec(1).Key(), 1, AckStatus::kCommitted, ""});
  auto bye = coord.RecvA<DisconnectMsg>();
  ASSERT_TRUE(bye);
  EXPECT_FALSE(bye->second.reconnect);
  EXPECT_EQ(bye->second.reason, "worker drained");
  Join();
  EXPECT_TRUE(run_status_.ok());
  const WorkerStats s = w.Stats();
  EXPECT_TRUE(s.drained);
  EXPECT_EQ(s.jobs_executed, 1);
  EXPECT_EQ(s.handed_back, 2);
  EXPECT_EQ(execs[0]->started, 1);
}

// A job still running when the drain grace ends is handed back (DISCONNECT names it).
TEST_F(WorkerTest, DrainGraceOverHandsBackTheRunningJob) {
  FakeCoordinator coord(ctx_, "inproc://wt-drain-grace");
  Gate gate;
  std::vector<FakeExecutor*> execs;
  WorkerOptions o = Options("inproc://wt-drain-grace");
  o.drain_grace_ms = 200;
  Worker& w = Make(o, Executors(&execs, 1, {{"cpu"}}, &gate));
  Start(w);
  auto ready = coord.RecvA<ReadyMsg>();
  ASSERT_TRUE(ready);
  coord.Send(ready->first, Job(1));
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (execs[0]->started < 1 && std::chrono::steady_clock::now() < end) {
    ASSERT_TRUE(coord.RecvA<HeartbeatMsg>());
  }
  w.Drain();
  auto bye = coord.RecvA<DisconnectMsg>();
  ASSERT_TRUE(bye);
  EXPECT_NE(bye->second.reason.find("1 running jobs handed back"), std::string::npos)
      << bye->second.reason;
  gate.Open();  // Run() returns once the engine lets go
  Join();
  EXPECT_TRUE(run_status_.ok());
  EXPECT_EQ(w.Stats().handed_back, 1);
}

// idle_exit_ms: a connected worker with nothing to do leaves; work resets the clock.
TEST_F(WorkerTest, IdleExitLeavesAfterNothingToDo) {
  FakeCoordinator coord(ctx_, "inproc://wt-idle");
  WorkerOptions o = Options("inproc://wt-idle");
  o.idle_exit_ms = 300;
  Worker& w = Make(o, Executors(nullptr, 1, {{"cpu"}}));
  Start(w);
  auto ready = coord.RecvA<ReadyMsg>();
  ASSERT_TRUE(ready);
  coord.Send(ready->first, HeartbeatMsg{});
  coord.Send(ready->first, Job(1));
  auto res = coord.RecvA<ResultMsg>();
  ASSERT_TRUE(res);
  coord.Send(ready->first, AckMsg{Spec(1).Key(), 1, AckStatus::kCommitted, ""});
  const auto acked = std::chrono::steady_clock::now();
  auto bye = coord.RecvA<DisconnectMsg>();
  ASSERT_TRUE(bye);
  EXPECT_GE(std::chrono::steady_clock::now() - acked, std::chrono::milliseconds(250));
  EXPECT_NE(bye->second.reason.find("idle"), std::string::npos);
  Join();
  EXPECT_TRUE(run_status_.ok());
  EXPECT_TRUE(w.Stats().idle_exit);
}

}  // namespace
}  // namespace nw
