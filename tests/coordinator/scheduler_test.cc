// The scheduler state machine, driven by a FakeClock: leases, expiry, worker death, retries with
// backoff, fencing, max attempts, capability matching, priorities and model affinity.
#include "coordinator/scheduler.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace nw {
namespace {

JobSpec Spec(const std::string& backend, int trial, const std::string& model = "m0") {
  JobSpec s;
  s.model_dir = "/models/" + model;
  s.model_digest = model;
  s.engine_version = "test";
  s.task = "niah-single";
  s.haystack = "noise";
  s.context_length = 1024;
  s.needle_position = 0.5;
  s.topk = 16;
  s.backend = backend;
  s.seed = 1;
  s.trial = trial;
  return s;
}

WorkerInfo Worker(const std::string& id, std::vector<std::string> backends, int slots = 1) {
  WorkerInfo w;
  w.id = id;
  w.host = "h";
  w.slots = slots;
  w.capabilities = {{"backends", backends}, {"device", "cpu"}};
  return w;
}

JobResult ResultFor(const Grant& g, Outcome outcome = Outcome::kPass) {
  JobResult r;
  r.job_key = g.job_key;
  r.attempt = g.attempt;
  r.outcome = outcome;
  r.worker_id = g.worker_id;
  return r;
}

JobResult EngineError(const Grant& g, const std::string& code, bool retryable) {
  JobResult r = ResultFor(g, Outcome::kEngineError);
  r.error_code = code;
  r.error_message = "boom";
  r.retryable = retryable;
  return r;
}

class SchedulerTest : public ::testing::Test {
 protected:
  SchedulerOptions Options() {
    SchedulerOptions o;
    o.heartbeat_interval_ms = 1000;
    o.heartbeat_liveness = 3;
    o.lease_ms = 60'000;
    o.retry_backoff_initial_ms = 1000;
    o.retry_backoff_max_ms = 32'000;
    o.max_attempts = 3;
    return o;
  }
  FakeClock clock_;
};

TEST_F(SchedulerTest, OptionsValidate) {
  EXPECT_TRUE(SchedulerOptions{}.Validate().ok());
  SchedulerOptions o;
  o.max_attempts = 0;
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);
  o = SchedulerOptions{};
  o.retry_backoff_max_ms = 10;
  EXPECT_FALSE(o.Validate().ok());
  o = SchedulerOptions{};
  o.heartbeat_interval_ms = 0;
  EXPECT_FALSE(o.Validate().ok());
}

// Every field of a job's spec survives the scheduler's interning: what a worker is sent is what
// was submitted (a fault dropped here ran every faulted campaign clean).
TEST_F(SchedulerTest, SpecOfJobRoundTripsEveryField) {
  Scheduler s(clock_, Options());
  JobSpec a = Spec("cpu-pd", 3);
  a.fault = "ragged-key-offset";
  a.context_length = 2047;
  a.needle_position = 0.25;
  a.topk = 7;
  a.max_new_tokens = 9;
  a.probe = true;
  a.seed = 12345;
  JobSpec b = a;
  b.fault = "none";
  ASSERT_TRUE(s.AddJob("a", a, 0).ok());
  ASSERT_TRUE(s.AddJob("b", b, 0).ok());
  for (const auto& [key, want] : {std::pair<std::string, JobSpec>{"a", a}, {"b", b}}) {
    const std::optional<JobSpec> got = s.SpecOfJob(key);
    ASSERT_TRUE(got.has_value()) << key;
    EXPECT_EQ(got->ToJson(), want.ToJson()) << key;
  }
}

