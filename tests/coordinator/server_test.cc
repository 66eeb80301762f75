// The coordinator end to end: real ZeroMQ sockets, a real SQLite file (db/store.h), real Workers
// with fake executors, and raw DEALER sockets that play misbehaving workers (one that dies
// mid-job, one whose lease expires and that reports late, one that sends garbage, one that
// repeats its result). Waiting is by polling with generous deadlines, never by sleeping.
#include "coordinator/server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "compose/embedded_run.h"
#include "protocol/zmq_handoff.h"
#include "tests/support/temp_dir.h"
#include "worker/worker.h"

namespace nw {
namespace {

using json = nlohmann::json;
constexpr int64_t kDeadlineMs = 20'000;

JobSpec Spec(int trial, const std::string& backend = "cpu") {
  JobSpec s;
  s.model_dir = "/models/tiny";
  s.model_digest = "digest";
  s.engine_version = "nw-test";
  s.task = "niah-single";
  s.haystack = "noise";
  s.context_length = 256;
  s.needle_position = 0.5;
  s.topk = 8;
  s.backend = backend;
  s.seed = 7;
  s.trial = trial;
  return s;
}

// Behaviour per call; the default answers pass for even trials and miss for odd ones.
using Behaviour = std::function<JobResult(const JobSpec&, const std::string&, int)>;

JobResult Answer(const JobSpec& spec, const std::string& key, int attempt) {
  JobResult r;
  r.job_key = key;
  r.attempt = attempt;
  r.outcome = spec.trial % 2 == 0 ? Outcome::kPass : Outcome::kMiss;
  r.generated_text = "trial " + std::to_string(spec.trial) + " attempt " + std::to_string(attempt);
  r.expected = "x";
  r.device = "fake";
  r.engine_version = spec.engine_version;
  return r;
}

class FakeExecutor : public JobExecutor {
 public:
  explicit FakeExecutor(Behaviour b = Answer, std::vector<std::string> backends = {"cpu"})
      : behaviour_(std::move(b)), backends_(std::move(backends)) {}
  JobResult Execute(const JobSpec& spec, const std::string& key, int attempt) override {
    return behaviour_(spec, key, attempt);
  }
  json Capabilities() const override { return json{{"backends", backends_}, {"device", "fake"}}; }

 private:
  Behaviour behaviour_;
  std::vector<std::string> backends_;
};

std::vector<std::unique_ptr<JobExecutor>> Executors(int n, Behaviour b = Answer) {
  std::vector<std::unique_ptr<JobExecutor>> v;
  for (int i = 0; i < n; ++i) v.push_back(std::make_unique<FakeExecutor>(b));
  return v;
}

SchedulerOptions FastTiming() {
  SchedulerOptions o;
  o.heartbeat_interval_ms = 50;
  o.heartbeat_liveness = 3;
  o.lease_ms = 60'000;
  o.retry_backoff_initial_ms = 20;
  o.retry_backoff_max_ms = 100;
  o.max_attempts = 3;
  return o;
}

// Thread-safe record of log lines and progress reports.
class Recorder {
 public:
  void Log(std::string_view line) {
    std::lock_guard<std::mutex> l(mu_);
    lines_.emplace_back(line);
    cv_.notify_all();
  }
  bool WaitForLog(const std::string& needle) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::milliseconds(kDeadlineMs), [&] {
      for (const auto& line : lines_) {
        if (line.find(needle) != std::string::npos) return true;
      }
      return false;
    });
  }
  std::vector<std::string> Lines() {
    std::lock_guard<std::mutex> l(mu_);
    return lines_;
  }
  void Progress(const ServerProgress& p) {
    std::lock_guard<std::mutex> l(mu_);
    progress_.push_back(p);
    cv_.notify_all();
  }
  bool Logged(const std::string& needle) {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& line : lines_) {
      if (line.find(needle) != std::string::npos) return true;
    }
    return false;
  }
  std::string AllLines() {
    std::lock_guard<std::mutex> l(mu_);
    std::string out;
    for (const auto& line : lines_) out += line + "\n";
    return out;
  }
  // Waits until a progress report satisfies `pred`.
  bool WaitFor(const std::function<bool(const ServerProgress&)>& pred) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::milliseconds(kDeadlineMs), [&] {
      for (const auto& p : progress_) {
        if (pred(p)) return true;
      }
      return false;
    });
  }
  // Waits until a report satisfying `first` is followed by one satisfying `then`.
  bool WaitForSequence(const std::function<bool(const ServerProgress&)>& first,
                       const std::function<bool(const ServerProgress&)>& then) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::milliseconds(kDeadlineMs), [&] {
      bool seen_first = false;
      for (const auto& p : progress_) {
        if (seen_first && then(p)) return true;
        if (first(p)) seen_first = true;
      }
      return false;
    });
  }
  std::vector<ServerProgress> Reports() {
    std::lock_guard<std::mutex> l(mu_);
    return progress_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
  std::vector<ServerProgress> progress_;
};

