// The coordinator daemon (Server::Serve) in one process: control requests over a REQ socket
// (submit in parts, status, pause, resume, cancel, malformed requests), several campaigns with
// priorities served to real Workers, restart recovery with orphan leases adopted by a worker
// that held them, and CURVE with an allow-list. Waiting is by polling with deadlines.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/control_client.h"
#include "coordinator/curve.h"
#include "coordinator/server.h"
#include "db/campaign_table.h"
#include "protocol/zmq_handoff.h"
#include "worker/worker.h"

namespace nw {
namespace {

using json = nlohmann::json;
constexpr int64_t kDeadlineMs = 20'000;

JobSpec Spec(int trial, int64_t length = 256) {
  JobSpec s;
  s.model_dir = "/models/tiny";
  s.model_digest = std::string(64, 'd');  // a sha256 in hex, as CheckJobSpec wants
  s.engine_version = "nw-test";
  s.task = "niah-single";
  s.haystack = "noise";
  s.context_length = length;
  s.needle_position = 0.5;
  s.topk = 8;
  s.backend = "cpu";
  s.seed = 7;
  s.trial = trial;
  return s;
}

std::vector<JobSpec> Specs(int n, int64_t length) {
  std::vector<JobSpec> v;
  for (int i = 0; i < n; ++i) v.push_back(Spec(i, length));
  return v;
}

bool WaitUntil(const std::function<bool()>& pred, int64_t timeout_ms = kDeadlineMs) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

// Answers every job, recording which campaign length (context_length) it ran, in order.
class RecordingExecutor : public JobExecutor {
 public:
  RecordingExecutor(std::mutex& mu, std::vector<int64_t>& order) : mu_(mu), order_(order) {}
  JobResult Execute(const JobSpec& spec, const std::string& key, int attempt) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      order_.push_back(spec.context_length);
    }
    JobResult r;
    r.job_key = key;
    r.attempt = attempt;
    r.outcome = Outcome::kPass;
    r.device = "fake";
    return r;
  }
  json Capabilities() const override { return json{{"backends", {"cpu"}}, {"device", "fake"}}; }

 private:
  std::mutex& mu_;
  std::vector<int64_t>& order_;
};

// An executor that holds its job until released (a straggler).
class GateExecutor : public JobExecutor {
 public:
  JobResult Execute(const JobSpec&, const std::string& key, int attempt) override {
    std::unique_lock<std::mutex> l(mu_);
    started_ = true;
    cv_.notify_all();
    cv_.wait(l, [&] { return open_; });
    JobResult r;
    r.job_key = key;
    r.attempt = attempt;
    r.outcome = Outcome::kMiss;
    r.device = "gate";
    return r;
  }
  json Capabilities() const override { return json{{"backends", {"cpu"}}, {"device", "gate"}}; }
  bool WaitStarted() {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::milliseconds(kDeadlineMs), [&] { return started_; });
  }
  void Open() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;
  bool open_ = false;
};

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = std::filesystem::temp_directory_path() /
           ("nw-daemon-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(dir_);
    auto s = Store::Open(dir_ / "nw.db");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    endpoint_ = "inproc://daemon-test-" + std::to_string(rd());
  }
  void TearDown() override {
    (void)StopServer();
    // A worker's Run() joins its slots, and a slot holding a gated job runs until the gate opens:
    // a test that failed before opening its gate would otherwise hang here instead of failing.
    for (GateExecutor* g : gates_) g->Open();
    StopWorkers();
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  ServerOptions Options() {
    ServerOptions so;
    so.endpoint = endpoint_;
    so.scheduler.heartbeat_interval_ms = 50;
    so.scheduler.lease_ms = 60'000;
    so.scheduler.retry_backoff_initial_ms = 20;
    so.scheduler.retry_backoff_max_ms = 100;
    so.scheduler.orphan_grace_ms = 5'000;
    so.result_batch_ms = 10;
    so.log = [this](std::string_view line) {
      std::lock_guard<std::mutex> l(log_mu_);
      log_ += std::string(line) + "\n";
    };
    return so;
  }
  void StartServer(ServerOptions so) {
    server_ = std::make_unique<Server>(ctx_, *store_, clock_, std::move(so));
    server_thread_ = std::thread([this] { server_result_ = server_->Serve(); });
  }
  Result<RunSummary> StopServer() {
    if (!server_) return Status::Internal("no server");
    server_->Stop();
    if (server_thread_.joinable()) server_thread_.join();
    server_.reset();
    return server_result_;
  }
  Worker& StartWorker(const std::string& id, int slots, WorkerOptions wo = {}) {
    wo.endpoint = endpoint_;
    wo.worker_id = id;
    wo.heartbeat_interval_ms = 50;
    std::vector<std::unique_ptr<JobExecutor>> ex;
    for (int i = 0; i < slots; ++i) ex.push_back(std::make_unique<RecordingExecutor>(mu_, order_));
    workers_.push_back(std::make_unique<Worker>(ctx_, clock_, wo, std::move(ex)));
    Worker& w = *workers_.back();
    worker_threads_.emplace_back([&w] {
      const Status st = w.Run();
      EXPECT_TRUE(st.ok()) << st.ToString();
    });
    return w;
  }
  // A worker with one slot that holds its job until the returned gate opens (TearDown opens it).
  GateExecutor& StartGatedWorker(const std::string& id) {
    WorkerOptions wo;
    wo.endpoint = endpoint_;
    wo.worker_id = id;
    wo.heartbeat_interval_ms = 50;
    auto gate = std::make_unique<GateExecutor>();
    GateExecutor& g = *gate;
    gates_.push_back(&g);
    std::vector<std::unique_ptr<JobExecutor>> ex;
    ex.push_back(std::move(gate));
    workers_.push_back(std::make_unique<Worker>(ctx_, clock_, wo, std::move(ex)));
    Worker& w = *workers_.back();
    worker_threads_.emplace_back([&w] { EXPECT_TRUE(w.Run().ok()); });
    return g;
  }
  void StopWorkers() {
    for (auto& w : workers_) w->Stop();
    for (auto& t : worker_threads_) {
      if (t.joinable()) t.join();
    }
    workers_.clear();
    worker_threads_.clear();
    gates_.clear();
  }
  ControlClient Client(ControlClientOptions o = {}) {
    o.endpoint = endpoint_;
    o.timeout_ms = 2000;
    return ControlClient(ctx_, o);
  }
  Submission Campaign(const std::string& name, int jobs, int64_t length, int priority = 0) {
    Submission s;
    s.campaign = name;
    s.source_path = name + ".yaml";
    s.source_text = "name: " + name + "\n";
    s.priority = priority;
    s.jobs = Specs(jobs, length);
    return s;
  }
  CampaignStatus StatusOf(ControlClient& c, const std::string& name) {
    auto st = c.QueryStatus(name);
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    return st.ok() && !st->campaigns.empty() ? st->campaigns[0] : CampaignStatus{};
  }
  std::string Log() {
    std::lock_guard<std::mutex> l(log_mu_);
    return log_;
  }

  std::filesystem::path dir_;
  std::unique_ptr<Store> store_;
  std::string endpoint_;
  SystemClock clock_;
  zmq::context_t ctx_;
  std::unique_ptr<Server> server_;
  std::thread server_thread_;
  Result<RunSummary> server_result_ = Status::Internal("not run");
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> worker_threads_;
  std::vector<GateExecutor*> gates_;  // owned by workers_' executors
  std::mutex mu_;
  std::vector<int64_t> order_;  // context_length of every executed job, in order
  std::mutex log_mu_;
  std::string log_;
};

