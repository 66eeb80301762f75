// The boundary search run by the coordinator daemon (Server::Serve, `nw coordinator` + `nw
// submit`): a campaign with `search:` submitted over the control protocol with its grid and
// settings ends, on real Workers, with the boundary and the job set of `nw run`'s embedded run
// of the same campaign (RunEmbedded with the SearchDriver, as cli/cmd_run.cc assembles it); a
// daemon stopped part way and started again on the same database (a new Server) resumes the
// searches from the stored results and ends at the same place; STATUS reports the searches'
// progress. The executor answers by a known boundary per top-k and needle position. Waiting is by
// polling STATUS with deadlines.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "compose/embedded_run.h"
#include "coordinator/campaign/campaign.h"
#include "coordinator/control_client.h"
#include "coordinator/search/search_driver.h"
#include "coordinator/server.h"
#include "db/store.h"
#include "tests/campaign/campaign_test_util.h"
#include "worker/worker.h"

namespace nw {
namespace {

using json = nlohmann::json;
using testing_campaign::TempDir;
constexpr int64_t kDeadlineMs = 60'000;

// The longest length at which the fake model still finds the needle.
int64_t Limit(const JobSpec& s) {
  int64_t base = 1024;
  if (s.needle_position == 0.5) base = 2048;
  if (s.needle_position == 1.0) base = 4096;
  return base * (s.topk / 8);
}

// Holds executions once `hold_after` have started, until Release() (a daemon can then be
// stopped while jobs of the search are still running).
class Gate {
 public:
  void HoldAfter(int n) {
    std::lock_guard<std::mutex> l(mu_);
    hold_after_ = n;
  }
  void Enter() {
    std::unique_lock<std::mutex> l(mu_);
    ++started_;
    cv_.wait(l, [this] { return hold_after_ < 0 || started_ <= hold_after_; });
  }
  void Release() {
    {
      std::lock_guard<std::mutex> l(mu_);
      hold_after_ = -1;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int hold_after_ = -1;
  int started_ = 0;
};

// Answers by the oracle.
class OracleExecutor : public JobExecutor {
 public:
  explicit OracleExecutor(Gate& gate) : gate_(gate) {}
  JobResult Execute(const JobSpec& spec, const std::string& key, int attempt) override {
    gate_.Enter();
    JobResult r;
    r.job_key = key;
    r.attempt = attempt;
    r.outcome = spec.context_length <= Limit(spec) ? Outcome::kPass : Outcome::kMiss;
    r.expected = "x";
    r.generated_text = r.outcome == Outcome::kPass ? "x" : "y";
    r.device = "fake";
    r.engine_version = spec.engine_version;
    return r;
  }
  json Capabilities() const override {
    return json{{"backends", json::array({"cpu"})}, {"device", "fake"}};
  }

 private:
  Gate& gate_;
};

std::string Yaml(const std::string& model) {
  return "name: search\nmodel: " + model +
         "\n"
         "matrix:\n"
         "  context_length: {geometric: {from: 256, to: 32768, factor: 2}}\n"
         "  needle_position: [0.0, 0.5, 1.0]\n"
         "  topk: [8, 16]\n"
         "trials: 6\n"
         "criterion: {pass_rate: 0.5}\n"
         "search: {boundary: {first_trials: 1, confidence: 0.95}}\n";
}

using Bounds = std::map<std::string, std::pair<std::optional<int64_t>, std::optional<int64_t>>>;

class SearchDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing_campaign::WriteTinyModel(dir_.path() / "model");
    text_ = Yaml((dir_.path() / "model").string());
    auto c = ParseCampaignText(text_, "search.yaml");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    campaign_ = *c;
    auto r = ResolveCampaign(campaign_);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto jobs = ExpandCampaign(*r);
    ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
    grid_ = *jobs;
    ASSERT_EQ(grid_.size(), 288u);
    std::random_device rd;
    endpoint_ = "inproc://search-daemon-test-" + std::to_string(rd());
  }
  void TearDown() override {
    gate_.Release();
    StopServer();
    for (auto& w : workers_) w->Stop();
    for (auto& t : worker_threads_) t.join();
  }

  std::unique_ptr<Store> Open(const std::string& name) {
    auto s = Store::Open(dir_.path() / name);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return std::move(*s);
  }