TEST_F(SchedulerTest, HappyPathQueuedLeasedDone) {
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddJob("a", Spec("cpu", 0), 0).ok());
  ASSERT_TRUE(s.AddJob("b", Spec("cpu", 1), 0).ok());
  EXPECT_EQ(s.AddJob("a", Spec("cpu", 0), 0).code(), StatusCode::kAlreadyExists);
  EXPECT_FALSE(s.Finished());
  EXPECT_TRUE(s.Tick().grants.empty());  // no workers yet

  EXPECT_TRUE(s.OnReady(Worker("w1", {"cpu"}), {}).empty());
  SchedulerEvents ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 1u);  // one slot
  const Grant g = ev.grants[0];
  EXPECT_EQ(g.worker_id, "w1");
  EXPECT_EQ(g.job_key, "a");  // oldest first
  EXPECT_EQ(g.attempt, 1);
  EXPECT_EQ(g.lease_ms, 60'000);
  EXPECT_EQ(g.lease_expires_ms, clock_.NowMs() + 60'000);
  EXPECT_EQ(g.spec.trial, 0);
  EXPECT_EQ(s.StateOf("a"), "leased");
  EXPECT_EQ(s.Counts(), (SchedulerCounts{2, 1, 1, 0, 0, 1}));
  EXPECT_TRUE(s.Tick().grants.empty());  // the slot is busy

  ResultDecision d = s.OnResult("w1", ResultFor(g));
  EXPECT_EQ(d.verdict, ResultVerdict::kCommit);
  EXPECT_EQ(s.StateOf("a"), "done");
  ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 1u);
  EXPECT_EQ(ev.grants[0].job_key, "b");
  EXPECT_EQ(s.OnResult("w1", ResultFor(ev.grants[0], Outcome::kMiss)).verdict,
            ResultVerdict::kCommit);
  EXPECT_TRUE(s.Finished());
  EXPECT_EQ(s.Counts(), (SchedulerCounts{2, 0, 0, 2, 0, 1}));
}

TEST_F(SchedulerTest, AttemptNumbersContinueFromPriorRuns) {
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddJob("a", Spec("cpu", 0), 4).ok());
  s.OnReady(Worker("w1", {"cpu"}), {});
  auto ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 1u);
  EXPECT_EQ(ev.grants[0].attempt, 5);
  // A result for an attempt of an earlier run is fenced off.
  JobResult old = ResultFor(ev.grants[0]);
  old.attempt = 4;
  EXPECT_EQ(s.OnResult("w1", old).verdict, ResultVerdict::kStale);
  EXPECT_EQ(s.StateOf("a"), "leased");
}

TEST_F(SchedulerTest, SlotsAndSpreadAcrossWorkers) {
  Scheduler s(clock_, Options());
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(s.AddJob("j" + std::to_string(i), Spec("cpu", i), 0).ok());
  s.OnReady(Worker("w1", {"cpu"}, 2), {});
  s.OnReady(Worker("w2", {"cpu"}, 2), {});
  auto ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 4u);
  int w1 = 0, w2 = 0;
  for (const auto& g : ev.grants) (g.worker_id == "w1" ? w1 : w2)++;
  EXPECT_EQ(w1, 2);
  EXPECT_EQ(w2, 2);
  // Round robin: the first two grants go to different workers.
  EXPECT_NE(ev.grants[0].worker_id, ev.grants[1].worker_id);
  EXPECT_EQ(s.Counts().queued, 1);
}

TEST_F(SchedulerTest, CapabilityMatching) {
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddJob("gpu", Spec("cuda", 0), 0).ok());
  ASSERT_TRUE(s.AddJob("cpu", Spec("cpu", 1), 0).ok());
  ASSERT_TRUE(s.AddJob("paged", Spec("cpu-paged", 2), 0).ok());
  s.OnReady(Worker("c", {"cpu", "cpu-paged"}, 4), {});
  auto ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 2u);
  for (const auto& g : ev.grants) EXPECT_NE(g.job_key, "gpu");
  EXPECT_EQ(s.StateOf("gpu"), "queued");
  // A worker without any backend list gets nothing.
  WorkerInfo bare = Worker("bare", {});
  bare.capabilities = {{"device", "x"}};
  s.OnReady(bare, {});
  EXPECT_TRUE(s.Tick().grants.empty());
  // A CUDA worker takes it.
  s.OnReady(Worker("g", {"cuda"}), {});
  ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 1u);
  EXPECT_EQ(ev.grants[0].job_key, "gpu");
  EXPECT_EQ(ev.grants[0].worker_id, "g");
}

TEST_F(SchedulerTest, DropUnschedulable) {
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddJob("gpu", Spec("cuda", 0), 0).ok());
  ASSERT_TRUE(s.AddJob("cpu", Spec("cpu", 1), 0).ok());
  s.OnReady(Worker("c", {"cpu"}), {});
  auto skipped = s.DropUnschedulable();
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].job_key, "gpu");
  EXPECT_EQ(skipped[0].reason.code(), StatusCode::kUnsupported);
  EXPECT_NE(skipped[0].reason.message().find("'cuda' (workers offer: cpu)"), std::string::npos);
  EXPECT_EQ(s.StateOf("gpu"), "unknown");  // out of the run
  EXPECT_EQ(s.StateOf("cpu"), "queued");
  EXPECT_EQ(s.Counts(), (SchedulerCounts{1, 1, 0, 0, 0, 1}));
  auto ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 1u);
  EXPECT_EQ(s.OnResult("c", ResultFor(ev.grants[0])).verdict, ResultVerdict::kCommit);
  EXPECT_TRUE(s.Finished());
  EXPECT_TRUE(s.DropUnschedulable().empty());
}