TEST_F(DaemonTest, SubmitStatusAndTwoCampaignsByPriority) {
  StartServer(Options());
  ControlClient c = Client();
  // Nothing submitted yet.
  auto empty = c.QueryStatus("");
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_TRUE(empty->campaigns.empty());
  EXPECT_EQ(c.QueryStatus("nope").status().code(), StatusCode::kNotFound);

  auto low = c.Submit(Campaign("low", 30, 100, /*priority=*/0));
  ASSERT_TRUE(low.ok()) << low.status().ToString();
  EXPECT_TRUE(low->complete);
  EXPECT_EQ(low->jobs, 30);
  EXPECT_EQ(low->queued, 30);
  auto high = c.Submit(Campaign("high", 30, 200, /*priority=*/5));
  ASSERT_TRUE(high.ok()) << high.status().ToString();
  EXPECT_EQ(StatusOf(c, "high").priority, 5);
  EXPECT_EQ(StatusOf(c, "low").state, "active");

  // One single-slot worker: every job of the high-priority campaign runs before any low one.
  StartWorker("w1", 1);
  ASSERT_TRUE(WaitUntil([&] { return StatusOf(c, "low").done == 30; })) << Log();
  ASSERT_TRUE(WaitUntil([&] { return StatusOf(c, "low").state == "finished"; }));
  EXPECT_EQ(StatusOf(c, "high").done, 30);
  {
    std::lock_guard<std::mutex> l(mu_);
    ASSERT_EQ(order_.size(), 60u);
    for (size_t i = 0; i < 30; ++i) EXPECT_EQ(order_[i], 200) << i;
  }
  auto all = c.QueryStatus("");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->campaigns.size(), 2u);
  ASSERT_EQ(all->workers.size(), 1u);
  EXPECT_EQ(all->workers[0].id, "w1");
  EXPECT_EQ(all->workers[0].device, "fake");

  // Submitting again finds everything done: nothing to run.
  auto again = c.Submit(Campaign("low", 30, 100));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->already_done, 30);
  EXPECT_EQ(again->queued, 0);
  auto summary = StopServer();
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_TRUE(summary->stopped);
  EXPECT_EQ(summary->committed, 60);
  EXPECT_GE(summary->control_requests, 8);
}

TEST_F(DaemonTest, EqualPrioritiesShareTheWorkers) {
  StartServer(Options());
  ControlClient c = Client();
  ASSERT_TRUE(c.Submit(Campaign("a", 40, 100)).ok());
  ASSERT_TRUE(c.Submit(Campaign("b", 40, 200)).ok());
  StartWorker("w1", 1);
  ASSERT_TRUE(WaitUntil([&] {
    std::lock_guard<std::mutex> l(mu_);
    return order_.size() >= 20;
  }));
  std::lock_guard<std::mutex> l(mu_);
  int a = 0;
  for (size_t i = 0; i < 20; ++i) a += order_[i] == 100 ? 1 : 0;
  // Fair share: the first twenty jobs alternate between the campaigns.
  EXPECT_GE(a, 9);
  EXPECT_LE(a, 11);
}