// A worker played by the test through a raw DEALER socket. Sends never block (the coordinator
// may be gone); received messages are buffered so that awaiting one kind keeps the others.
class RawWorker {
 public:
  RawWorker(zmq::context_t& ctx, const std::string& endpoint)
      : socket_(ctx, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(endpoint);
  }
  bool Send(const Message& m) {
    auto f = Encode(m);
    EXPECT_TRUE(f.ok());
    return f.ok() && SendFrames(*f, socket_, ZMQ_DONTWAIT);
  }
  void SendRaw(zmq::multipart_t frames) { ASSERT_TRUE(SendFrames(frames, socket_, ZMQ_DONTWAIT)); }
  void Ready(const std::string& id, std::vector<AttemptRef> held = {}) {
    ASSERT_TRUE(Send(
        ReadyMsg{id, "rawhost", 1, {{"backends", {"cpu"}}, {"device", "raw"}}, std::move(held)}));
  }
  // The first message of type T received (earlier ones of other types stay buffered); nullopt
  // at the deadline. Sends a heartbeat now and then when `alive`.
  template <typename T>
  std::optional<T> Await(bool alive = true, int64_t timeout_ms = kDeadlineMs) {
    std::vector<zmq_pollitem_t> items = {{socket_.handle(), 0, ZMQ_POLLIN, 0}};
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (true) {
      for (auto it = inbox_.begin(); it != inbox_.end(); ++it) {
        if (auto* t = std::get_if<T>(&*it)) {
          T out = *t;
          inbox_.erase(it);
          return out;
        }
      }
      if (std::chrono::steady_clock::now() >= end) return std::nullopt;
      if (alive) Send(HeartbeatMsg{});
      zmq::poll(items, std::chrono::milliseconds(20));
      zmq::multipart_t frames;
      while (RecvFrames(frames, socket_, ZMQ_DONTWAIT)) {
        auto m = Decode(frames);
        EXPECT_TRUE(m.ok()) << m.status().ToString();
        if (m.ok() && !std::holds_alternative<HeartbeatMsg>(*m)) inbox_.push_back(std::move(*m));
      }
    }
  }
  void Close() { socket_.close(); }

 private:
  zmq::socket_t socket_;
  std::deque<Message> inbox_;
};

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = std::filesystem::temp_directory_path() /
           ("nw-server-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(dir_);
    auto s = Store::Open(dir_ / "nw.db");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    auto id = store_->UpsertCampaign("test", "test.yaml", "", 1);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    campaign_ = *id;
  }
  void TearDown() override {
    // Stop anything a failed assertion left running, then remove the files.
    if (server_) server_->Stop();
    for (auto& w : workers_) w->Stop();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
    workers_.clear();
    server_.reset();
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::vector<std::string> AddJobs(int n, int first_trial = 0, const std::string& backend = "cpu") {
    std::vector<JobSpec> specs;
    std::vector<std::string> keys;
    for (int i = 0; i < n; ++i) {
      specs.push_back(Spec(first_trial + i, backend));
      keys.push_back(specs.back().Key());
    }
    EXPECT_TRUE(store_->AddJobs(campaign_, specs, 2).ok());
    return keys;
  }

  RunOptions Options() {
    RunOptions o;
    o.scheduler = FastTiming();
    o.result_batch_ms = 20;
    o.on_progress = [this](const ServerProgress& p) { rec_.Progress(p); };
    o.log = [this](std::string_view line) { rec_.Log(line); };
    return o;
  }

  // A Server on its own thread (the test thread then keeps off the Store until JoinServer()).
  void StartServer(const std::string& endpoint, SchedulerOptions timing = FastTiming()) {
    ServerOptions so;
    so.endpoint = endpoint;
    so.scheduler = timing;
    so.result_batch_ms = 20;
    so.on_progress = [this](const ServerProgress& p) { rec_.Progress(p); };
    so.log = [this](std::string_view line) { rec_.Log(line); };
    server_ = std::make_unique<Server>(ctx_, *store_, clock_, so);
    threads_.emplace_back([this] { server_result_ = server_->Run(campaign_); });
  }
  Result<RunSummary> JoinServer() {
    threads_.front().join();
    return server_result_;
  }
  // A real Worker on its own thread.
  Worker& StartWorker(const std::string& endpoint, const std::string& id, Behaviour b = Answer) {
    WorkerOptions wo;
    wo.endpoint = endpoint;
    wo.worker_id = id;
    wo.heartbeat_interval_ms = 50;
    wo.log = [this](std::string_view line) { rec_.Log(line); };
    std::vector<std::unique_ptr<JobExecutor>> ex;
    ex.push_back(std::make_unique<FakeExecutor>(b));
    workers_.push_back(std::make_unique<Worker>(ctx_, clock_, wo, std::move(ex)));
    Worker& w = *workers_.back();
    threads_.emplace_back([&w] { EXPECT_TRUE(w.Run().ok()); });
    return w;
  }

  std::map<std::string, JobResult> ResultsByKey() {
    auto rs = store_->Results(campaign_);
    EXPECT_TRUE(rs.ok()) << rs.status().ToString();
    std::map<std::string, JobResult> out;
    if (rs.ok()) {
      for (auto& r : *rs) out[r.job_key] = r;
    }
    return out;
  }
  std::vector<AttemptRecord> Attempts(const std::string& key) {
    auto a = store_->Attempts(key);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return a.ok() ? *a : std::vector<AttemptRecord>{};
  }
  JobState StateOf(const std::string& key) {
    auto j = store_->FindJob(key);
    EXPECT_TRUE(j.ok() && j->has_value());
    return j.ok() && j->has_value() ? (*j)->state : JobState::kQueued;
  }

  std::filesystem::path dir_;
  std::unique_ptr<Store> store_;
  int64_t campaign_ = 0;
  Recorder rec_;
  SystemClock clock_;
  zmq::context_t ctx_;
  std::unique_ptr<Server> server_;
  Result<RunSummary> server_result_ = Status::Internal("not run");
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
};