TEST_F(SchedulerTest, PriorityThenAffinityThenAge) {
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddJob("m1-old", Spec("cpu", 0, "m1"), 0).ok());
  ASSERT_TRUE(s.AddJob("m0-a", Spec("cpu", 1, "m0"), 0).ok());
  ASSERT_TRUE(s.AddJob("m0-b", Spec("cpu", 2, "m0"), 0).ok());
  ASSERT_TRUE(s.AddJob("urgent", Spec("cpu", 3, "m1"), 0, /*priority=*/5).ok());
  s.OnReady(Worker("w", {"cpu"}), {});
  auto next = [&](const std::string& expect) {
    auto ev = s.Tick();
    ASSERT_EQ(ev.grants.size(), 1u);
    EXPECT_EQ(ev.grants[0].job_key, expect);
    ASSERT_EQ(s.OnResult("w", ResultFor(ev.grants[0])).verdict, ResultVerdict::kCommit);
  };
  next("urgent");  // highest priority
  next("m1-old");  // same model as the last job (affinity) and oldest
  next("m0-a");    // only m0 left: oldest first
  next("m0-b");
  EXPECT_TRUE(s.Finished());
}

TEST_F(SchedulerTest, AffinityPrefersLoadedModelOverAge) {
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddJob("m0-a", Spec("cpu", 0, "m0"), 0).ok());
  ASSERT_TRUE(s.AddJob("m1-a", Spec("cpu", 1, "m1"), 0).ok());
  ASSERT_TRUE(s.AddJob("m0-b", Spec("cpu", 2, "m0"), 0).ok());
  s.OnReady(Worker("w", {"cpu"}), {});
  auto ev = s.Tick();
  ASSERT_EQ(ev.grants[0].job_key, "m0-a");
  ASSERT_EQ(s.OnResult("w", ResultFor(ev.grants[0])).verdict, ResultVerdict::kCommit);
  ev = s.Tick();
  EXPECT_EQ(ev.grants[0].job_key, "m0-b");  // m0 is loaded, though m1-a is older
}

TEST_F(SchedulerTest, WorkerDeathRequeuesWithBackoff) {
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddJob("a", Spec("cpu", 0), 0).ok());
  s.OnReady(Worker("w1", {"cpu"}), {});
  auto ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 1u);
  const Grant g1 = ev.grants[0];

  // Heartbeats keep it alive.
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(1000);
    ASSERT_TRUE(s.OnHeartbeat("w1").ok());
    EXPECT_TRUE(s.Tick().empty());
  }
  // Exactly 3 intervals of silence: still alive. One more millisecond: lost.
  clock_.Advance(3000);
  EXPECT_TRUE(s.Tick().empty());
  clock_.Advance(1);
  ev = s.Tick();
  ASSERT_EQ(ev.lost_workers.size(), 1u);
  EXPECT_EQ(ev.lost_workers[0].worker_id, "w1");
  EXPECT_EQ(ev.lost_workers[0].reason.code(), StatusCode::kUnavailable);
  ASSERT_EQ(ev.failures.size(), 1u);
  EXPECT_EQ(ev.failures[0].job_key, "a");
  EXPECT_EQ(ev.failures[0].attempt, 1);
  EXPECT_EQ(ev.failures[0].worker_id, "w1");
  EXPECT_TRUE(ev.failures[0].will_retry);
  EXPECT_NE(ev.failures[0].reason.message().find("lost"), std::string::npos);
  EXPECT_EQ(s.StateOf("a"), "queued");
  EXPECT_FALSE(s.HasWorker("w1"));
  EXPECT_EQ(s.OnHeartbeat("w1").code(), StatusCode::kNotFound);

  // Another worker arrives, but the job waits out its 1 s backoff.
  s.OnReady(Worker("w2", {"cpu"}), {});
  EXPECT_TRUE(s.Tick().grants.empty());
  EXPECT_EQ(s.NextDeadlineMs().value(), clock_.NowMs() + 1000);
  clock_.Advance(999);
  EXPECT_TRUE(s.Tick().grants.empty());
  clock_.Advance(1);
  ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 1u);
  EXPECT_EQ(ev.grants[0].worker_id, "w2");
  EXPECT_EQ(ev.grants[0].attempt, 2);

  // The dead worker's late result is from an unknown worker; its attempt is fenced anyway.
  EXPECT_EQ(s.OnResult("w1", ResultFor(g1)).verdict, ResultVerdict::kUnknownWorker);
  s.OnReady(Worker("w1", {"cpu"}), {});
  EXPECT_EQ(s.OnResult("w1", ResultFor(g1)).verdict, ResultVerdict::kStale);
  EXPECT_EQ(s.StateOf("a"), "leased");
  EXPECT_EQ(s.OnResult("w2", ResultFor(ev.grants[0])).verdict, ResultVerdict::kCommit);
  EXPECT_TRUE(s.Finished());
}