TEST_F(DaemonTest, PauseResumeAndCancel) {
  StartServer(Options());
  ControlClient c = Client();
  ASSERT_TRUE(c.Submit(Campaign("p", 20, 100)).ok());
  auto paused = c.Op(CampaignOp::kPause, "p");
  ASSERT_TRUE(paused.ok()) << paused.status().ToString();
  EXPECT_EQ(paused->state, "paused");
  StartWorker("w1", 2);
  ASSERT_TRUE(WaitUntil([&] { return c.QueryStatus("").value().workers.size() == 1; }));
  // Paused: the registered worker gets nothing (checked over several heartbeats).
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(300)) {
    ASSERT_EQ(StatusOf(c, "p").leased + StatusOf(c, "p").done, 0);
  }
  EXPECT_EQ(StatusOf(c, "p").state, "paused");
  ASSERT_TRUE(c.Op(CampaignOp::kResume, "p").ok());
  ASSERT_TRUE(WaitUntil([&] { return StatusOf(c, "p").done == 20; })) << Log();

  // Cancel: a campaign whose worker has gone keeps its jobs queued in the database, out of the
  // schedule.
  StopWorkers();
  ASSERT_TRUE(c.Submit(Campaign("q", 10, 300)).ok());
  auto cancelled = c.Op(CampaignOp::kCancel, "q");
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  EXPECT_EQ(cancelled->state, "cancelled");
  EXPECT_EQ(cancelled->queued_removed, 10);
  EXPECT_EQ(StatusOf(c, "q").state, "cancelled");
  EXPECT_EQ(StatusOf(c, "q").queued, 10);
  EXPECT_EQ(c.Op(CampaignOp::kResume, "q").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.Op(CampaignOp::kPause, "nope").status().code(), StatusCode::kNotFound);
  StartWorker("w2", 2);
  ASSERT_TRUE(WaitUntil([&] { return c.QueryStatus("").value().workers.size() == 1; }));
  EXPECT_EQ(StatusOf(c, "q").done, 0);
  // Submitting it again brings it back.
  ASSERT_TRUE(c.Submit(Campaign("q", 10, 300)).ok());
  ASSERT_TRUE(WaitUntil([&] { return StatusOf(c, "q").done == 10; })) << Log();
  EXPECT_EQ(StatusOf(c, "q").state, "finished");
}

TEST_F(DaemonTest, SubmissionPartsAreStagedInOrderAndRetriesAreIdempotent) {
  StartServer(Options());
  ControlClient c = Client();
  SubmitRequest r;
  r.campaign = "parts";
  r.submission = "s1";
  r.parts = 3;
  r.total_jobs = 5;
  auto part = [&](int p, std::vector<JobSpec> jobs) {
    SubmitRequest x = r;
    x.part = p;
    x.jobs = std::move(jobs);
    return c.Call(x, 2000);
  };
  auto reply = part(1, {Spec(0)});  // no part 0 yet
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(std::get<ErrorReply>(*reply).code, StatusCode::kFailedPrecondition);
  reply = part(0, {Spec(0), Spec(1)});
  ASSERT_TRUE(reply.ok());
  EXPECT_FALSE(std::get<SubmitReply>(*reply).complete);
  reply = part(0, {Spec(0), Spec(1)});  // a retry of the part it has
  ASSERT_TRUE(reply.ok());
  EXPECT_FALSE(std::get<SubmitReply>(*reply).complete);
  reply = part(1, {Spec(2), Spec(3)});
  ASSERT_TRUE(reply.ok());
  reply = part(2, {Spec(4)});
  ASSERT_TRUE(reply.ok());
  const auto done = std::get<SubmitReply>(*reply);
  EXPECT_TRUE(done.complete);
  EXPECT_EQ(done.jobs, 5);
  reply = part(2, {Spec(4)});  // the client never saw the answer: the same answer again
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(std::get<SubmitReply>(*reply).campaign_id, done.campaign_id);
  EXPECT_EQ(StatusOf(c, "parts").total, 5);

  // A submission whose parts disagree, or that says more jobs than it brings, is refused.
  r.submission = "s2";
  r.total_jobs = 1;
  r.parts = 1;
  reply = part(0, {Spec(0), Spec(1)});
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(std::get<ErrorReply>(*reply).code, StatusCode::kInvalidArgument);
  r.submission = "s3";
  r.total_jobs = 3;
  reply = part(0, {Spec(0)});
  ASSERT_TRUE(reply.ok());
  EXPECT_NE(std::get<ErrorReply>(*reply).message.find("total_jobs says 3"), std::string::npos);
}

TEST_F(DaemonTest, LargeCampaignTravelsInParts) {
  StartServer(Options());
  // A part of 4,096 jobs takes the loop seconds to decode under ThreadSanitizer on a loaded
  // machine, more than Client()'s 2 s per try; this test is about the parts, not the time.
  ControlClientOptions o;
  o.endpoint = endpoint_;
  o.timeout_ms = 60'000;
  ControlClient c(ctx_, o);
  Submission s = Campaign("big", static_cast<int>(kMaxJobsPerSubmitPart) * 2 + 10, 100);
  int parts = 0;
  auto reply = c.Submit(s, [&](int sent, int total) {
    parts = total;
    EXPECT_LE(sent, total);
  });
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(parts, 3);
  EXPECT_EQ(reply->jobs, static_cast<int64_t>(s.jobs.size()));
  EXPECT_EQ(StatusOf(c, "big").queued, static_cast<int64_t>(s.jobs.size()));
}