TEST_F(ServerTest, EmbeddedRunCompletesEveryJobIntoTheDatabase) {
  const auto keys = AddJobs(30);
  // Every job in one attempt needs every worker heard within its liveness for the whole run;
  // 150 ms (FastTiming) is missed on a loaded machine or under ThreadSanitizer (three workers
  // were declared lost and their jobs retried there), so this run allows 5 s. Lost workers have
  // tests of their own below.
  RunOptions o = Options();
  o.scheduler.heartbeat_liveness = 100;
  auto summary = RunEmbedded(*store_, campaign_, Executors(3), std::move(o));
  ASSERT_TRUE(summary.ok()) << summary.status().ToString() << "\n" << rec_.AllLines();
  EXPECT_EQ(summary->total, 30);
  EXPECT_EQ(summary->done, 30);
  EXPECT_EQ(summary->committed, 30);
  EXPECT_EQ(summary->failed, 0);
  EXPECT_EQ(summary->retried, 0) << rec_.AllLines();
  EXPECT_EQ(summary->stale_results, 0);
  EXPECT_EQ(summary->malformed_messages, 0);
  EXPECT_EQ(summary->workers_seen, 3);
  EXPECT_FALSE(summary->stopped);

  auto progress = store_->Progress(campaign_);
  ASSERT_TRUE(progress.ok());
  EXPECT_EQ(progress->total, 30);
  EXPECT_EQ(progress->done, 30);
  EXPECT_EQ(progress->pass, 15);
  EXPECT_EQ(progress->miss, 15);
  const auto results = ResultsByKey();
  ASSERT_EQ(results.size(), 30u);
  std::set<std::string> worker_ids;
  for (int i = 0; i < 30; ++i) {
    const JobResult& r = results.at(keys[static_cast<size_t>(i)]);
    EXPECT_EQ(r.attempt, 1);
    EXPECT_EQ(r.outcome, i % 2 == 0 ? Outcome::kPass : Outcome::kMiss);
    EXPECT_EQ(r.generated_text, "trial " + std::to_string(i) + " attempt 1");
    worker_ids.insert(r.worker_id);
    const auto attempts = Attempts(keys[static_cast<size_t>(i)]);
    ASSERT_EQ(attempts.size(), 1u);
    EXPECT_EQ(attempts[0].status, "ok");
    EXPECT_EQ(attempts[0].worker_id, r.worker_id);
  }
  for (const auto& id : worker_ids) EXPECT_EQ(id.rfind("embedded-", 0), 0u) << id;

  // Progress reports: done never goes down and ends at 30/30.
  const auto reports = rec_.Reports();
  ASSERT_FALSE(reports.empty());
  for (size_t i = 1; i < reports.size(); ++i) EXPECT_GE(reports[i].done, reports[i - 1].done);
  EXPECT_EQ(reports.back().done, 30);
  EXPECT_EQ(reports.back().total, 30);

  auto workers = store_->ListWorkers();
  ASSERT_TRUE(workers.ok());
  EXPECT_EQ(workers->size(), 3u);
  for (const auto& w : *workers) EXPECT_EQ(w.state, "gone");

  // A second run has nothing to do.
  auto again = RunEmbedded(*store_, campaign_, Executors(1), Options());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->done_before, 30);
  EXPECT_EQ(again->committed, 0);
  EXPECT_EQ(again->done, 30);
}

TEST_F(ServerTest, ShortAndLongPromptsAreLeasedSideBySide) {
  // The campaign lists every 256-token job, then every 4,096-token one (matrix order); one
  // single-slot worker runs them in lease order, which alternates the lengths
  // (coordinator/job_order.h), each length in its own order.
  std::vector<JobSpec> specs;
  for (int64_t length : {int64_t{256}, int64_t{4096}}) {
    for (int t = 0; t < 4; ++t) {
      JobSpec s = Spec(t);
      s.context_length = length;
      specs.push_back(s);
    }
  }
  ASSERT_TRUE(store_->AddJobs(campaign_, specs, 2).ok());
  std::mutex mu;
  std::vector<std::pair<int64_t, int>> ran;
  auto record = [&](const JobSpec& spec, const std::string& key, int attempt) {
    std::lock_guard<std::mutex> l(mu);
    ran.emplace_back(spec.context_length, spec.trial);
    return Answer(spec, key, attempt);
  };
  RunOptions o = Options();
  o.scheduler.heartbeat_liveness = 100;
  auto summary = RunEmbedded(*store_, campaign_, Executors(1, record), std::move(o));
  ASSERT_TRUE(summary.ok()) << summary.status().ToString() << "\n" << rec_.AllLines();
  EXPECT_EQ(summary->done, 8);
  const std::vector<std::pair<int64_t, int>> want = {{256, 0}, {4096, 0}, {256, 1}, {4096, 1},
                                                     {256, 2}, {4096, 2}, {256, 3}, {4096, 3}};
  EXPECT_EQ(ran, want);
}

TEST_F(ServerTest, EmbeddedRunOverIpcWithMultiSlotWorkers) {
  AddJobs(12);
  RunOptions o = Options();
  o.transport = EmbeddedTransport::kIpc;
  o.ipc_path = (dir_ / "coordinator.sock").string();
  o.slots_per_worker = 2;
  auto summary = RunEmbedded(*store_, campaign_, Executors(4), o);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString() << "\n" << rec_.AllLines();
  EXPECT_EQ(summary->done, 12);
  EXPECT_GE(summary->workers_seen, 1);  // a fast worker may finish before the other registers
  const auto results = ResultsByKey();
  EXPECT_EQ(results.size(), 12u);
  for (const auto& [key, r] : results) {
    EXPECT_TRUE(r.worker_id == "embedded-0" || r.worker_id == "embedded-1") << r.worker_id;
  }
  EXPECT_FALSE(std::filesystem::exists(o.ipc_path)) << o.ipc_path;
}