  // `nw run` of the campaign: the embedded coordinator with the SearchDriver on its commits.
  int64_t RunEmbeddedSearch(Store& store) {
    auto driver = search::SearchDriver::Create(*campaign_.search, 6, grid_);
    EXPECT_TRUE(driver.ok()) << driver.status().ToString();
    auto id = store.UpsertCampaign("search", "search.yaml", text_, 1);
    EXPECT_TRUE(id.ok());
    auto asked = driver->Start(store);
    EXPECT_TRUE(asked.ok());
    EXPECT_TRUE(store.SetCampaignJobs(*id, *asked, 1).ok());
    RunOptions o;
    o.scheduler.heartbeat_interval_ms = 50;
    o.result_batch_ms = 5;
    o.on_committed = [&](const std::vector<JobResult>& results,
                         const std::vector<std::string>& given_up) {
      return driver->OnFinished(store, *id, results, given_up, 2);
    };
    std::vector<std::unique_ptr<JobExecutor>> ex;
    for (int i = 0; i < 2; ++i) ex.push_back(std::make_unique<OracleExecutor>(free_gate_));
    auto summary = RunEmbedded(store, *id, std::move(ex), o);
    EXPECT_TRUE(summary.ok()) << summary.status().ToString();
    EXPECT_EQ(summary->done, summary->total);
    return *id;
  }

  void StartServer(Store& store) {
    ServerOptions so;
    so.endpoint = endpoint_;
    so.scheduler.heartbeat_interval_ms = 50;
    so.scheduler.orphan_grace_ms = 5'000;
    so.result_batch_ms = 5;
    so.log = [this](std::string_view line) {
      std::lock_guard<std::mutex> l(log_mu_);
      log_ += std::string(line) + "\n";
    };
    server_ = std::make_unique<Server>(ctx_, store, clock_, std::move(so));
    server_thread_ = std::thread([this] { server_result_ = server_->Serve(); });
  }
  void StopServer() {
    if (!server_) return;
    server_->Stop();
    server_thread_.join();
    server_.reset();
    EXPECT_TRUE(server_result_.ok()) << server_result_.status().ToString() << "\n" << Log();
  }
  void StartWorkers(int n) {
    for (int i = 0; i < n; ++i) {
      WorkerOptions wo;
      wo.endpoint = endpoint_;
      wo.worker_id = "w" + std::to_string(i);
      wo.heartbeat_interval_ms = 50;
      wo.reconnect_initial_ms = 20;
      wo.reconnect_max_ms = 200;
      std::vector<std::unique_ptr<JobExecutor>> ex;
      ex.push_back(std::make_unique<OracleExecutor>(gate_));
      workers_.push_back(std::make_unique<Worker>(ctx_, clock_, wo, std::move(ex)));
      Worker* w = workers_.back().get();
      worker_threads_.emplace_back([w] { (void)w->Run(); });
    }
  }
  std::string Log() {
    std::lock_guard<std::mutex> l(log_mu_);
    return log_;
  }