TEST_F(DaemonTest, MalformedControlRequestsGetAnErrorAndTheServerGoesOn) {
  StartServer(Options());
  zmq::socket_t req(ctx_, zmq::socket_type::req);
  req.set(zmq::sockopt::linger, 0);
  req.connect(endpoint_);
  auto ask = [&](zmq::multipart_t m) -> Result<ControlReply> {
    if (!SendFrames(m, req)) return Status::Internal("send");
    std::vector<zmq_pollitem_t> items = {{req.handle(), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, std::chrono::milliseconds(kDeadlineMs));
    zmq::multipart_t in;
    if (!RecvFrames(in, req, ZMQ_DONTWAIT)) return Status::DeadlineExceeded("no reply");
    return DecodeControlReply(in);
  };
  zmq::multipart_t bad_json;
  bad_json.addstr("NWC01");
  bad_json.addmem("\x42", 1);
  bad_json.addstr("{oops");
  auto r1 = ask(std::move(bad_json));
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  EXPECT_EQ(std::get<ErrorReply>(*r1).code, StatusCode::kInvalidArgument);
  EXPECT_NE(std::get<ErrorReply>(*r1).message.find("STATUS: payload is not valid JSON"),
            std::string::npos);
  zmq::multipart_t extra_frame;
  extra_frame.addstr("NWC01");
  extra_frame.addmem("\x42", 1);
  extra_frame.addstr("{}");
  extra_frame.addstr("{}");
  auto r2 = ask(std::move(extra_frame));
  ASSERT_TRUE(r2.ok());
  EXPECT_NE(std::get<ErrorReply>(*r2).message.find("expected 3 frames"), std::string::npos);
  // Still serving.
  ControlClient c = Client();
  ASSERT_TRUE(c.Submit(Campaign("after", 2, 100)).ok());
  auto summary = StopServer();
  ASSERT_TRUE(summary.ok());
  EXPECT_EQ(summary->malformed_messages, 2);
}

TEST_F(DaemonTest, EmbeddedRunAnswersControlRequestsWithAnError) {
  auto id = store_->UpsertCampaign("embedded", "e.yaml", "", 1);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(store_->AddJobs(*id, Specs(1, 100), 1).ok());
  ServerOptions so = Options();
  server_ = std::make_unique<Server>(ctx_, *store_, clock_, so);
  server_thread_ = std::thread([this, cid = *id] { server_result_ = server_->Run(cid); });
  ControlClient c = Client();
  EXPECT_EQ(c.QueryStatus("").status().code(), StatusCode::kFailedPrecondition);
  StartWorker("w", 1);
  server_thread_.join();
  ASSERT_TRUE(server_result_.ok());
  EXPECT_EQ(server_result_->done, 1);
  server_.reset();
}

// A raw DEALER that plays a worker across a coordinator restart.
class RawWorker {
 public:
  RawWorker(zmq::context_t& ctx, const std::string& ep) : s_(ctx, zmq::socket_type::dealer) {
    s_.set(zmq::sockopt::linger, 0);
    s_.connect(ep);
  }
  void Send(const Message& m) {
    auto f = Encode(m);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(SendFrames(*f, s_, ZMQ_DONTWAIT));
  }
  // The first message of type T (others stay buffered for later Awaits).
  template <typename T>
  std::optional<T> Await() {
    std::vector<zmq_pollitem_t> items = {{s_.handle(), 0, ZMQ_POLLIN, 0}};
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(kDeadlineMs);
    while (true) {
      for (auto it = inbox_.begin(); it != inbox_.end(); ++it) {
        if (auto* t = std::get_if<T>(&*it)) {
          T out = *t;
          inbox_.erase(it);
          return out;
        }
      }
      if (std::chrono::steady_clock::now() >= end) return std::nullopt;
      Send(HeartbeatMsg{});
      zmq::poll(items, std::chrono::milliseconds(20));
      zmq::multipart_t f;
      while (RecvFrames(f, s_, ZMQ_DONTWAIT)) {
        auto m = Decode(f);
        if (m.ok() && !std::holds_alternative<HeartbeatMsg>(*m)) inbox_.push_back(std::move(*m));
      }
    }
  }

 private:
  zmq::socket_t s_;
  std::vector<Message> inbox_;
};

TEST_F(DaemonTest, RestartKeepsTheLeaseOfAWorkerThatHoldsItAndCommitsItsResult) {
  // ipc:// (unlike inproc://) reconnects by itself when the coordinator binds again.
  endpoint_ = "ipc://" + (dir_ / "restart.sock").string();
  StartServer(Options());
  {
    ControlClient c = Client();
    ASSERT_TRUE(c.Submit(Campaign("r", 2, 100)).ok());
  }
  RawWorker w(ctx_, endpoint_);
  w.Send(ReadyMsg{"survivor", "h", 1, {{"backends", {"cpu"}}}, {}});
  auto job = w.Await<JobMsg>();
  ASSERT_TRUE(job);
  // The coordinator goes away while the worker runs the job.
  ASSERT_TRUE(StopServer().ok());
  StartServer(Options());
  // The worker's next message is from an unknown connection: it is asked to register again,
  // and does, holding the attempt; then it delivers the result.
  auto d = w.Await<DisconnectMsg>();
  ASSERT_TRUE(d);
  EXPECT_TRUE(d->reconnect);
  w.Send(ReadyMsg{"survivor", "h", 1, {{"backends", {"cpu"}}}, {{job->job_key, job->attempt}}});
  JobResult r;
  r.job_key = job->job_key;
  r.attempt = job->attempt;
  r.outcome = Outcome::kPass;
  w.Send(ResultMsg{r});
  auto ack = w.Await<AckMsg>();
  ASSERT_TRUE(ack);
  EXPECT_EQ(ack->status, AckStatus::kCommitted) << ack->reason;
  // The other job is granted to it too, with a new attempt number.
  auto next = w.Await<JobMsg>();
  ASSERT_TRUE(next);
  EXPECT_NE(next->job_key, job->job_key);
  auto summary = StopServer();
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->orphans_adopted, 1);
  auto attempts = store_->Attempts(job->job_key);
  ASSERT_TRUE(attempts.ok());
  ASSERT_EQ(attempts->size(), 1u);  // not redone
  EXPECT_EQ((*attempts)[0].status, "ok");
  EXPECT_NE(Log().find("took back 1 leases"), std::string::npos) << Log();
}