TEST_F(ServerTest, EmbeddedRunWorkerGroupsRegisterTheirSlotsAndPrefetch) {
  // `nw run`'s GPU worker: one worker of 3 slots with 3 jobs queued locally beyond them, beside
  // a one-slot worker without prefetch. Every slot holds its first job until the coordinator has
  // leased all it will (3 + 3 + 1), so the leases in flight show the prefetch at work.
  const auto keys = AddJobs(20);
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  int64_t max_leased = 0;
  auto gated = [&](const JobSpec& spec, const std::string& key, int attempt) {
    std::unique_lock<std::mutex> l(mu);
    // Without the prefetch the leases stop at 4: past the deadline the gate opens for all.
    if (!cv.wait_for(l, std::chrono::milliseconds(kDeadlineMs), [&] { return open; })) {
      open = true;
    }
    return Answer(spec, key, attempt);
  };
  RunOptions o = Options();
  o.scheduler.heartbeat_liveness = 100;
  o.groups = {{3, 3}, {1, 0}};
  o.on_progress = [&](const ServerProgress& p) {
    rec_.Progress(p);
    std::lock_guard<std::mutex> l(mu);
    max_leased = std::max(max_leased, p.leased);
    if (p.leased >= 7) {
      open = true;
      cv.notify_all();
    }
  };
  auto summary = RunEmbedded(*store_, campaign_, Executors(4, gated), std::move(o));
  ASSERT_TRUE(summary.ok()) << summary.status().ToString() << "\n" << rec_.AllLines();
  EXPECT_EQ(summary->done, 20);
  EXPECT_EQ(summary->failed, 0);
  EXPECT_EQ(summary->retried, 0) << rec_.AllLines();
  EXPECT_EQ(summary->workers_seen, 2);
  EXPECT_EQ(max_leased, 7) << rec_.AllLines();  // (3 slots + 3 prefetch) + 1 slot
  EXPECT_TRUE(rec_.Logged("worker embedded-0 ready (3 slots")) << rec_.AllLines();
  EXPECT_TRUE(rec_.Logged("worker embedded-1 ready (1 slots")) << rec_.AllLines();

  const auto results = ResultsByKey();
  ASSERT_EQ(results.size(), 20u);
  for (int i = 0; i < 20; ++i) {
    const JobResult& r = results.at(keys[static_cast<size_t>(i)]);
    EXPECT_EQ(r.attempt, 1);
    EXPECT_EQ(r.outcome, i % 2 == 0 ? Outcome::kPass : Outcome::kMiss);
    EXPECT_TRUE(r.worker_id == "embedded-0" || r.worker_id == "embedded-1") << r.worker_id;
  }
  // The registrations as stored: the prefetch is a capability of the grouped worker only.
  auto workers = store_->ListWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status().ToString();
  ASSERT_EQ(workers->size(), 2u);
  for (const WorkerRecord& w : *workers) {
    if (w.id == "embedded-0") {
      EXPECT_EQ(w.capabilities.value("prefetch", -1), 3) << w.capabilities.dump();
    } else {
      EXPECT_EQ(w.id, "embedded-1");
      EXPECT_FALSE(w.capabilities.contains("prefetch")) << w.capabilities.dump();
    }
  }
}

TEST_F(ServerTest, EmbeddedRunRefusesWorkerGroupsThatDoNotFitTheExecutors) {
  AddJobs(2);
  RunOptions o = Options();
  o.groups = {{2, 0}};
  auto short_by_one = RunEmbedded(*store_, campaign_, Executors(3), o);
  ASSERT_FALSE(short_by_one.ok());
  EXPECT_EQ(short_by_one.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(short_by_one.status().message().find("2 executors, not the 3 given"), std::string::npos)
      << short_by_one.status().ToString();
  o.groups = {{1, 4}};
  auto too_much_prefetch = RunEmbedded(*store_, campaign_, Executors(1), o);
  ASSERT_FALSE(too_much_prefetch.ok());
  EXPECT_NE(too_much_prefetch.status().message().find("prefetch 4"), std::string::npos)
      << too_much_prefetch.status().ToString();
  o.groups = {{0, 0}, {1, 0}};
  EXPECT_EQ(RunEmbedded(*store_, campaign_, Executors(1), o).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(ServerTest, UnknownCampaignAndBadExecutors) {
  auto r = RunEmbedded(*store_, campaign_ + 100, Executors(1), Options());
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(RunEmbedded(*store_, campaign_, {}, Options()).status().code(),
            StatusCode::kInvalidArgument);
  // Workers that cannot start (an id over the limit) end the run with their error.
  AddJobs(2);
  RunOptions o = Options();
  o.worker_prefix = std::string(300, 'x');
  auto bad = RunEmbedded(*store_, campaign_, Executors(2), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("worker_id"), std::string::npos) << bad.status().ToString();
}

TEST_F(ServerTest, RecoversJobsLeasedByACrashedRun) {
  const auto keys = AddJobs(3);
  // A coordinator died with attempt 1 of keys[0] leased to a worker that is long gone.
  ASSERT_TRUE(store_->RecordLease(keys[0], 1, "ghost", 10, 5).ok());
  ASSERT_EQ(StateOf(keys[0]), JobState::kLeased);
  auto summary = RunEmbedded(*store_, campaign_, Executors(1), Options());
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->requeued_at_start, 1);
  EXPECT_EQ(summary->done, 3);
  const auto results = ResultsByKey();
  EXPECT_EQ(results.at(keys[0]).attempt, 2);  // attempt numbers are never reused
  const auto attempts = Attempts(keys[0]);
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[0].status, "lost");
  EXPECT_EQ(attempts[1].status, "ok");
}

TEST_F(ServerTest, EngineErrorsRetryableAndNot) {
  const auto keys = AddJobs(4);
  // trial 1: a non-retryable engine error (a result); trial 2: retryable once, then fine;
  // trial 3: retryable every time (gives up after max_attempts).
  Behaviour b = [](const JobSpec& spec, const std::string& key, int attempt) {
    JobResult r = Answer(spec, key, attempt);
    auto error = [&](const char* code, bool retryable) {
      r.outcome = Outcome::kEngineError;
      r.error_code = code;
      r.error_message = "fake failure";
      r.retryable = retryable;
    };
    if (spec.trial == 1) error("invalid_argument", false);
    if (spec.trial == 2 && attempt == 1) error("resource_exhausted", true);
    if (spec.trial == 3) error("unavailable", true);
    return r;
  };
  auto summary = RunEmbedded(*store_, campaign_, Executors(2, b), Options());
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->done, 3);
  EXPECT_EQ(summary->failed, 1);
  EXPECT_EQ(summary->failed_now, 1);
  EXPECT_EQ(summary->retried, 3);  // trial 2 once, trial 3 twice
  const auto results = ResultsByKey();
  EXPECT_EQ(results.at(keys[1]).outcome, Outcome::kEngineError);
  EXPECT_EQ(results.at(keys[1]).error_code, "invalid_argument");
  EXPECT_EQ(results.at(keys[2]).outcome, Outcome::kPass);
  EXPECT_EQ(results.at(keys[2]).attempt, 2);
  EXPECT_EQ(results.count(keys[3]), 0u);
  EXPECT_EQ(StateOf(keys[3]), JobState::kFailed);
  const auto a2 = Attempts(keys[2]);
  ASSERT_EQ(a2.size(), 2u);
  EXPECT_EQ(a2[0].status, "failed");
  EXPECT_EQ(a2[0].error_code, "resource_exhausted");
  EXPECT_EQ(a2[1].status, "ok");
  const auto a3 = Attempts(keys[3]);
  ASSERT_EQ(a3.size(), 3u);
  for (const auto& a : a3) EXPECT_EQ(a.status, "failed");
  auto job = store_->FindJob(keys[3]);
  ASSERT_TRUE(job.ok() && job->has_value());
  EXPECT_NE((*job)->last_error.find("giving up"), std::string::npos) << (*job)->last_error;
}