TEST_F(SchedulerTest, BackoffDoublesAndCapsThenGivesUp) {
  SchedulerOptions o = Options();
  o.max_attempts = 8;
  o.lease_ms = 100;
  Scheduler s(clock_, o);
  ASSERT_TRUE(s.AddJob("a", Spec("cpu", 0), 0).ok());
  s.OnReady(Worker("w", {"cpu"}), {});
  const std::vector<int64_t> expected_backoff = {1000, 2000, 4000, 8000, 16000, 32000, 32000};
  for (int attempt = 1; attempt <= 8; ++attempt) {
    auto ev = s.Tick();
    ASSERT_EQ(ev.grants.size(), 1u) << attempt;
    ASSERT_EQ(ev.grants[0].attempt, attempt);
    // The worker reports a retryable engine error (e.g. out of memory).
    auto d = s.OnResult("w", EngineError(ev.grants[0], "resource_exhausted", true));
    ASSERT_EQ(d.verdict, ResultVerdict::kAttemptFailed);
    ASSERT_EQ(d.events.failures.size(), 1u);
    EXPECT_EQ(d.events.failures[0].reason.code(), StatusCode::kResourceExhausted);
    if (attempt == 8) {
      EXPECT_FALSE(d.events.failures[0].will_retry);
      EXPECT_NE(d.events.failures[0].reason.message().find("8 of 8 attempts"), std::string::npos);
      break;
    }
    EXPECT_TRUE(d.events.failures[0].will_retry);
    const int64_t b = expected_backoff[static_cast<size_t>(attempt - 1)];
    clock_.Advance(b - 1);
    ASSERT_TRUE(s.OnHeartbeat("w").ok());
    EXPECT_TRUE(s.Tick().grants.empty()) << "attempt " << attempt << " backoff " << b;
    clock_.Advance(1);
    ASSERT_TRUE(s.OnHeartbeat("w").ok());
  }
  EXPECT_EQ(s.StateOf("a"), "failed");
  EXPECT_TRUE(s.Finished());
  EXPECT_EQ(s.Counts().failed, 1);
  EXPECT_NE(s.LastErrorOf("a").find("resource_exhausted"), std::string::npos);
}