TEST_F(DaemonTest, RestartClosesLeasesOfCancelledCampaigns) {
  endpoint_ = "ipc://" + (dir_ / "cancelled.sock").string();
  StartServer(Options());
  {
    ControlClient c = Client();
    ASSERT_TRUE(c.Submit(Campaign("x", 1, 100)).ok());
  }
  RawWorker w(ctx_, endpoint_);
  w.Send(ReadyMsg{"holder", "h", 1, {{"backends", {"cpu"}}}, {}});
  auto job = w.Await<JobMsg>();
  ASSERT_TRUE(job);
  {
    ControlClient c = Client();
    ASSERT_TRUE(c.Op(CampaignOp::kCancel, "x").ok());
  }
  ASSERT_TRUE(StopServer().ok());
  // Still leased in the database; the restarted daemon closes it (nobody wants the result).
  ASSERT_EQ(store_->FindJob(job->job_key).value()->state, JobState::kLeased);
  StartServer(Options());
  {
    ControlClient c = Client();
    ASSERT_EQ(StatusOf(c, "x").state, "cancelled");
  }
  ASSERT_TRUE(StopServer().ok());
  EXPECT_EQ(store_->FindJob(job->job_key).value()->state, JobState::kQueued);
  auto attempts = store_->Attempts(job->job_key);
  ASSERT_TRUE(attempts.ok());
  ASSERT_EQ(attempts->size(), 1u);
  EXPECT_EQ((*attempts)[0].status, "failed");
  EXPECT_EQ((*attempts)[0].error_code, "cancelled");
}

TEST_F(DaemonTest, AStragglerAtTheTailIsHedgedAndTheFirstResultWins) {
  ServerOptions so = Options();
  so.scheduler.hedge_after_ms = 300;
  StartServer(so);
  ControlClient c = Client();
  ASSERT_TRUE(c.Submit(Campaign("tail", 10, 100)).ok());
  // The straggler registers first and takes one job, which it holds.
  GateExecutor& gate = StartGatedWorker("straggler");
  Worker& straggler = *workers_.back();
  ASSERT_TRUE(gate.WaitStarted());
  // A fast worker does the rest, then runs the straggler's job a second time.
  StartWorker("fast", 1);
  ASSERT_TRUE(WaitUntil([&] { return StatusOf(c, "tail").done == 10; })) << Log();
  EXPECT_NE(Log().find("hedging job"), std::string::npos) << Log();
  // The straggler's answer arrives late: rejected (the finished campaign has left the
  // scheduler by then), nothing written.
  gate.Open();
  ASSERT_TRUE(WaitUntil([&] { return straggler.Stats().acks == 1; })) << Log();
  EXPECT_NE(Log().find("coordinator: rejected"), std::string::npos) << Log();
  auto summary = StopServer();
  ASSERT_TRUE(summary.ok());
  EXPECT_EQ(summary->hedged, 1);
  EXPECT_EQ(summary->committed, 10);
  auto id = store_->FindCampaign("tail");
  ASSERT_TRUE(id.ok() && id->has_value());
  auto results = store_->Results((*id)->id);
  ASSERT_TRUE(results.ok());
  ASSERT_EQ(results->size(), 10u);
  int hedged_jobs = 0;
  for (const auto& r : *results) {
    EXPECT_EQ(r.worker_id, "fast");
    auto attempts = store_->Attempts(r.job_key);
    ASSERT_TRUE(attempts.ok());
    if (attempts->size() == 2) {
      ++hedged_jobs;
      EXPECT_EQ((*attempts)[0].worker_id, "straggler");
      EXPECT_EQ((*attempts)[0].status, "stale");
      EXPECT_EQ((*attempts)[1].status, "ok");
      EXPECT_EQ(r.attempt, 2);
    }
  }
  EXPECT_EQ(hedged_jobs, 1);
}

