// The scheduler with several campaigns (FakeClock, no sockets): priorities, fair share, pause,
// cancel, jobs shared between campaigns, finished campaigns leaving memory, orphan leases after
// a coordinator restart, prefetch, and model / engine-version matching.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "coordinator/scheduler.h"

namespace nw {
namespace {

JobSpec Spec(int trial, const std::string& model = "m0", const std::string& backend = "cpu") {
  JobSpec s;
  s.model_dir = "/models/" + model;
  s.model_digest = model;
  s.engine_version = "e1";
  s.task = "niah-single";
  s.haystack = "noise";
  s.context_length = 512;
  s.needle_position = 0.5;
  s.topk = 16;
  s.backend = backend;
  s.seed = 3;
  s.trial = trial;
  return s;
}

WorkerInfo Worker(const std::string& id, int slots,
                  nlohmann::json extra = nlohmann::json::object()) {
  WorkerInfo w;
  w.id = id;
  w.host = "h";
  w.slots = slots;
  w.capabilities = {{"backends", {"cpu"}}, {"device", "cpu"}};
  for (auto& [k, v] : extra.items()) w.capabilities[k] = v;
  return w;
}

JobResult ResultFor(const Grant& g) {
  JobResult r;
  r.job_key = g.job_key;
  r.attempt = g.attempt;
  r.outcome = Outcome::kPass;
  return r;
}

SchedulerOptions Options() {
  SchedulerOptions o;
  o.heartbeat_interval_ms = 1000;
  o.lease_ms = 60'000;
  o.retry_backoff_initial_ms = 1000;
  o.orphan_grace_ms = 10'000;
  return o;
}

// Adds n jobs "<prefix>0".. to a campaign.
void AddJobs(Scheduler& s, int64_t campaign, const std::string& prefix, int n,
             const std::string& model = "m0") {
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(s.AddCampaignJob(campaign, prefix + std::to_string(i), Spec(i, model), 0).ok());
  }
}

std::map<char, int> ByPrefix(const std::vector<Grant>& grants) {
  std::map<char, int> out;
  for (const auto& g : grants) out[g.job_key[0]]++;
  return out;
}

class CampaignSchedulerTest : public ::testing::Test {
 protected:
  FakeClock clock_;
};

TEST_F(CampaignSchedulerTest, EqualPrioritiesShareTheWorkersFairly) {
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddCampaign(1, "a", 0).ok());
  ASSERT_TRUE(s.AddCampaign(2, "b", 0).ok());
  AddJobs(s, 1, "a", 20);
  AddJobs(s, 2, "b", 20);
  s.OnReady(Worker("w1", 3), {});
  s.OnReady(Worker("w2", 3), {});
  auto ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 6u);
  EXPECT_EQ(ByPrefix(ev.grants), (std::map<char, int>{{'a', 3}, {'b', 3}}));
  // As results come back one at a time, each freed slot goes to the campaign with fewer leases.
  for (int round = 0; round < 10; ++round) {
    ASSERT_EQ(s.OnResult(ev.grants[0].worker_id, ResultFor(ev.grants[0])).verdict,
              ResultVerdict::kCommit);
    ev.grants.erase(ev.grants.begin());
    auto more = s.Tick();
    ASSERT_EQ(more.grants.size(), 1u);
    ev.grants.push_back(more.grants[0]);
    const auto a = s.CountsOf(1).value().leased;
    const auto b = s.CountsOf(2).value().leased;
    EXPECT_LE(std::abs(a - b), 1) << "round " << round;
  }
}

TEST_F(CampaignSchedulerTest, HigherPriorityCampaignGoesFirstAndPauseHoldsACampaign) {
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddCampaign(1, "low", -1).ok());
  ASSERT_TRUE(s.AddCampaign(2, "high", 5).ok());
  AddJobs(s, 1, "l", 3);
  AddJobs(s, 2, "h", 2);
  s.OnReady(Worker("w", 3), {});
  auto ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 3u);
  EXPECT_EQ(ByPrefix(ev.grants), (std::map<char, int>{{'h', 2}, {'l', 1}}));
  for (const auto& g : ev.grants)
    ASSERT_EQ(s.OnResult("w", ResultFor(g)).verdict, ResultVerdict::kCommit);

  // Paused: the low campaign gets nothing, even with every slot free.
  ASSERT_TRUE(s.SetCampaignPaused(1, true).ok());
  EXPECT_TRUE(s.Tick().grants.empty());
  EXPECT_EQ(s.CountsOf(1).value().queued, 2);
  ASSERT_TRUE(s.SetCampaignPaused(1, false).ok());
  EXPECT_EQ(s.Tick().grants.size(), 2u);
  EXPECT_EQ(s.SetCampaignPaused(9, true).code(), StatusCode::kNotFound);
  EXPECT_EQ(s.SetCampaignPriority(9, 1).code(), StatusCode::kNotFound);
  EXPECT_EQ(s.AddCampaign(1, "again", 0).code(), StatusCode::kAlreadyExists);
}