TEST_F(SchedulerTest, LeaseExpiryFencesTheLateResultAndKeepsTheSlotBusy) {
  SchedulerOptions o = Options();
  o.lease_ms = 5000;
  Scheduler s(clock_, o);
  ASSERT_TRUE(s.AddJob("a", Spec("cpu", 0), 0).ok());
  ASSERT_TRUE(s.AddJob("b", Spec("cpu", 1), 0).ok());
  s.OnReady(Worker("slow", {"cpu"}), {});
  auto ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 1u);
  const Grant g1 = ev.grants[0];
  ASSERT_EQ(g1.job_key, "a");

  for (int t = 0; t < 4; ++t) {
    clock_.Advance(1000);
    ASSERT_TRUE(s.OnHeartbeat("slow").ok());
    EXPECT_TRUE(s.Tick().empty());
  }
  clock_.Advance(1000);  // now == lease deadline
  ASSERT_TRUE(s.OnHeartbeat("slow").ok());
  ev = s.Tick();
  ASSERT_EQ(ev.failures.size(), 1u);
  EXPECT_EQ(ev.failures[0].reason.code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(ev.failures[0].will_retry);
  EXPECT_TRUE(ev.lost_workers.empty());
  // The slow worker still runs attempt 1: its only slot is not free, so "b" is not granted to it.
  EXPECT_TRUE(ev.grants.empty());

  s.OnReady(Worker("fast", {"cpu"}), {});
  clock_.Advance(1000);  // backoff of "a" over
  ASSERT_TRUE(s.OnHeartbeat("slow").ok());
  ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 1u);
  EXPECT_EQ(ev.grants[0].worker_id, "fast");
  const Grant g2 = ev.grants[0];

  // The late result of attempt 1 is fenced off; it frees the slow worker's slot.
  auto d = s.OnResult("slow", ResultFor(g1));
  EXPECT_EQ(d.verdict, ResultVerdict::kStale);
  EXPECT_NE(d.reason.find("superseded by attempt"), std::string::npos);
  ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 1u);
  EXPECT_EQ(ev.grants[0].worker_id, "slow");

  EXPECT_EQ(s.OnResult("fast", ResultFor(g2)).verdict, ResultVerdict::kCommit);
  // A repeat of the committed attempt is a duplicate; the expired attempt stays stale.
  EXPECT_EQ(s.OnResult("fast", ResultFor(g2)).verdict, ResultVerdict::kDuplicate);
  EXPECT_EQ(s.OnResult("slow", ResultFor(g1)).verdict, ResultVerdict::kStale);
}

TEST_F(SchedulerTest, ExpiredButNotRegrantedAttemptIsStillFenced) {
  SchedulerOptions o = Options();
  o.lease_ms = 2000;
  Scheduler s(clock_, o);
  ASSERT_TRUE(s.AddJob("a", Spec("cpu", 0), 0).ok());
  s.OnReady(Worker("w", {"cpu"}), {});
  const Grant g = s.Tick().grants.at(0);
  clock_.Advance(2000);
  ASSERT_TRUE(s.OnHeartbeat("w").ok());
  ASSERT_EQ(s.Tick().failures.size(), 1u);
  EXPECT_EQ(s.StateOf("a"), "queued");
  auto d = s.OnResult("w", ResultFor(g));
  EXPECT_EQ(d.verdict, ResultVerdict::kStale);
  EXPECT_NE(d.reason.find("expired"), std::string::npos);
}

TEST_F(SchedulerTest, ResultFromAnotherWorkerOrForUnknownJobIsRejected) {
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddJob("a", Spec("cpu", 0), 0).ok());
  s.OnReady(Worker("w1", {"cpu"}), {});
  s.OnReady(Worker("w2", {"cpu"}), {});
  const Grant g = s.Tick().grants.at(0);
  const std::string other = g.worker_id == "w1" ? "w2" : "w1";
  auto d = s.OnResult(other, ResultFor(g));
  EXPECT_EQ(d.verdict, ResultVerdict::kStale);
  EXPECT_NE(d.reason.find("leased to " + g.worker_id), std::string::npos);
  JobResult unknown = ResultFor(g);
  unknown.job_key = "nope";
  EXPECT_EQ(s.OnResult(g.worker_id, unknown).verdict, ResultVerdict::kUnknownJob);
  EXPECT_EQ(s.OnResult("stranger", ResultFor(g)).verdict, ResultVerdict::kUnknownWorker);
  EXPECT_EQ(s.StateOf("a"), "leased");
}

TEST_F(SchedulerTest, NonRetryableEngineErrorIsAResult) {
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddJob("a", Spec("cpu", 0), 0).ok());
  ASSERT_TRUE(s.AddJob("b", Spec("cpu", 1), 0).ok());
  ASSERT_TRUE(s.AddJob("c", Spec("cpu", 2), 0).ok());
  s.OnReady(Worker("w", {"cpu"}), {});
  // invalid_argument, not flagged retryable: the job is done, with an engine_error result row.
  Grant g = s.Tick().grants.at(0);
  auto d = s.OnResult("w", EngineError(g, "invalid_argument", false));
  EXPECT_EQ(d.verdict, ResultVerdict::kCommit);
  EXPECT_TRUE(d.events.empty());
  EXPECT_EQ(s.StateOf(g.job_key), "done");
  // A retryable code is retried even when the flag is false.
  g = s.Tick().grants.at(0);
  d = s.OnResult("w", EngineError(g, "io_error", false));
  EXPECT_EQ(d.verdict, ResultVerdict::kAttemptFailed);
  EXPECT_EQ(s.StateOf(g.job_key), "queued");
  // Timeouts reported by the engine are job outcomes.
  clock_.Advance(1000);
  ASSERT_TRUE(s.OnHeartbeat("w").ok());
  g = s.Tick().grants.at(0);
  EXPECT_EQ(s.OnResult("w", ResultFor(g, Outcome::kTimeout)).verdict, ResultVerdict::kCommit);
}