// Issue 19: a worker that takes a job and never finishes it (while it heartbeats) can fail it
// through lease expiry, but not for good: submitting the campaign again, without --rerun, runs
// that job again and leaves finished ones alone.
TEST_F(DaemonTest, JobsFailedOnlyThroughExpiredLeasesRunAgainOnResubmit) {
  ServerOptions so = Options();
  so.scheduler.lease_ms = 300;
  so.scheduler.max_attempts = 1;
  StartServer(so);
  ControlClient c = Client();
  ASSERT_TRUE(c.Submit(Campaign("expire", 1, 100)).ok());
  GateExecutor& gate = StartGatedWorker("hoarder");
  ASSERT_TRUE(gate.WaitStarted());
  ASSERT_TRUE(WaitUntil([&] { return StatusOf(c, "expire").failed == 1; })) << Log();
  gate.Open();
  StopWorkers();
  // A second campaign shares nothing; the first is submitted again, as is.
  StartWorker("fast", 1);
  ASSERT_TRUE(c.Submit(Campaign("other", 2, 200)).ok());
  ASSERT_TRUE(WaitUntil([&] { return StatusOf(c, "other").done == 2; })) << Log();
  auto again = c.Submit(Campaign("expire", 1, 100));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->queued, 1);
  ASSERT_TRUE(WaitUntil([&] { return StatusOf(c, "expire").done == 1; })) << Log();
  EXPECT_EQ(StatusOf(c, "expire").failed, 0);
  auto other = c.Submit(Campaign("other", 2, 200));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->already_done, 2);
  EXPECT_EQ(other->queued, 0);
}

TEST_F(DaemonTest, CurveAdmitsKeysOnTheAllowListOnly) {
  auto server_keys = GenerateCurveKeyPair();
  auto worker_keys = GenerateCurveKeyPair();
  auto client_keys = GenerateCurveKeyPair();
  auto stranger = GenerateCurveKeyPair();
  ASSERT_TRUE(server_keys.ok() && worker_keys.ok() && client_keys.ok() && stranger.ok());
  // CURVE needs a real transport (not inproc).
  endpoint_ = "ipc://" + (dir_ / "curve.sock").string();
  ServerOptions so = Options();
  so.curve = *server_keys;
  so.curve_allow = {worker_keys->public_key, client_keys->public_key};
  StartServer(so);

  ControlClientOptions ok_client;
  ok_client.curve_server_key = server_keys->public_key;
  ok_client.curve_public_key = client_keys->public_key;
  ok_client.curve_secret_key = client_keys->secret_key;
  ControlClient c = Client(ok_client);
  ASSERT_TRUE(c.Submit(Campaign("secure", 5, 100)).ok());

  // A stranger's key, and no key at all, get no answer.
  ControlClientOptions bad = ok_client;
  bad.curve_public_key = stranger->public_key;
  bad.curve_secret_key = stranger->secret_key;
  bad.tries = 1;
  ControlClientOptions plain;
  plain.tries = 1;
  for (auto o : {bad, plain}) {
    o.endpoint = endpoint_;
    o.timeout_ms = 300;
    ControlClient denied(ctx_, o);
    EXPECT_EQ(denied.QueryStatus("").status().code(), StatusCode::kUnavailable);
  }
  ASSERT_TRUE(WaitUntil([&] { return Log().find("denied CURVE client") != std::string::npos; }));

  WorkerOptions wo;
  wo.curve_server_key = server_keys->public_key;
  wo.curve_public_key = worker_keys->public_key;
  wo.curve_secret_key = worker_keys->secret_key;
  StartWorker("trusted", 2, wo);
  ASSERT_TRUE(WaitUntil([&] { return StatusOf(c, "secure").done == 5; })) << Log();
}