TEST_F(CampaignSchedulerTest, SharedJobRunsOnceForBothCampaigns) {
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddCampaign(1, "a", 0).ok());
  ASSERT_TRUE(s.AddCampaign(2, "b", 0).ok());
  ASSERT_TRUE(s.AddCampaignJob(1, "shared", Spec(0), 0).ok());
  ASSERT_TRUE(s.AddCampaignJob(2, "shared", Spec(0), 0).ok());
  EXPECT_EQ(s.AddCampaignJob(2, "shared", Spec(0), 0).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(s.Counts().total, 1);
  s.OnReady(Worker("w", 4), {});
  auto ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 1u);
  EXPECT_EQ(s.CountsOf(1).value().leased, 1);
  EXPECT_EQ(s.CountsOf(2).value().leased, 1);
  ASSERT_EQ(s.OnResult("w", ResultFor(ev.grants[0])).verdict, ResultVerdict::kCommit);
  EXPECT_EQ(s.CountsOf(1).value().done, 1);
  EXPECT_EQ(s.CountsOf(2).value().done, 1);
  // A campaign that joins a job already done counts it as done.
  ASSERT_TRUE(s.AddCampaign(3, "c", 0).ok());
  ASSERT_TRUE(s.AddCampaignJob(3, "shared", Spec(0), 0).ok());
  EXPECT_EQ(s.CountsOf(3).value(), (CampaignCounts{0, 0, 1, 0}));
  EXPECT_TRUE(s.Tick().grants.empty());
}

TEST_F(CampaignSchedulerTest, CancelTakesQueuedJobsOutButRunningOnesFinish) {
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddCampaign(1, "a", 0).ok());
  ASSERT_TRUE(s.AddCampaign(2, "b", 0).ok());
  AddJobs(s, 1, "a", 4);
  ASSERT_TRUE(s.AddCampaignJob(2, "a3", Spec(3), 0).ok());  // shared with b
  s.OnReady(Worker("w", 1), {});
  auto ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 1u);
  const Grant running = ev.grants[0];
  ASSERT_EQ(running.job_key, "a0");
  auto removed = s.RemoveCampaign(1);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 2);  // a1, a2 (a0 runs; a3 stays for b)
  EXPECT_FALSE(s.HasCampaign(1));
  EXPECT_EQ(s.StateOf("a1"), "unknown");
  EXPECT_EQ(s.StateOf("a3"), "queued");
  EXPECT_EQ(s.StateOf("a0"), "leased");
  // The running attempt's result is still accepted (it is an answer), and then forgotten.
  EXPECT_EQ(s.OnResult("w", ResultFor(running)).verdict, ResultVerdict::kCommit);
  ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 1u);
  EXPECT_EQ(ev.grants[0].job_key, "a3");
  EXPECT_EQ(s.StateOf("a0"), "unknown");
  EXPECT_EQ(s.RemoveCampaign(1).status().code(), StatusCode::kNotFound);
}

TEST_F(CampaignSchedulerTest, FinishedCampaignsLeaveWithTheirJobs) {
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddCampaign(1, "a", 0).ok());
  ASSERT_TRUE(s.AddCampaign(2, "b", 0).ok());
  AddJobs(s, 1, "a", 2);
  AddJobs(s, 2, "b", 1);
  s.OnReady(Worker("w", 3), {});
  auto ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 3u);
  for (const auto& g : ev.grants) {
    if (g.job_key[0] == 'a') {
      ASSERT_EQ(s.OnResult("w", ResultFor(g)).verdict, ResultVerdict::kCommit);
    }
  }
  EXPECT_EQ(s.TakeFinishedCampaigns(), (std::vector<int64_t>{1}));
  EXPECT_FALSE(s.HasCampaign(1));
  EXPECT_EQ(s.CountsOf(1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s.StateOf("a0"), "unknown");  // its jobs left memory too
  EXPECT_TRUE(s.HasCampaign(2));
  for (const auto& g : ev.grants) {
    if (g.job_key[0] == 'b') {
      ASSERT_EQ(s.OnResult("w", ResultFor(g)).verdict, ResultVerdict::kCommit);
    }
  }
  EXPECT_EQ(s.TakeFinishedCampaigns(), (std::vector<int64_t>{2}));
  EXPECT_EQ(s.Counts().total, 0);
  EXPECT_TRUE(s.TakeFinishedCampaigns().empty());
}