TEST_F(SchedulerTest, DisconnectRequeuesImmediately) {
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddJob("a", Spec("cpu", 0), 0).ok());
  s.OnReady(Worker("w1", {"cpu"}), {});
  ASSERT_EQ(s.Tick().grants.size(), 1u);
  auto ev = s.OnDisconnect("w1", "shutting down");
  ASSERT_EQ(ev.failures.size(), 1u);
  EXPECT_TRUE(ev.failures[0].will_retry);
  EXPECT_NE(ev.failures[0].reason.message().find("shutting down"), std::string::npos);
  EXPECT_FALSE(s.HasWorker("w1"));
  EXPECT_TRUE(s.OnDisconnect("w1", "again").empty());
}

TEST_F(SchedulerTest, ReRegistrationKeepsHeldLeasesOnly) {
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddJob("a", Spec("cpu", 0), 0).ok());
  ASSERT_TRUE(s.AddJob("b", Spec("cpu", 1), 0).ok());
  s.OnReady(Worker("w", {"cpu"}, 2), {});
  auto grants = s.Tick().grants;
  ASSERT_EQ(grants.size(), 2u);
  // The worker reconnects (e.g. after missing our heartbeats) and says it still holds "a" only.
  auto ev = s.OnReady(Worker("w", {"cpu"}, 2), {{"a", 1}});
  ASSERT_EQ(ev.failures.size(), 1u);
  EXPECT_EQ(ev.failures[0].job_key, "b");
  EXPECT_TRUE(ev.failures[0].will_retry);
  EXPECT_EQ(s.StateOf("a"), "leased");
  EXPECT_EQ(s.StateOf("b"), "queued");
  const Grant& ga = grants[0].job_key == "a" ? grants[0] : grants[1];
  EXPECT_EQ(s.OnResult("w", ResultFor(ga)).verdict, ResultVerdict::kCommit);
}

TEST_F(SchedulerTest, ReleaseAllReturnsLeasesForRetry) {
  Scheduler s(clock_, Options());
  ASSERT_TRUE(s.AddJob("a", Spec("cpu", 0), 0).ok());
  ASSERT_TRUE(s.AddJob("b", Spec("cpu", 1), 0).ok());
  s.OnReady(Worker("w", {"cpu"}), {});
  ASSERT_EQ(s.Tick().grants.size(), 1u);
  auto ev = s.ReleaseAll(Status::Cancelled("coordinator stopping"));
  ASSERT_EQ(ev.failures.size(), 1u);
  EXPECT_TRUE(ev.failures[0].will_retry);
  EXPECT_EQ(ev.failures[0].reason.code(), StatusCode::kCancelled);
  EXPECT_EQ(s.Counts().queued, 2);
  EXPECT_EQ(s.Counts().leased, 0);
}