// Issue 19: the daemon checks every submitted job as `nw validate` checks the jobs a campaign
// expands to (CheckJobSpec), and refuses the submission with the job and the reason.
TEST_F(DaemonTest, SubmittedJobsAreCheckedAsValidateChecksThem) {
  ServerOptions so = Options();
  so.job_check.model_roots = {"/models"};
  StartServer(so);
  ControlClient c = Client();
  struct Case {
    std::function<void(JobSpec&)> edit;
    std::string want;
  };
  const std::vector<Case> cases = {
      {[](JobSpec& j) { j.topk = 0; }, "job.topk: 0 is outside 1..1048576"},
      {[](JobSpec& j) { j.context_length = int64_t{1} << 40; }, "job.context_length"},
      {[](JobSpec& j) { j.task = "niah-everything"; }, "job.task: unknown task"},
      {[](JobSpec& j) { j.backend = "quantum"; }, "job.backend: unknown backend 'quantum'"},
      {[](JobSpec& j) { j.model_dir = "/etc/../models/tiny"; }, "job.model_dir"},
      {[](JobSpec& j) { j.model_dir = "/home/eve/models"; }, "outside the allowed model roots"},
      {[](JobSpec& j) { j.model_dir = "models/tiny"; }, "not an absolute path"},
      {[](JobSpec& j) { j.needle_position = 7; }, "job.needle_position"},
      {[](JobSpec& j) { j.max_new_tokens = 100000; }, "job.max_new_tokens"},
      {[](JobSpec& j) { j.model_digest = "digest"; }, "job.model_digest"},
  };
  for (const Case& k : cases) {
    Submission sub = Campaign("bad", 3, 100);
    k.edit(sub.jobs[2]);
    auto reply = c.Submit(sub);
    ASSERT_FALSE(reply.ok()) << k.want;
    EXPECT_EQ(reply.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(reply.status().message().find("job 2 refused: " + std::string()), std::string::npos)
        << reply.status().message();
    EXPECT_NE(reply.status().message().find(k.want), std::string::npos) << reply.status().message();
  }
  // Nothing of the refused campaign was written; a good one goes through.
  EXPECT_EQ(c.QueryStatus("bad").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(c.Submit(Campaign("good", 3, 100)).ok());
}

// Issue 19: role-scoped CURVE keys: a key allowed to work cannot submit, and a key allowed to
// submit cannot work.
TEST_F(DaemonTest, RoleScopedKeys) {
  auto server_keys = GenerateCurveKeyPair();
  auto worker_keys = GenerateCurveKeyPair();
  auto client_keys = GenerateCurveKeyPair();
  ASSERT_TRUE(server_keys.ok() && worker_keys.ok() && client_keys.ok());
  endpoint_ = "ipc://" + (dir_ / "roles.sock").string();
  ServerOptions so = Options();
  so.curve = *server_keys;
  so.curve_allow_work = {worker_keys->public_key};
  so.curve_allow_submit = {client_keys->public_key};
  StartServer(so);

  ControlClientOptions submitter;
  submitter.curve_server_key = server_keys->public_key;
  submitter.curve_public_key = client_keys->public_key;
  submitter.curve_secret_key = client_keys->secret_key;
  ControlClient c = Client(submitter);
  ASSERT_TRUE(c.Submit(Campaign("roles", 4, 100)).ok());

  // The worker's key may not submit.
  ControlClientOptions as_worker = submitter;
  as_worker.curve_public_key = worker_keys->public_key;
  as_worker.curve_secret_key = worker_keys->secret_key;
  ControlClient wc = Client(as_worker);
  auto refused = wc.Submit(Campaign("sneaky", 2, 200));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("not on the submit allow-list"), std::string::npos)
      << refused.status().message();
  EXPECT_FALSE(wc.QueryStatus("").ok());

  // The submitter's key may not work: its worker is told to go and gets no job.
  WorkerOptions bad_worker;
  bad_worker.curve_server_key = server_keys->public_key;
  bad_worker.curve_public_key = client_keys->public_key;
  bad_worker.curve_secret_key = client_keys->secret_key;
  StartWorker("impostor", 1, bad_worker);
  ASSERT_TRUE(WaitUntil([&] { return Log().find("may submit, not work") != std::string::npos; }))
      << Log();
  EXPECT_EQ(StatusOf(c, "roles").done, 0);

  WorkerOptions good_worker = bad_worker;
  good_worker.curve_public_key = worker_keys->public_key;
  good_worker.curve_secret_key = worker_keys->secret_key;
  StartWorker("honest", 2, good_worker);
  ASSERT_TRUE(WaitUntil([&] { return StatusOf(c, "roles").done == 4; })) << Log();
}

// Issue 19: `nw submit --timeout-ms` bounds the whole submission, not each try: a coordinator
// that takes the request and never answers costs the client the budget, then DeadlineExceeded.
TEST(ControlClientTest, TotalTimeoutBoundsTheWholeSubmission) {
  zmq::context_t ctx;
  zmq::socket_t mute(ctx, zmq::socket_type::router);
  mute.set(zmq::sockopt::linger, 0);
  mute.bind("inproc://mute-coordinator");
  ControlClientOptions o;
  o.endpoint = "inproc://mute-coordinator";
  o.timeout_ms = 5000;
  o.commit_timeout_ms = 120'000;
  o.total_timeout_ms = 300;
  ControlClient c(ctx, o);
  Submission s;
  s.campaign = "slow";
  s.source_path = "slow.yaml";
  s.jobs = Specs(3, 100);
  const auto t0 = std::chrono::steady_clock::now();
  auto reply = c.Submit(s);
  const auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), StatusCode::kDeadlineExceeded) << reply.status().ToString();
  EXPECT_NE(reply.status().message().find("limited to 300 ms"), std::string::npos)
      << reply.status().message();
  EXPECT_LT(took, 4000);  // not 3 tries x 120 s (generous for a loaded machine)
}