TEST_F(CampaignSchedulerTest, OrphanLeaseIsAdoptedByItsWorkerWithoutANewAttempt) {
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddCampaign(1, "a", 0).ok());
  const int64_t expires = clock_.NowMs() + 50'000;
  ASSERT_TRUE(s.AddOrphanLease(1, "k", Spec(0), 4, "w-old", expires).ok());
  EXPECT_EQ(s.StateOf("k"), "leased");
  EXPECT_EQ(s.AttemptOf("k"), 4);
  EXPECT_TRUE(s.Tick().empty());  // nobody to give it to; it waits
  auto ev = s.OnReady(Worker("w-old", 1), {{"k", 4}});
  EXPECT_TRUE(ev.failures.empty());
  ASSERT_EQ(ev.adopted.size(), 1u);
  EXPECT_EQ(ev.adopted[0], (AttemptRef{"k", 4}));
  // Adopted: it keeps its own lease expiry, not the grace period.
  clock_.Advance(20'000);
  ASSERT_TRUE(s.OnHeartbeat("w-old").ok());
  EXPECT_TRUE(s.Tick().failures.empty());
  JobResult r;
  r.job_key = "k";
  r.attempt = 4;
  r.outcome = Outcome::kMiss;
  EXPECT_EQ(s.OnResult("w-old", r).verdict, ResultVerdict::kCommit);
  EXPECT_EQ(s.StateOf("k"), "done");
}

TEST_F(CampaignSchedulerTest, OrphanLeaseFailsWhenItsWorkerComesBackWithoutIt) {
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddCampaign(1, "a", 0).ok());
  ASSERT_TRUE(s.AddOrphanLease(1, "k", Spec(0), 2, "w-old", clock_.NowMs() + 50'000).ok());
  auto ev = s.OnReady(Worker("w-old", 1), {});
  ASSERT_EQ(ev.failures.size(), 1u);
  EXPECT_EQ(ev.failures[0].attempt, 2);
  EXPECT_TRUE(ev.failures[0].will_retry);
  EXPECT_NE(ev.failures[0].reason.message().find("without attempt 2"), std::string::npos);
  // Requeued after the first backoff, as attempt 3 (numbers are never reused).
  clock_.Advance(1000);
  ASSERT_TRUE(s.OnHeartbeat("w-old").ok());
  ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 1u);
  EXPECT_EQ(ev.grants[0].attempt, 3);
}

TEST_F(CampaignSchedulerTest, OrphanLeaseFailsAtTheEndOfTheGracePeriod) {
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddCampaign(1, "a", 0).ok());
  ASSERT_TRUE(s.AddOrphanLease(1, "k", Spec(0), 1, "gone", clock_.NowMs() + 60'000).ok());
  EXPECT_EQ(s.NextDeadlineMs().value(), clock_.NowMs() + 10'000);
  clock_.Advance(9'999);
  EXPECT_TRUE(s.Tick().failures.empty());
  clock_.Advance(1);
  auto ev = s.Tick();
  ASSERT_EQ(ev.failures.size(), 1u);
  EXPECT_EQ(ev.failures[0].reason.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(ev.failures[0].will_retry);
  EXPECT_EQ(s.StateOf("k"), "queued");
  // A result for it from that worker, arriving later, is from a superseded lease.
  s.OnReady(Worker("gone", 1), {});
  JobResult r;
  r.job_key = "k";
  r.attempt = 1;
  EXPECT_EQ(s.OnResult("gone", r).verdict, ResultVerdict::kStale);
}

TEST_F(CampaignSchedulerTest, HeldAttemptsThatAreNotLeasesOccupySlots) {
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddCampaign(1, "a", 0).ok());
  AddJobs(s, 1, "a", 3);
  // A worker from before a restart still runs an attempt this coordinator does not know.
  s.OnReady(Worker("w", 2), {{"elsewhere", 7}});
  auto ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 1u);  // one of its two slots is busy
  JobResult r;
  r.job_key = "elsewhere";
  r.attempt = 7;
  EXPECT_EQ(s.OnResult("w", r).verdict, ResultVerdict::kUnknownJob);
  EXPECT_EQ(s.Tick().grants.size(), 1u);  // the slot is free again
}

TEST_F(CampaignSchedulerTest, PrefetchAndMatchingOnModelsAndEngineVersions) {
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddCampaign(1, "a", 0).ok());
  AddJobs(s, 1, "x", 4, "m0");
  AddJobs(s, 1, "y", 4, "m1");
  // One slot and two prefetched: three jobs, all of the one model it can load.
  s.OnReady(Worker("w", 1, {{"prefetch", 2}, {"models", {"m1"}}}), {});
  auto ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 3u);
  for (const auto& g : ev.grants) EXPECT_EQ(g.spec.model_digest, "m1");
  // Another engine version: nothing.
  s.OnReady(Worker("old", 2, {{"engine_versions", {"e0"}}}), {});
  EXPECT_TRUE(s.Tick().grants.empty());
  s.OnReady(Worker("new", 2, {{"engine_versions", {"e1"}}}), {});
  ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 2u);
  for (const auto& g : ev.grants) EXPECT_EQ(g.worker_id, "new");
  // The grant carries the full spec, rebuilt from the interned parts.
  EXPECT_EQ(ev.grants[0].spec.Key(),
            Spec(ev.grants[0].spec.trial, ev.grants[0].spec.model_digest).Key());
}