TEST_F(SchedulerTest, MaxAttemptsAcrossDeaths) {
  SchedulerOptions o = Options();
  o.max_attempts = 2;
  Scheduler s(clock_, o);
  ASSERT_TRUE(s.AddJob("a", Spec("cpu", 0), 0).ok());
  for (int attempt = 1; attempt <= 2; ++attempt) {
    const std::string id = "w" + std::to_string(attempt);
    s.OnReady(Worker(id, {"cpu"}), {});
    auto ev = s.Tick();
    ASSERT_EQ(ev.grants.size(), 1u);
    EXPECT_EQ(ev.grants[0].attempt, attempt);
    clock_.Advance(3001);
    ev = s.Tick();
    ASSERT_EQ(ev.failures.size(), 1u);
    EXPECT_EQ(ev.failures[0].will_retry, attempt < 2);
    clock_.Advance(32'000);
  }
  EXPECT_EQ(s.StateOf("a"), "failed");
  EXPECT_TRUE(s.Finished());
}

TEST_F(SchedulerTest, NextDeadline) {
  SchedulerOptions o = Options();
  o.lease_ms = 10'000;
  Scheduler s(clock_, o);
  EXPECT_FALSE(s.NextDeadlineMs().has_value());
  ASSERT_TRUE(s.AddJob("a", Spec("cpu", 0), 0).ok());
  const int64_t t0 = clock_.NowMs();
  s.OnReady(Worker("w", {"cpu"}), {});
  EXPECT_EQ(s.NextDeadlineMs().value(), t0 + 3001);  // the worker's liveness
  ASSERT_EQ(s.Tick().grants.size(), 1u);
  clock_.Advance(2000);
  ASSERT_TRUE(s.OnHeartbeat("w").ok());
  EXPECT_EQ(s.NextDeadlineMs().value(), t0 + 5001);
}

// Issue 19: a worker that claims many slots and never answers holds only its initial credit,
// once: its expired leases halve the credit and keep occupying what it holds, so the rest of the
// campaign goes to workers that deliver, and no job exhausts its attempts on it.
TEST_F(SchedulerTest, GreedySilentWorkerHoldsItsCreditNotItsClaim) {
  SchedulerOptions o = Options();
  o.lease_ms = 5000;
  o.initial_worker_credit = 4;
  Scheduler s(clock_, o);
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(s.AddJob("j" + std::to_string(i), Spec("cpu", i), 0).ok());
  }
  WorkerInfo greedy = Worker("greedy", {"cpu"}, kMaxSlots);
  greedy.capabilities["prefetch"] = 3 * kMaxSlots;
  s.OnReady(greedy, {});
  auto ev = s.Tick();
  EXPECT_EQ(ev.grants.size(), 4u);  // its credit, not 4096
  // It heartbeats and never answers: its leases expire; it gets nothing more.
  for (int t = 0; t < 12; ++t) {
    clock_.Advance(1000);
    ASSERT_TRUE(s.OnHeartbeat("greedy").ok());
    ev = s.Tick();
    EXPECT_TRUE(ev.grants.empty()) << "t=" << t;
  }
  EXPECT_EQ(s.Counts().queued, 40);
  for (const auto& w : s.Workers()) EXPECT_EQ(w.credit, 1);  // halved per expired lease
  // An honest worker takes the campaign; every job finishes on its first or second attempt.
  s.OnReady(Worker("honest", {"cpu"}, 2), {});
  for (int round = 0; round < 200 && !s.Finished(); ++round) {
    clock_.Advance(100);
    ASSERT_TRUE(s.OnHeartbeat("greedy").ok());
    ASSERT_TRUE(s.OnHeartbeat("honest").ok());
    for (const Grant& g : s.Tick().grants) {
      ASSERT_EQ(g.worker_id, "honest");
      EXPECT_EQ(s.OnResult("honest", ResultFor(g)).verdict, ResultVerdict::kCommit);
    }
  }
  EXPECT_TRUE(s.Finished());
  EXPECT_EQ(s.Counts().done, 40);
  EXPECT_EQ(s.Counts().failed, 0);
}

TEST_F(SchedulerTest, CreditGrowsWithDeliveredResultsUpToTheClaimAndSurvivesReconnects) {
  SchedulerOptions o = Options();
  o.initial_worker_credit = 2;
  Scheduler s(clock_, o);
  for (int i = 0; i < 30; ++i) {
    ASSERT_TRUE(s.AddJob("j" + std::to_string(i), Spec("cpu", i), 0).ok());
  }
  s.OnReady(Worker("w", {"cpu"}, 6), {});
  auto ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 2u);
  for (const Grant& g : ev.grants)
    ASSERT_EQ(s.OnResult("w", ResultFor(g)).verdict, ResultVerdict::kCommit);
  ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 4u);  // two delivered: credit 4
  for (const Grant& g : ev.grants)
    ASSERT_EQ(s.OnResult("w", ResultFor(g)).verdict, ResultVerdict::kCommit);
  ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 6u);  // credit 8, capped by the 6 slots it claims
  // Lost and back: the credit is the id's, not the connection's.
  clock_.Advance(3001);
  ev = s.Tick();
  ASSERT_EQ(ev.lost_workers.size(), 1u);
  s.OnReady(Worker("w", {"cpu"}, 6), {});
  for (const auto& w : s.Workers()) EXPECT_EQ(w.credit, 6);
}