TEST_F(ServerTest, SkipsJobsNoWorkerCanRun) {
  const auto cpu = AddJobs(2);
  const auto cuda = AddJobs(1, 100, "cuda");
  auto summary = RunEmbedded(*store_, campaign_, Executors(1), Options());
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->skipped, 1);
  EXPECT_EQ(summary->done, 2);
  EXPECT_EQ(StateOf(cuda[0]), JobState::kQueued);  // left for a run with a CUDA worker
  EXPECT_TRUE(rec_.Logged("no worker runs backend 'cuda'"));
}

TEST_F(ServerTest, StopReleasesRunningLeases) {
  const auto keys = AddJobs(3);
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  Behaviour blocking = [&](const JobSpec& spec, const std::string& key, int attempt) {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return open; });
    return Answer(spec, key, attempt);
  };
  std::stop_source stop;
  RunOptions o = Options();
  o.stop = stop.get_token();
  std::thread stopper([&] {
    EXPECT_TRUE(rec_.WaitFor([](const ServerProgress& p) { return p.leased == 1; }));
    stop.request_stop();
    std::lock_guard<std::mutex> l(mu);
    open = true;
    cv.notify_all();
  });
  auto summary = RunEmbedded(*store_, campaign_, Executors(1, blocking), o);
  stopper.join();
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_TRUE(summary->stopped);
  // The job running at the stop is released (or, if it finished first, committed, and the next
  // one granted meanwhile is released).
  EXPECT_GE(summary->retried, summary->committed == 0 ? 1 : 0);
  EXPECT_LT(summary->committed, 3);
  int cancelled = 0;
  for (const auto& k : keys) {
    for (const auto& a : Attempts(k)) cancelled += a.error_code == "cancelled" ? 1 : 0;
  }
  EXPECT_EQ(cancelled, summary->retried);
  auto progress = store_->Progress(campaign_);
  ASSERT_TRUE(progress.ok());
  EXPECT_EQ(progress->leased, 0);  // nothing left leased in the database
  // The next run finishes the campaign.
  auto rest = RunEmbedded(*store_, campaign_, Executors(1), Options());
  ASSERT_TRUE(rest.ok()) << rest.status().ToString();
  EXPECT_EQ(rest->done, 3);
  EXPECT_EQ(ResultsByKey().size(), 3u);
}

TEST_F(ServerTest, WorkerThatDiesMidJobIsReplacedAndItsJobCountedOnce) {
  const auto keys = AddJobs(5);
  const std::string ep = "inproc://server-test-death";
  StartServer(ep);
  RawWorker doomed(ctx_, ep);
  doomed.Ready("doomed");
  auto job = doomed.Await<JobMsg>();
  ASSERT_TRUE(job);
  EXPECT_EQ(job->attempt, 1);
  const std::string doomed_key = job->job_key;
  // It dies: no more heartbeats, no goodbye.
  doomed.Close();
  StartWorker(ep, "survivor");
  auto summary = JoinServer();
  ASSERT_TRUE(summary.ok()) << summary.status().ToString() << "\n" << rec_.AllLines();
  EXPECT_EQ(summary->done, 5);
  EXPECT_EQ(summary->committed, 5);
  EXPECT_EQ(summary->workers_lost, 1);
  EXPECT_EQ(summary->retried, 1);
  EXPECT_TRUE(rec_.Logged("worker doomed lost"));
  const auto results = ResultsByKey();
  ASSERT_EQ(results.size(), 5u);
  EXPECT_EQ(results.at(doomed_key).attempt, 2);
  EXPECT_EQ(results.at(doomed_key).worker_id, "survivor");
  const auto attempts = Attempts(doomed_key);
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[0].worker_id, "doomed");
  EXPECT_EQ(attempts[0].status, "failed");
  EXPECT_EQ(attempts[0].error_code, "unavailable");
  EXPECT_EQ(attempts[1].status, "ok");
  auto workers = store_->ListWorkers();
  ASSERT_TRUE(workers.ok());
  for (const auto& w : *workers) EXPECT_EQ(w.state, w.id == "doomed" ? "lost" : "gone") << w.id;
}