// Two single-slot workers; "a" runs j0 (the straggler), "b" finishes j1 and then idles.
struct HedgeSetup {
  Grant straggler;
};

HedgeSetup StartStraggler(Scheduler& s, FakeClock& clock) {
  HedgeSetup h;
  EXPECT_TRUE(s.AddJob("j0", Spec(0), 0).ok());
  s.OnReady(Worker("a", 1), {});
  h.straggler = s.Tick().grants.at(0);
  EXPECT_TRUE(s.AddJob("j1", Spec(1), 0).ok());
  s.OnReady(Worker("b", 1), {});
  const Grant quick = s.Tick().grants.at(0);
  EXPECT_EQ(quick.worker_id, "b");
  EXPECT_EQ(s.OnResult("b", ResultFor(quick)).verdict, ResultVerdict::kCommit);
  clock.Advance(500);
  EXPECT_TRUE(s.OnHeartbeat("a").ok());
  EXPECT_TRUE(s.OnHeartbeat("b").ok());
  EXPECT_TRUE(s.Tick().grants.empty());  // not old enough yet
  clock.Advance(500);
  EXPECT_TRUE(s.OnHeartbeat("a").ok());
  EXPECT_TRUE(s.OnHeartbeat("b").ok());
  return h;
}

SchedulerOptions HedgeOptions() {
  SchedulerOptions o = Options();
  o.hedge_after_ms = 1000;
  o.max_attempts = 1;  // hedges do not count against it
  return o;
}

TEST_F(CampaignSchedulerTest, SlowestLeaseIsHedgedOnAnIdleWorkerAndTheFirstResultWins) {
  Scheduler s(clock_, HedgeOptions());
  const HedgeSetup h = StartStraggler(s, clock_);
  auto ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 1u);
  const Grant hedge = ev.grants[0];
  EXPECT_TRUE(hedge.hedge);
  EXPECT_EQ(hedge.worker_id, "b");
  EXPECT_EQ(hedge.job_key, "j0");
  EXPECT_EQ(hedge.attempt, 2);
  EXPECT_EQ(s.Counts().leased, 1);       // one job, two leases
  EXPECT_TRUE(s.Tick().grants.empty());  // at most one hedge per job
  // The hedge answers first: committed. The straggler's answer is then stale.
  EXPECT_EQ(s.OnResult("b", ResultFor(hedge)).verdict, ResultVerdict::kCommit);
  auto late = s.OnResult("a", ResultFor(h.straggler));
  EXPECT_EQ(late.verdict, ResultVerdict::kStale);
  EXPECT_NE(late.reason.find("already done by attempt 2"), std::string::npos) << late.reason;
  EXPECT_TRUE(s.Finished());
}

TEST_F(CampaignSchedulerTest, TheStragglerCanStillWinAndTheHedgeSlotWaitsForItsReport) {
  Scheduler s(clock_, HedgeOptions());
  const HedgeSetup h = StartStraggler(s, clock_);
  const Grant hedge = s.Tick().grants.at(0);
  EXPECT_EQ(s.OnResult("a", ResultFor(h.straggler)).verdict, ResultVerdict::kCommit);
  // b still runs the hedge: its slot is busy until it reports.
  ASSERT_TRUE(s.AddJob("j2", Spec(2), 0).ok());
  auto ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 1u);
  EXPECT_EQ(ev.grants[0].worker_id, "a");
  EXPECT_EQ(s.OnResult("b", ResultFor(hedge)).verdict, ResultVerdict::kStale);
}