// Issue 19: jobs waiting in a worker's prefetch queue are not charged for the wait: their lease
// covers the jobs ahead of them.
TEST_F(SchedulerTest, LeaseCoversTheWaitInTheWorkersQueue) {
  SchedulerOptions o = Options();
  o.lease_ms = 10'000;
  Scheduler s(clock_, o);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(s.AddJob("j" + std::to_string(i), Spec("cpu", i), 0).ok());
  }
  WorkerInfo w = Worker("w", {"cpu"}, 2);
  w.capabilities["prefetch"] = 4;
  s.OnReady(w, {});
  auto ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 6u);
  const std::vector<int64_t> want = {10'000, 10'000, 20'000, 20'000, 30'000, 30'000};
  for (size_t i = 0; i < ev.grants.size(); ++i) {
    EXPECT_EQ(ev.grants[i].lease_ms, want[i]) << i;
    EXPECT_EQ(ev.grants[i].lease_expires_ms, clock_.NowMs() + want[i]) << i;
  }
  // Each job takes 9 s, two at a time: all six finish in 27 s, no lease expires.
  std::vector<Grant> pending = ev.grants;
  for (int step = 0; step < 3; ++step) {
    for (int t = 0; t < 9; ++t) {
      clock_.Advance(1000);
      ASSERT_TRUE(s.OnHeartbeat("w").ok());
      EXPECT_TRUE(s.Tick().failures.empty());
    }
    for (int k = 0; k < 2; ++k) {
      EXPECT_EQ(s.OnResult("w", ResultFor(pending.front())).verdict, ResultVerdict::kCommit);
      pending.erase(pending.begin());
    }
  }
  EXPECT_TRUE(s.Finished());
  EXPECT_EQ(s.Counts().done, 6);
}

}  // namespace
}  // namespace nw

namespace nw {
namespace {

// A worker that re-registers with "draining": true gets no new leases; the leases it leaves out
// of `held` were handed back: requeued at once, counting no attempt of this run (so draining
// workers never push a job towards max_attempts); the one it holds still completes.
TEST_F(SchedulerTest, DrainingWorkerGetsNoLeasesAndHandedBackJobsCostNoAttempt) {
  SchedulerOptions o = Options();
  o.max_attempts = 1;  // a counted failure would fail the job at once
  o.retry_backoff_initial_ms = 0;
  Scheduler s(clock_, o);
  ASSERT_TRUE(s.AddJob("a", Spec("cpu", 0), 0).ok());
  ASSERT_TRUE(s.AddJob("b", Spec("cpu", 1), 0).ok());
  ASSERT_TRUE(s.AddJob("c", Spec("cpu", 2), 0).ok());
  s.OnReady(Worker("w1", {"cpu"}, 2), {});
  SchedulerEvents ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 2u);
  const Grant running = ev.grants[0];
  const Grant queued = ev.grants[1];

  WorkerInfo draining = Worker("w1", {"cpu"}, 2);
  draining.capabilities["draining"] = true;
  ev = s.OnReady(draining, {{running.job_key, running.attempt}});
  ASSERT_EQ(ev.failures.size(), 1u);
  EXPECT_EQ(ev.failures[0].job_key, queued.job_key);
  EXPECT_TRUE(ev.failures[0].will_retry);
  EXPECT_NE(ev.failures[0].reason.message().find("draining"), std::string::npos);
  EXPECT_EQ(s.StateOf(queued.job_key), "queued");
  EXPECT_TRUE(s.Tick().grants.empty());  // a free slot, but draining
  ASSERT_EQ(s.Workers().size(), 1u);
  EXPECT_TRUE(s.Workers()[0].draining);
  EXPECT_EQ(s.OnResult("w1", ResultFor(running)).verdict, ResultVerdict::kCommit);
  EXPECT_TRUE(s.Tick().grants.empty());

  // Another worker takes the handed-back job and the rest.
  s.OnReady(Worker("w2", {"cpu"}, 2), {});
  ev = s.Tick();
  ASSERT_EQ(ev.grants.size(), 2u);
  for (const Grant& g : ev.grants) {
    EXPECT_EQ(g.worker_id, "w2");
    EXPECT_EQ(s.OnResult("w2", ResultFor(g)).verdict, ResultVerdict::kCommit);
  }
  EXPECT_TRUE(s.Finished());
  EXPECT_EQ(s.Counts().failed, 0);
}

}  // namespace
}  // namespace nw