TEST_F(ServerTest, LateResultOfAnExpiredLeaseIsFencedOff) {
  const auto keys = AddJobs(3);
  const std::string ep = "inproc://server-test-stale";
  SchedulerOptions timing = FastTiming();
  timing.lease_ms = 300;
  StartServer(ep, timing);
  RawWorker slow(ctx_, ep);
  slow.Ready("slowpoke");
  auto job = slow.Await<JobMsg>();
  ASSERT_TRUE(job);
  // Stay alive (heartbeats) until the coordinator has taken the lease back.
  std::atomic<bool> watching{true};
  std::atomic<bool> expired{false};
  std::thread watcher([&] {
    expired = rec_.WaitForSequence([](const ServerProgress& p) { return p.leased == 1; },
                                   [](const ServerProgress& p) { return p.leased == 0; });
    watching = false;
  });
  while (watching) (void)slow.Await<HeartbeatMsg>(true, 100);
  watcher.join();
  ASSERT_TRUE(expired);
  // Now it reports attempt 1: rejected, and never written.
  JobResult late = Answer(job->spec, job->job_key, job->attempt);
  late.generated_text = "STALE";
  ASSERT_TRUE(slow.Send(ResultMsg{late}));
  auto ack = slow.Await<AckMsg>();
  ASSERT_TRUE(ack);
  EXPECT_EQ(ack->status, AckStatus::kRejected);
  EXPECT_EQ(ack->attempt, 1);
  EXPECT_NE(ack->reason.find("expired"), std::string::npos) << ack->reason;
  // The slow worker leaves politely; a healthy one does the work.
  ASSERT_TRUE(slow.Send(DisconnectMsg{"bye", false}));
  StartWorker(ep, "healthy");
  auto summary = JoinServer();
  ASSERT_TRUE(summary.ok()) << summary.status().ToString() << "\n" << rec_.AllLines();
  EXPECT_EQ(summary->done, 3);
  EXPECT_EQ(summary->stale_results, 1);
  const auto results = ResultsByKey();
  ASSERT_EQ(results.size(), 3u);
  const JobResult& final_result = results.at(job->job_key);
  EXPECT_NE(final_result.generated_text, "STALE");
  EXPECT_EQ(final_result.worker_id, "healthy");
  // Attempt 1 expired. (The rejected report freed slowpoke's slot, so it may have been granted
  // attempt 2 before it said goodbye; that attempt then failed as "disconnected".)
  const auto attempts = Attempts(job->job_key);
  ASSERT_GE(attempts.size(), 2u);
  EXPECT_EQ(attempts[0].status, "failed");
  EXPECT_EQ(attempts[0].error_code, "deadline_exceeded");
  EXPECT_EQ(final_result.attempt, static_cast<int>(attempts.size()));
  EXPECT_EQ(attempts.back().status, "ok");
  for (size_t i = 1; i + 1 < attempts.size(); ++i) {
    EXPECT_EQ(attempts[i].worker_id, "slowpoke");
    EXPECT_EQ(attempts[i].error_code, "unavailable");
  }
}

TEST_F(ServerTest, MalformedMessagesAreDroppedAndLogged) {
  AddJobs(2);
  const std::string ep = "inproc://server-test-garbage";
  StartServer(ep);
  RawWorker rogue(ctx_, ep);
  zmq::multipart_t wrong_version;
  wrong_version.addstr("");
  wrong_version.addstr("NWW00");
  wrong_version.addmem("\x01", 1);
  wrong_version.addstr("{}");
  rogue.SendRaw(std::move(wrong_version));
  zmq::multipart_t bad_json;
  bad_json.addstr("");
  bad_json.addstr("NWW01");
  bad_json.addmem("\x01", 1);
  bad_json.addstr("{not json");
  rogue.SendRaw(std::move(bad_json));
  zmq::multipart_t two_frames;
  two_frames.addstr("");
  two_frames.addstr("hello");
  rogue.SendRaw(std::move(two_frames));
  ASSERT_TRUE(
      rogue.Send(JobMsg{"k", 1, 10, 0, Spec(0)}));  // a coordinator's command, from a "worker"
  // A heartbeat before READY: the coordinator asks it to register.
  ASSERT_TRUE(rogue.Send(HeartbeatMsg{}));
  auto d = rogue.Await<DisconnectMsg>(false);
  ASSERT_TRUE(d);
  EXPECT_TRUE(d->reconnect);
  StartWorker(ep, "honest");
  auto summary = JoinServer();
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->done, 2);
  EXPECT_EQ(summary->malformed_messages, 4);
  EXPECT_GE(summary->unknown_worker_messages, 1);
  EXPECT_TRUE(rec_.Logged("dropped malformed message"));
  EXPECT_TRUE(rec_.Logged("version frame 'NWW00' is not NWW01"));
  EXPECT_TRUE(rec_.Logged("READY: payload is not valid JSON"));
  EXPECT_TRUE(rec_.Logged("expected 4 frames"));
  EXPECT_TRUE(rec_.Logged("dropped unexpected JOB"));
}