TEST_F(CampaignSchedulerTest, LosingOneOfTwoLeasesKeepsTheJobLeased) {
  Scheduler s(clock_, HedgeOptions());
  const HedgeSetup h = StartStraggler(s, clock_);
  const Grant hedge = s.Tick().grants.at(0);
  // The hedging worker leaves: its attempt fails, the straggler's lease carries on.
  auto ev = s.OnDisconnect("b", "bye");
  ASSERT_EQ(ev.failures.size(), 1u);
  EXPECT_EQ(ev.failures[0].attempt, hedge.attempt);
  EXPECT_TRUE(ev.failures[0].will_retry);
  EXPECT_EQ(s.StateOf("j0"), "leased");
  // The straggler's worker dies too: now the job is out of leases, and with max_attempts 1
  // (hedges are not counted) it fails.
  clock_.Advance(3001);
  ev = s.Tick();
  ASSERT_EQ(ev.failures.size(), 1u);
  EXPECT_EQ(ev.failures[0].attempt, h.straggler.attempt);
  EXPECT_FALSE(ev.failures[0].will_retry);
  EXPECT_EQ(s.StateOf("j0"), "failed");
}

TEST_F(CampaignSchedulerTest, NoHedgeWhileWorkIsQueuedOrWhenOff) {
  Scheduler s(clock_, HedgeOptions());
  const HedgeSetup h = StartStraggler(s, clock_);
  ASSERT_TRUE(s.AddJob("j2", Spec(2), 0).ok());
  auto ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 1u);
  EXPECT_FALSE(ev.grants[0].hedge);  // queued work first
  EXPECT_EQ(ev.grants[0].job_key, "j2");

  FakeClock clock2;
  SchedulerOptions off = HedgeOptions();
  off.hedge_after_ms = 0;
  Scheduler s2(clock2, off);
  StartStraggler(s2, clock2);
  clock2.Advance(100'000 - 1000);
  ASSERT_TRUE(s2.OnHeartbeat("a").ok());
  ASSERT_TRUE(s2.OnHeartbeat("b").ok());
  EXPECT_TRUE(s2.Tick().grants.empty());
  (void)h;
}

TEST_F(CampaignSchedulerTest, TheCoordinatorsOwnStallIsNotHeldAgainstWorkers) {
  Scheduler s(clock_, Options());
  s.OnReady(Worker("w", 1), {});
  clock_.Advance(2500);
  s.ExcuseSilence(2500);  // e.g. a long submission was being written
  clock_.Advance(2500);
  EXPECT_TRUE(s.Tick().lost_workers.empty());
  clock_.Advance(501);
  EXPECT_EQ(s.Tick().lost_workers.size(), 1u);
}

TEST_F(CampaignSchedulerTest, AGrantCarriesEveryFieldOfTheSpec) {
  // The scheduler keeps specs in two parts (shared, per job); what it grants must be the spec
  // it was given, field for field. A field added to JobSpec and not carried fails here.
  JobSpec full = Spec(3, "m9", "http");
  full.model_dir = "/srv/models/m9";
  full.engine_version = "e9";
  full.task = "niah-multikey";
  full.haystack = "essay";
  full.context_length = 12345;
  full.needle_position = -30;
  full.topk = 77;
  full.precision = NamedPrecisionProfile("fp8-index").value();
  full.seed = 99;
  full.max_new_tokens = 7;
  full.probe = true;
  HttpBackendSpec http;
  http.url = "http://server:8000";
  http.model = "m";
  http.api = "chat";
  http.headers = {{"X-A", "b"}};
  http.concurrency = 3;
  full.http = http;
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddJob(full.Key(), full, 0).ok());
  WorkerInfo w = Worker("w", 1);
  w.capabilities["backends"] = {"http"};
  s.OnReady(w, {});
  const Grant g = s.Tick().grants.at(0);
  EXPECT_EQ(g.spec.ToJson(), full.ToJson());
  EXPECT_EQ(g.spec.Key(), full.Key());
}

TEST_F(CampaignSchedulerTest, RequeuePutsAFinishedJobBack) {
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddJob("k", Spec(0), 0).ok());
  s.OnReady(Worker("w", 1), {});
  auto g = s.Tick().grants.at(0);
  ASSERT_EQ(s.OnResult("w", ResultFor(g)).verdict, ResultVerdict::kCommit);
  ASSERT_TRUE(s.Requeue("k").ok());
  EXPECT_EQ(s.StateOf("k"), "queued");
  auto again = s.Tick().grants;
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].attempt, 2);
  EXPECT_EQ(s.Requeue("nope").code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace nw