TEST(CurveTest, KeyFilesAllowListsAndLoopback) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("nw-curve-test-" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  auto keys = GenerateCurveKeyPair();
  ASSERT_TRUE(keys.ok());
  EXPECT_TRUE(IsZ85Key(keys->public_key));
  EXPECT_FALSE(IsZ85Key("short"));
  ASSERT_TRUE(WriteCurveKeyFiles(dir / "a", *keys, false).ok());
  EXPECT_EQ(WriteCurveKeyFiles(dir / "a", *keys, false).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(std::filesystem::status(dir / "a.key").permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto read = ReadCurveSecretKeyFile(dir / "a.key");
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->public_key, keys->public_key);
  EXPECT_EQ(read->secret_key, keys->secret_key);
  EXPECT_FALSE(ReadCurveSecretKeyFile(dir / "a.pub").ok());
  // '#' is a Z85 character: a key containing it is not cut short as a comment.
  for (int i = 0; i < 200; ++i) {
    auto k = GenerateCurveKeyPair();
    ASSERT_TRUE(k.ok());
    if (k->secret_key.find('#') == std::string::npos) continue;
    ASSERT_TRUE(WriteCurveKeyFiles(dir / "hash", *k, true).ok());
    auto back = ReadCurveSecretKeyFile(dir / "hash.key");
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->secret_key, k->secret_key);
    break;
  }
  EXPECT_EQ(ReadCurvePublicKey((dir / "a.pub").string()).value(), keys->public_key);
  EXPECT_EQ(ReadCurvePublicKey(keys->public_key).value(), keys->public_key);
  // A directory of .pub files is an allow-list; a secret key in it is refused.
  auto other = GenerateCurveKeyPair();
  ASSERT_TRUE(WriteCurveKeyFiles(dir / "b", *other, false).ok());
  std::filesystem::create_directories(dir / "allow");
  std::filesystem::copy(dir / "a.pub", dir / "allow" / "a.pub");
  std::filesystem::copy(dir / "b.pub", dir / "allow" / "b.pub");
  auto allow = ReadCurveAllowList(dir / "allow");
  ASSERT_TRUE(allow.ok()) << allow.status().ToString();
  EXPECT_EQ(*allow, (std::set<std::string>{keys->public_key, other->public_key}));
  std::filesystem::copy(dir / "a.key", dir / "allow" / "oops.pub");
  EXPECT_FALSE(ReadCurveAllowList(dir / "allow").ok());
  { std::ofstream(dir / "garbage.pub") << "public-key = not-a-key\n"; }
  EXPECT_FALSE(ReadCurveAllowList(dir / "garbage.pub").ok());

  EXPECT_TRUE(IsLocalOnlyEndpoint("tcp://127.0.0.1:5555"));
  EXPECT_TRUE(IsLocalOnlyEndpoint("tcp://127.1.2.3:*"));
  EXPECT_TRUE(IsLocalOnlyEndpoint("tcp://localhost:1"));
  EXPECT_TRUE(IsLocalOnlyEndpoint("tcp://[::1]:1"));
  EXPECT_TRUE(IsLocalOnlyEndpoint("ipc:///tmp/x.sock"));
  EXPECT_TRUE(IsLocalOnlyEndpoint("inproc://x"));
  EXPECT_FALSE(IsLocalOnlyEndpoint("tcp://*:5555"));
  EXPECT_FALSE(IsLocalOnlyEndpoint("tcp://0.0.0.0:5555"));
  EXPECT_FALSE(IsLocalOnlyEndpoint("tcp://10.0.0.1:5555"));
  EXPECT_FALSE(IsLocalOnlyEndpoint("tcp://127.0.0.1.evil.com:5555"));
  EXPECT_FALSE(IsLocalOnlyEndpoint("tcp://eth0;127.0.0.1:5555"));
  EXPECT_FALSE(IsLocalOnlyEndpoint("tcp://[::]:5555"));
  std::filesystem::remove_all(dir);
}

TEST(CampaignTableTest, PutFindListKeepsTheFirstSubmission) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("nw-ctable-test-" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  auto store = Store::Open(dir / "nw.db");
  ASSERT_TRUE(store.ok());
  auto t = CampaignTable::Open(dir / "nw.db");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE((*t)->Put({3, "c", 2, CampaignRunState::kPaused, 10, 10}).ok());
  ASSERT_TRUE((*t)->Put({3, "c", 4, CampaignRunState::kCancelled, 99, 20}).ok());
  auto c = (*t)->Find(3);
  ASSERT_TRUE(c.ok() && c->has_value());
  EXPECT_EQ((*c)->priority, 4);
  EXPECT_EQ((*c)->state, CampaignRunState::kCancelled);
  EXPECT_EQ((*c)->submitted_ms, 10);
  EXPECT_EQ((*c)->updated_ms, 20);
  EXPECT_FALSE((*t)->Find(4).value().has_value());
  EXPECT_EQ((*t)->List().value().size(), 1u);
  // The table is the Store's (migration 0004): reopening keeps the rows.
  store->reset();
  t->reset();
  EXPECT_TRUE(Store::Open(dir / "nw.db").ok());
  auto again = CampaignTable::Open(dir / "nw.db");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)->Find(3).value().value().priority, 4);
  std::filesystem::remove_all(dir);
}

TEST(CampaignTableTest, ADatabaseBeforeMigration0004IsRefusedNotPatched) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("nw-ctable-old-" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  const std::vector<SchemaMigration> old(Store::EmbeddedMigrations().begin(),
                                         Store::EmbeddedMigrations().begin() + 3);
  ASSERT_TRUE(Store::OpenWithMigrations(dir / "nw.db", Store::Mode::kReadWrite, old).ok());
  auto t = CampaignTable::Open(dir / "nw.db");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(t.status().message().find((dir / "nw.db").string()), std::string::npos);
  EXPECT_NE(t.status().message().find("0004_coordinator_campaigns"), std::string::npos);
  // Store::Open migrates it; then the table opens.
  ASSERT_TRUE(Store::Open(dir / "nw.db").ok());
  EXPECT_TRUE(CampaignTable::Open(dir / "nw.db").ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace nw