TEST_F(ServerTest, RepeatedResultIsCommittedOnceAndAckedAsDuplicate) {
  const auto keys = AddJobs(2);
  const std::string ep = "inproc://server-test-dup";
  StartServer(ep);
  RawWorker w(ctx_, ep);
  w.Ready("repeater");
  auto job = w.Await<JobMsg>();
  ASSERT_TRUE(job);
  const JobResult r = Answer(job->spec, job->job_key, job->attempt);
  ASSERT_TRUE(w.Send(ResultMsg{r}));
  auto first = w.Await<AckMsg>();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, AckStatus::kCommitted);
  // The same result again (e.g. a resend whose ACK crossed it); the other job keeps the
  // coordinator running meanwhile.
  ASSERT_TRUE(w.Send(ResultMsg{r}));
  auto second = w.Await<AckMsg>();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->status, AckStatus::kDuplicate);
  EXPECT_EQ(second->job_key, r.job_key);
  auto next = w.Await<JobMsg>();
  ASSERT_TRUE(next);
  EXPECT_NE(next->job_key, job->job_key);
  ASSERT_TRUE(w.Send(ResultMsg{Answer(next->spec, next->job_key, next->attempt)}));
  auto third = w.Await<AckMsg>();
  ASSERT_TRUE(third);
  EXPECT_EQ(third->status, AckStatus::kCommitted);
  // The campaign is finished: the worker is told to go.
  auto bye = w.Await<DisconnectMsg>(false);
  ASSERT_TRUE(bye);
  EXPECT_FALSE(bye->reconnect);
  EXPECT_EQ(bye->reason, "campaign finished");
  auto summary = JoinServer();
  ASSERT_TRUE(summary.ok());
  EXPECT_EQ(summary->committed, 2);
  EXPECT_EQ(summary->duplicate_results, 1);
  EXPECT_EQ(ResultsByKey().size(), 2u);
}

TEST_F(ServerTest, ReconnectingWorkerKeepsItsLease) {
  const auto keys = AddJobs(1);
  const std::string ep = "inproc://server-test-rejoin";
  StartServer(ep);
  auto first = std::make_unique<RawWorker>(ctx_, ep);
  first->Ready("phoenix");
  auto job = first->Await<JobMsg>();
  ASSERT_TRUE(job);
  first->Close();
  // Same worker id on a new connection, still holding the attempt: the lease survives.
  RawWorker second(ctx_, ep);
  second.Ready("phoenix", {{job->job_key, job->attempt}});
  ASSERT_TRUE(second.Send(ResultMsg{Answer(job->spec, job->job_key, job->attempt)}));
  auto ack = second.Await<AckMsg>();
  ASSERT_TRUE(ack);
  EXPECT_EQ(ack->status, AckStatus::kCommitted);
  auto summary = JoinServer();
  ASSERT_TRUE(summary.ok());
  EXPECT_EQ(summary->retried, 0);
  EXPECT_EQ(ResultsByKey().at(job->job_key).attempt, 1);
}

ReadyMsg ReadyWithSession(const std::string& id, const std::string& session,
                          std::vector<AttemptRef> held = {}) {
  return ReadyMsg{id,
                  "rawhost",
                  1,
                  {{"backends", {"cpu"}}, {"device", "raw"}, {"session", session}},
                  std::move(held)};
}

// Issue 19: a live worker's id cannot be registered by another process (another session nonce
// or CURVE key): its READY is refused, it gets no lease and cannot report on the victim's.
TEST_F(ServerTest, AWorkerIdCannotBeTakenOverByAnotherProcess) {
  const auto keys = AddJobs(2);
  const std::string ep = "inproc://server-test-takeover";
  StartServer(ep);
  RawWorker victim(ctx_, ep);
  ASSERT_TRUE(victim.Send(ReadyWithSession("victim", "aaaa")));
  auto job = victim.Await<JobMsg>();
  ASSERT_TRUE(job);
  RawWorker thief(ctx_, ep);
  ASSERT_TRUE(thief.Send(ReadyWithSession("victim", "bbbb", {{job->job_key, job->attempt}})));
  ASSERT_TRUE(rec_.WaitForLog("refused READY for worker id victim"));
  // The thief's result for the victim's lease is not accepted: it is asked to register.
  JobResult forged = Answer(job->spec, job->job_key, job->attempt);
  forged.generated_text = "FORGED";
  ASSERT_TRUE(thief.Send(ResultMsg{forged}));
  auto told = thief.Await<DisconnectMsg>(false);
  ASSERT_TRUE(told);
  EXPECT_TRUE(told->reconnect);
  // The victim keeps its lease and finishes both jobs.
  ASSERT_TRUE(victim.Send(ResultMsg{Answer(job->spec, job->job_key, job->attempt)}));
  auto ack = victim.Await<AckMsg>();
  ASSERT_TRUE(ack);
  EXPECT_EQ(ack->status, AckStatus::kCommitted);
  auto next = victim.Await<JobMsg>();
  ASSERT_TRUE(next);
  ASSERT_TRUE(victim.Send(ResultMsg{Answer(next->spec, next->job_key, next->attempt)}));
  auto summary = JoinServer();
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->done, 2);
  EXPECT_GE(summary->refused_messages, 1);
  EXPECT_EQ(summary->retried, 0);
  EXPECT_NE(ResultsByKey().at(job->job_key).generated_text, "FORGED");
}