  Result<SubmitReply> Submit() {
    ControlClientOptions co;
    co.endpoint = endpoint_;
    ControlClient client(ctx_, co);
    Submission s;
    s.campaign = "search";
    s.source_path = "search.yaml";
    s.source_text = text_;
    s.jobs = grid_;
    const BoundarySearchSettings& b = *campaign_.search;
    s.search = SubmitSearch{6, b.first_trials, b.confidence, b.pass_rate, b.budget};
    return client.Submit(s);
  }
  Result<CampaignStatus> Progress() {
    ControlClientOptions co;
    co.endpoint = endpoint_;
    ControlClient client(ctx_, co);
    NW_ASSIGN_OR_RETURN(StatusReply reply, client.QueryStatus("search"));
    if (reply.campaigns.size() != 1) return Status::Internal("expected one campaign");
    return reply.campaigns[0];
  }
  bool WaitFor(const std::function<bool(const CampaignStatus&)>& pred) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(kDeadlineMs);
    while (std::chrono::steady_clock::now() < end) {
      auto st = Progress();
      if (st.ok() && pred(*st)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  static std::set<std::string> JobKeys(Store& store, int64_t id) {
    auto jobs = store.CampaignJobs(id);
    EXPECT_TRUE(jobs.ok());
    std::set<std::string> out;
    for (const auto& j : *jobs) out.insert(j.key);
    return out;
  }
  static Bounds BoundsOf(Store& store, int64_t id) {
    auto rows = store.Boundaries(id);
    EXPECT_TRUE(rows.ok());
    Bounds out;
    for (const auto& b : *rows) out[b.config] = {b.l_pass, b.l_fail};
    return out;
  }

  TempDir dir_;
  std::string text_;
  Campaign campaign_;
  std::vector<JobSpec> grid_;
  std::string endpoint_;
  zmq::context_t ctx_;
  SystemClock clock_;
  Gate gate_, free_gate_;
  std::unique_ptr<Server> server_;
  std::thread server_thread_;
  Result<RunSummary> server_result_ = Status::Internal("not run");
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> worker_threads_;
  std::mutex log_mu_;
  std::string log_;
};

TEST_F(SearchDaemonTest, TheDaemonFindsTheBoundaryAndJobsOfNwRun) {
  auto ref_db = Open("run.db");
  const int64_t ref_id = RunEmbeddedSearch(*ref_db);
  const auto ref_keys = JobKeys(*ref_db, ref_id);
  ASSERT_EQ(ref_keys.size(), 78u);  // search_run_test: 13 jobs per line (exact verdicts), 6 lines

  auto db = Open("daemon.db");
  StartServer(*db);
  StartWorkers(2);
  auto reply = Submit();
  ASSERT_TRUE(reply.ok()) << reply.status().ToString() << "\n" << Log();
  EXPECT_TRUE(reply->complete);
  EXPECT_EQ(reply->jobs, 6);  // the first probe of each line, not the 288 of the grid
  ASSERT_TRUE(WaitFor([](const CampaignStatus& c) { return c.state == "finished"; })) << Log();
  auto st = Progress();
  ASSERT_TRUE(st.ok());
  ASSERT_TRUE(st->search.has_value());
  EXPECT_EQ(st->search->grid_jobs, 288);
  EXPECT_EQ(st->search->asked_jobs, 78);
  EXPECT_EQ(st->search->lines, 6);
  EXPECT_EQ(st->search->lines_finished, 6);
  EXPECT_EQ(st->total, 78);
  EXPECT_EQ(st->done, 78);
  StopServer();

  EXPECT_EQ(JobKeys(*db, reply->campaign_id), ref_keys);
  EXPECT_EQ(BoundsOf(*db, reply->campaign_id), BoundsOf(*ref_db, ref_id));
  EXPECT_EQ(BoundsOf(*db, reply->campaign_id).size(), 2u);
}

TEST_F(SearchDaemonTest, ARestartedDaemonResumesTheSearchFromTheStoredResults) {
  auto ref_db = Open("run.db");
  const int64_t ref_id = RunEmbeddedSearch(*ref_db);

  auto db = Open("daemon.db");
  StartServer(*db);
  gate_.HoldAfter(14);  // 14 executions go through; the next ones wait for the restart
  StartWorkers(2);
  auto reply = Submit();
  ASSERT_TRUE(reply.ok()) << reply.status().ToString() << "\n" << Log();
  ASSERT_TRUE(WaitFor([](const CampaignStatus& c) { return c.done >= 12 && c.leased > 0; }))
      << Log();
  auto before = Progress();
  ASSERT_TRUE(before.ok() && before->search.has_value());
  EXPECT_LT(before->search->asked_jobs, 78);
  EXPECT_EQ(before->search->lines_finished, 0);
  StopServer();  // leases stay recorded; the workers reconnect to the next daemon
  const std::set<std::string> asked_before = JobKeys(*db, reply->campaign_id);
  EXPECT_LT(asked_before.size(), 78u);

  StartServer(*db);
  gate_.Release();
  ASSERT_TRUE(WaitFor([](const CampaignStatus& c) { return c.state == "finished"; })) << Log();
  auto after = Progress();
  ASSERT_TRUE(after.ok() && after->search.has_value());
  EXPECT_EQ(after->search->asked_jobs, 78);
  EXPECT_EQ(after->search->lines_finished, 6);
  EXPECT_EQ(after->done, 78);
  StopServer();
  const auto keys = JobKeys(*db, reply->campaign_id);
  for (const auto& k : asked_before) EXPECT_TRUE(keys.count(k)) << k;
  EXPECT_EQ(keys, JobKeys(*ref_db, ref_id));
  EXPECT_EQ(BoundsOf(*db, reply->campaign_id), BoundsOf(*ref_db, ref_id));
  EXPECT_NE(Log().find("took back"), std::string::npos) << Log();  // held leases adopted
}

TEST_F(SearchDaemonTest, RerunOfASearchIsRefusedWithTheReason) {
  auto db = Open("daemon.db");
  StartServer(*db);
  ControlClientOptions co;
  co.endpoint = endpoint_;
  ControlClient client(ctx_, co);
  Submission s;
  s.campaign = "search";
  s.source_text = text_;
  s.jobs = grid_;
  s.rerun = true;
  s.search = SubmitSearch{6, 1, 0.95, 0.5, std::nullopt};
  auto reply = client.Submit(s);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(reply.status().message().find("rerun is not supported for a boundary search"),
            std::string::npos)
      << reply.status().ToString();
  // A search whose grid lacks a trial is refused whole, naming it.
  s.rerun = false;
  s.jobs.pop_back();
  auto short_grid = client.Submit(s);
  ASSERT_FALSE(short_grid.ok());
  EXPECT_NE(short_grid.status().message().find("boundary search"), std::string::npos)
      << short_grid.status().ToString();
}

}  // namespace
}  // namespace nw