// Issue 19: an implausible result (negative counts, probes for a job that asked for none) is
// never written: the attempt fails, the worker is told why, and the job runs again.
TEST_F(ServerTest, ImplausibleResultFailsTheAttemptAndIsNotWritten) {
  const auto keys = AddJobs(1);
  const std::string ep = "inproc://server-test-implausible";
  StartServer(ep);
  RawWorker w(ctx_, ep);
  w.Ready("liar");
  auto job = w.Await<JobMsg>();
  ASSERT_TRUE(job);
  JobResult bad = Answer(job->spec, job->job_key, job->attempt);
  bad.generated_tokens = -3;
  ASSERT_TRUE(w.Send(ResultMsg{bad}));
  auto ack = w.Await<AckMsg>();
  ASSERT_TRUE(ack);
  EXPECT_EQ(ack->status, AckStatus::kFailed);
  EXPECT_NE(ack->reason.find("implausible result: result.generated_tokens"), std::string::npos)
      << ack->reason;
  auto again = w.Await<JobMsg>();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->attempt, job->attempt + 1);
  JobResult probes = Answer(again->spec, again->job_key, again->attempt);
  probes.probes.push_back(ProbeSummary{1, 1, 0, 0, 1, true, 1, {0}, {0}});
  ASSERT_TRUE(w.Send(ResultMsg{probes}));
  ack = w.Await<AckMsg>();
  ASSERT_TRUE(ack);
  EXPECT_EQ(ack->status, AckStatus::kFailed);
  EXPECT_NE(ack->reason.find("did not ask for probes"), std::string::npos) << ack->reason;
  auto third = w.Await<JobMsg>();
  ASSERT_TRUE(third);
  ASSERT_TRUE(w.Send(ResultMsg{Answer(third->spec, third->job_key, third->attempt)}));
  auto summary = JoinServer();
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->done, 1);
  EXPECT_EQ(summary->implausible_results, 2);
  EXPECT_EQ(ResultsByKey().at(job->job_key).generated_tokens, 0);
  EXPECT_EQ(ResultsByKey().at(job->job_key).attempt, third->attempt);
}

// Issue 19: probes must name layers of the job's model that have an indexer. The coordinator
// reads the model's config.json (tiny-a: 3 layers, the indexer on layer 1) and refuses the rest.
TEST_F(ServerTest, ProbesOfLayersTheModelDoesNotHaveAreRefused) {
  test_support::TempDir dir("probe-layers");
  const std::filesystem::path model = dir.path();
  std::filesystem::copy_file(std::filesystem::path(NW_SOURCE_DIR) / "models/configs/tiny-a.json",
                             model / "config.json");
  JobSpec spec = Spec(0);
  spec.model_dir = model.string();
  spec.model_digest = std::string(64, 'a');
  spec.probe = true;
  ASSERT_TRUE(store_->AddJobs(campaign_, {spec}, 2).ok());
  const std::string ep = "inproc://server-test-probe-layers";
  SchedulerOptions timing = FastTiming();
  timing.max_attempts = 4;
  StartServer(ep, timing);
  RawWorker w(ctx_, ep);
  w.Ready("prober");
  auto probed = [](int layer) { return ProbeSummary{layer, 1, 0, 0, 1, true, 1, {0}, {0}}; };
  const std::vector<std::pair<std::vector<int>, std::string>> bad = {
      {{3}, "result.probes[0].layer: layer 3 does not exist in the model (3 layers)"},
      {{2}, "result.probes[0].layer: layer 2 has no indexer in the model (indexer layers: 1)"},
      {{1, 1}, "result.probes[1].layer: layer 1 is probed twice"}};
  for (const auto& [layers, why] : bad) {
    auto job = w.Await<JobMsg>();
    ASSERT_TRUE(job);
    JobResult r = Answer(job->spec, job->job_key, job->attempt);
    for (int l : layers) r.probes.push_back(probed(l));
    ASSERT_TRUE(w.Send(ResultMsg{r}));
    auto ack = w.Await<AckMsg>();
    ASSERT_TRUE(ack);
    EXPECT_EQ(ack->status, AckStatus::kFailed);
    EXPECT_NE(ack->reason.find(why), std::string::npos) << ack->reason;
  }
  auto job = w.Await<JobMsg>();
  ASSERT_TRUE(job);
  JobResult good = Answer(job->spec, job->job_key, job->attempt);
  good.probes.push_back(probed(1));
  ASSERT_TRUE(w.Send(ResultMsg{good}));
  auto summary = JoinServer();
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->done, 1);
  EXPECT_EQ(summary->implausible_results, 3);
}

// Issue 19: peer strings reach the log with their control bytes escaped: a worker id with a
// newline cannot forge a log line.
TEST_F(ServerTest, PeerStringsAreEscapedInTheLog) {
  AddJobs(1);
  const std::string ep = "inproc://server-test-logsafe";
  StartServer(ep);
  RawWorker w(ctx_, ep);
  w.Ready("evil\ncoordinator: FAKE\x1b[2J");
  auto job = w.Await<JobMsg>();
  ASSERT_TRUE(job);
  ASSERT_TRUE(w.Send(ResultMsg{Answer(job->spec, job->job_key, job->attempt)}));
  auto summary = JoinServer();
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_TRUE(rec_.Logged("worker evil\\x0acoordinator: FAKE\\x1b[2J ready"));
  for (const std::string& line : rec_.Lines()) {
    EXPECT_EQ(line.find('\n'), std::string::npos) << line;
    EXPECT_EQ(line.find('\x1b'), std::string::npos) << line;
  }
}

}  // namespace
}  // namespace nw
