// Store: campaigns, idempotent job expansion, the lease -> result / failure flows, first result
// wins, requeueing, workers, transactions between two connections, and read-only mode.
#include "db/store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/db/campaign_fixture.h"

namespace nw {
namespace {

using testing_db::MakeProbe;
using testing_db::MakeResult;
using testing_db::MakeSpec;
using testing_db::TempDir;

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = dir_.File("nw.db");
    auto s = Store::Open(file_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    auto id = store_->UpsertCampaign("sweep", "sweep.yaml", "name: sweep\n", 100);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    campaign_ = *id;
  }

  JobState StateOf(const JobSpec& s) {
    auto j = store_->FindJob(s.Key());
    EXPECT_TRUE(j.ok() && j->has_value());
    return j.ok() && j->has_value() ? (*j)->state : JobState::kQueued;
  }

  std::vector<AttemptRecord> AttemptsOf(const JobSpec& s) {
    auto a = store_->Attempts(s.Key());
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return a.ok() ? *a : std::vector<AttemptRecord>{};
  }

  TempDir dir_;
  std::filesystem::path file_;
  std::unique_ptr<Store> store_;
  int64_t campaign_ = 0;
};

TEST_F(StoreTest, UpsertCampaignKeepsIdAndCreationTime) {
  auto again = store_->UpsertCampaign("sweep", "other.yaml", "name: sweep\nv: 2\n", 200);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, campaign_);
  auto c = store_->FindCampaign("sweep");
  ASSERT_TRUE(c.ok() && c->has_value());
  EXPECT_EQ((*c)->source_path, "other.yaml");
  EXPECT_EQ((*c)->source_text, "name: sweep\nv: 2\n");
  EXPECT_EQ((*c)->created_ms, 100);
  EXPECT_EQ((*c)->updated_ms, 200);

  auto other = store_->UpsertCampaign("second", "s.yaml", "", 300);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, campaign_);
  auto all = store_->ListCampaigns();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].name, "sweep");
  EXPECT_EQ((*all)[1].name, "second");

  auto missing = store_->FindCampaign("nope");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
  EXPECT_EQ(store_->UpsertCampaign("", "", "", 1).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(StoreTest, AddJobsIsIdempotentAndSharesJobsBetweenCampaigns) {
  std::vector<JobSpec> jobs = {MakeSpec(1024, 0.0), MakeSpec(1024, 0.5), MakeSpec(2048, 0.0),
                               MakeSpec(2048, 0.5)};
  ASSERT_TRUE(store_->AddJobs(campaign_, jobs, 1000).ok());
  ASSERT_TRUE(store_->AddJobs(campaign_, jobs, 2000).ok());
  auto listed = store_->CampaignJobs(campaign_);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 4u);
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ((*listed)[i].key, jobs[i].Key());
    EXPECT_EQ((*listed)[i].spec.ToJson(), jobs[i].ToJson());
    EXPECT_EQ((*listed)[i].state, JobState::kQueued);
    EXPECT_EQ((*listed)[i].attempts, 0);
  }

  // A second campaign with an overlapping expansion shares the common job and its state.
  ASSERT_TRUE(store_->RecordLease(jobs[0].Key(), 1, "w1", 5000, 1500).ok());
  auto other = store_->UpsertCampaign("other", "o.yaml", "", 100);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(store_->AddJobs(*other, {jobs[0], MakeSpec(4096, 0.0)}, 3000).ok());
  auto other_jobs = store_->CampaignJobs(*other);
  ASSERT_TRUE(other_jobs.ok());
  ASSERT_EQ(other_jobs->size(), 2u);
  EXPECT_EQ((*other_jobs)[0].state, JobState::kLeased);
  auto queued = store_->JobsInState(JobState::kQueued, 100);
  ASSERT_TRUE(queued.ok());
  EXPECT_EQ(queued->size(), 4u);  // 3 of the first campaign + the new 4096 job
  auto limited = store_->JobsInState(JobState::kQueued, 2);
  ASSERT_TRUE(limited.ok());
  EXPECT_EQ(limited->size(), 2u);
  auto progress = store_->Progress(campaign_);
  ASSERT_TRUE(progress.ok());
  EXPECT_EQ(progress->total, 4);
}

TEST_F(StoreTest, AddJobsToAnUnknownCampaignFailsAndInsertsNothing) {
  Status s = store_->AddJobs(campaign_ + 100, {MakeSpec(1024, 0.0)}, 1000);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find(file_.string()), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("campaigns"), std::string::npos) << s.message();
  auto j = store_->FindJob(MakeSpec(1024, 0.0).Key());
  ASSERT_TRUE(j.ok());
  EXPECT_FALSE(j->has_value());
}

TEST_F(StoreTest, SetCampaignJobsUnlinksJobsThatLeftTheExpansion) {
  JobSpec a = MakeSpec(1024, 0.0), b = MakeSpec(2048, 0.0), c = MakeSpec(4096, 0.0);
  ASSERT_TRUE(store_->AddJobs(campaign_, {a, b}, 1000).ok());
  ASSERT_TRUE(store_->SetCampaignJobs(campaign_, {b, c}, 2000).ok());
  auto listed = store_->CampaignJobs(campaign_);
  ASSERT_TRUE(listed.ok());
  std::set<std::string> keys;
  for (const auto& j : *listed) keys.insert(j.key);
  EXPECT_EQ(keys, (std::set<std::string>{b.Key(), c.Key()}));
  // The unlinked job itself stays.
  auto ja = store_->FindJob(a.Key());
  ASSERT_TRUE(ja.ok());
  EXPECT_TRUE(ja->has_value());
}

TEST_F(StoreTest, LeaseThenResultMarksDoneAndClosesTheAttempt) {
  JobSpec spec = MakeSpec(1024, 0.25);
  spec.probe = true;
  ASSERT_TRUE(store_->AddJobs(campaign_, {spec}, 1000).ok());
  ASSERT_TRUE(store_->RecordLease(spec.Key(), 1, "w1", 61000, 1000).ok());
  EXPECT_EQ(StateOf(spec), JobState::kLeased);
  auto attempts = AttemptsOf(spec);
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_EQ(attempts[0].status, "running");
  EXPECT_EQ(attempts[0].worker_id, "w1");
  EXPECT_EQ(attempts[0].lease_expires_ms, 61000);
  EXPECT_FALSE(attempts[0].ended_ms.has_value());

  JobResult r = MakeResult(spec, 1, Outcome::kPass);
  r.probes = {MakeProbe(3, true, 2.5), MakeProbe(1, false, -1, -1)};
  ASSERT_TRUE(store_->CommitResults({r}, 2000).ok());
  EXPECT_EQ(StateOf(spec), JobState::kDone);
  attempts = AttemptsOf(spec);
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_EQ(attempts[0].status, "ok");
  EXPECT_EQ(attempts[0].ended_ms, 2000);

  auto results = store_->Results(campaign_);
  ASSERT_TRUE(results.ok()) << results.status().ToString();
  ASSERT_EQ(results->size(), 1u);
  const JobResult& got = (*results)[0];
  // Probes come back ordered by layer; everything else round-trips exactly.
  std::swap(r.probes[0], r.probes[1]);
  EXPECT_EQ(got.ToJson(), r.ToJson());

  auto done = store_->DoneKeys({spec.Key(), MakeSpec(9, 0).Key()});
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(*done, std::vector<std::string>{spec.Key()});
  auto p = store_->Progress(campaign_);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->total, 1);
  EXPECT_EQ(p->done, 1);
  EXPECT_EQ(p->pass, 1);
}

TEST_F(StoreTest, LeaseRules) {
  JobSpec spec = MakeSpec(1024, 0.0);
  ASSERT_TRUE(store_->AddJobs(campaign_, {spec}, 1000).ok());
  EXPECT_EQ(store_->RecordLease(spec.Key(), 0, "w1", 2, 1).code(), StatusCode::kInvalidArgument);
  Status unknown = store_->RecordLease("feed", 1, "w1", 2, 1);
  EXPECT_EQ(unknown.code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.message().find("feed"), std::string::npos);
  EXPECT_NE(unknown.message().find(file_.string()), std::string::npos);
  ASSERT_TRUE(store_->RecordLease(spec.Key(), 1, "w1", 2, 1).ok());
  // Attempt numbers only grow.
  Status stale = store_->RecordLease(spec.Key(), 1, "w2", 2, 1);
  EXPECT_EQ(stale.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(stale.message().find(spec.Key()), std::string::npos);
  // A hedge: a second lease of a leased job.
  ASSERT_TRUE(store_->RecordLease(spec.Key(), 2, "w2", 2, 1).ok());
  auto j = store_->FindJob(spec.Key());
  ASSERT_TRUE(j.ok() && j->has_value());
  EXPECT_EQ((*j)->attempts, 2);
  ASSERT_TRUE(store_->CommitResults({MakeResult(spec, 2, Outcome::kPass)}, 3).ok());
  EXPECT_EQ(store_->RecordLease(spec.Key(), 3, "w1", 2, 1).code(), StatusCode::kFailedPrecondition);
}

TEST_F(StoreTest, FirstResultWinsAndLaterOnesAreNotStored) {
  JobSpec spec = MakeSpec(1024, 0.0);
  ASSERT_TRUE(store_->AddJobs(campaign_, {spec}, 1000).ok());
  ASSERT_TRUE(store_->RecordLease(spec.Key(), 1, "w1", 9000, 1000).ok());
  ASSERT_TRUE(store_->RecordLease(spec.Key(), 2, "w2", 9000, 1100).ok());  // straggler hedge
  // Attempt 2 answers first (pass), in a batch that also repeats it.
  JobResult first = MakeResult(spec, 2, Outcome::kPass);
  ASSERT_TRUE(store_->CommitResults({first, first}, 2000).ok());
  auto attempts = AttemptsOf(spec);
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[0].status, "stale");  // superseded when attempt 2's result was stored
  EXPECT_EQ(attempts[0].ended_ms, 2000);
  EXPECT_EQ(attempts[1].status, "ok");
  // Attempt 1 answers later with a miss: ignored, not an error, no second row.
  ASSERT_TRUE(store_->CommitResults({MakeResult(spec, 1, Outcome::kMiss)}, 3000).ok());
  auto results = store_->Results(campaign_);
  ASSERT_TRUE(results.ok());
  ASSERT_EQ(results->size(), 1u);
  EXPECT_EQ((*results)[0].outcome, Outcome::kPass);
  EXPECT_EQ((*results)[0].attempt, 2);
  auto cells = store_->Heatmap(campaign_);
  ASSERT_TRUE(cells.ok());
  ASSERT_EQ(cells->size(), 1u);
  EXPECT_EQ((*cells)[0].trials, 1);
  EXPECT_EQ((*cells)[0].passes, 1);
}

TEST_F(StoreTest, ALateResultForAJobNotYetDoneIsAccepted) {
  // The store does not fence: attempt 1's late answer counts if no result is stored yet.
  JobSpec spec = MakeSpec(1024, 0.0);
  ASSERT_TRUE(store_->AddJobs(campaign_, {spec}, 1000).ok());
  ASSERT_TRUE(store_->RecordLease(spec.Key(), 1, "w1", 2000, 1000).ok());
  ASSERT_TRUE(
      store_->RecordFailure(spec.Key(), 1, Status::DeadlineExceeded("lease expired"), true, 2500)
          .ok());
  ASSERT_TRUE(store_->RecordLease(spec.Key(), 2, "w2", 9000, 2600).ok());
  ASSERT_TRUE(store_->CommitResults({MakeResult(spec, 1, Outcome::kPass)}, 3000).ok());
  EXPECT_EQ(StateOf(spec), JobState::kDone);
  auto attempts = AttemptsOf(spec);
  ASSERT_EQ(attempts.size(), 2u);
  // 'ok' marks the attempt whose result is stored, even one closed as failed before it answered.
  EXPECT_EQ(attempts[0].status, "ok");
  EXPECT_EQ(attempts[1].status, "stale");
}

TEST_F(StoreTest, ResultForAnUnknownJobFailsTheWholeBatch) {
  JobSpec spec = MakeSpec(1024, 0.0);
  ASSERT_TRUE(store_->AddJobs(campaign_, {spec}, 1000).ok());
  ASSERT_TRUE(store_->RecordLease(spec.Key(), 1, "w1", 9000, 1000).ok());
  JobResult ghost = MakeResult(MakeSpec(999, 0.0), 1, Outcome::kPass);
  Status s = store_->CommitResults({MakeResult(spec, 1, Outcome::kPass), ghost}, 2000);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find(ghost.job_key), std::string::npos);
  EXPECT_EQ(StateOf(spec), JobState::kLeased);
  auto results = store_->Results(campaign_);
  ASSERT_TRUE(results.ok());
  EXPECT_TRUE(results->empty());

  JobResult dup_layers = MakeResult(spec, 1, Outcome::kPass);
  dup_layers.probes = {MakeProbe(2, true, 1), MakeProbe(2, false, 3)};
  EXPECT_EQ(store_->CommitResults({dup_layers}, 2000).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->CommitResults({MakeResult(spec, 0, Outcome::kPass)}, 2000).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(StoreTest, RecordFailureRequeuesOrFails) {
  JobSpec a = MakeSpec(1024, 0.0), b = MakeSpec(2048, 0.0);
  ASSERT_TRUE(store_->AddJobs(campaign_, {a, b}, 1000).ok());
  ASSERT_TRUE(store_->RecordLease(a.Key(), 1, "w1", 9000, 1000).ok());
  ASSERT_TRUE(
      store_->RecordFailure(a.Key(), 1, Status::ResourceExhausted("out of memory"), true, 1500)
          .ok());
  EXPECT_EQ(StateOf(a), JobState::kQueued);
  auto attempts = AttemptsOf(a);
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_EQ(attempts[0].status, "failed");
  EXPECT_EQ(attempts[0].error_code, "resource_exhausted");
  EXPECT_EQ(attempts[0].error_message, "out of memory");
  EXPECT_EQ(attempts[0].ended_ms, 1500);
  auto ja = store_->FindJob(a.Key());
  ASSERT_TRUE(ja.ok() && ja->has_value());
  EXPECT_EQ((*ja)->last_error, "resource_exhausted: out of memory");

  ASSERT_TRUE(store_->RecordLease(a.Key(), 2, "w2", 9000, 2000).ok());
  ASSERT_TRUE(
      store_->RecordFailure(a.Key(), 2, Status::InvalidArgument("bad model"), false, 2500).ok());
  EXPECT_EQ(StateOf(a), JobState::kFailed);
  EXPECT_EQ(store_->RecordLease(a.Key(), 3, "w1", 9000, 3000).code(),
            StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store_->RequeueJobs({a.Key()}, 3000).ok());
  EXPECT_EQ(StateOf(a), JobState::kQueued);
  ASSERT_TRUE(store_->RecordLease(a.Key(), 3, "w1", 9000, 3100).ok());

  // Hedged job: one attempt failing leaves the job leased while the other runs.
  ASSERT_TRUE(store_->RecordLease(b.Key(), 1, "w1", 9000, 1000).ok());
  ASSERT_TRUE(store_->RecordLease(b.Key(), 2, "w2", 9000, 1000).ok());
  ASSERT_TRUE(
      store_->RecordFailure(b.Key(), 1, Status::Unavailable("worker lost"), true, 1200).ok());
  EXPECT_EQ(StateOf(b), JobState::kLeased);
  // A failure after the job is done leaves it done.
  ASSERT_TRUE(store_->CommitResults({MakeResult(b, 2, Outcome::kMiss)}, 1300).ok());
  ASSERT_TRUE(store_->RecordLease(a.Key(), 4, "w3", 9000, 1300).ok());
  ASSERT_TRUE(store_->CommitResults({MakeResult(a, 4, Outcome::kPass)}, 1400).ok());
  ASSERT_TRUE(
      store_->RecordFailure(a.Key(), 3, Status::Unavailable("late report"), true, 1500).ok());
  EXPECT_EQ(StateOf(a), JobState::kDone);

  Status no_attempt = store_->RecordFailure(b.Key(), 7, Status::Internal("x"), true, 1);
  EXPECT_EQ(no_attempt.code(), StatusCode::kNotFound);
  EXPECT_NE(no_attempt.message().find("attempt 7"), std::string::npos);
  EXPECT_EQ(store_->RecordFailure(b.Key(), 1, Status::Ok(), true, 1).code(),
            StatusCode::kInvalidArgument);
}

// Issue 19: a job failed only through expired leases and lost workers runs again when its
// campaign is run or submitted again; a job an engine failed, and a done job, stay as they are.
TEST_F(StoreTest, RequeueInfrastructureFailuresRetriesOnlyJobsWorkersDidNotFinish) {
  JobSpec expired = MakeSpec(1024, 0.0), engine = MakeSpec(2048, 0.0), done = MakeSpec(4096, 0.0),
          engine_code = MakeSpec(8192, 0.0);
  ASSERT_TRUE(store_->AddJobs(campaign_, {expired, engine, done, engine_code}, 1000).ok());
  auto fail = [&](const JobSpec& j, int attempt, const Status& why, bool retry) {
    ASSERT_TRUE(store_->RecordLease(j.Key(), attempt, "w", 9000, 1000).ok());
    ASSERT_TRUE(store_->RecordFailure(j.Key(), attempt, why, retry, 1100).ok());
  };
  fail(expired, 1, Status::DeadlineExceeded("lease of attempt 1 on w expired after 5 ms"), true);
  fail(expired, 2, Status::Unavailable("worker w lost: silent for 4000 ms"), true);
  fail(expired, 3, Status::DeadlineExceeded("lease of attempt 3 on w expired after 5 ms"), false);
  fail(engine, 1, Status::DeadlineExceeded("lease of attempt 1 on w expired after 5 ms"), true);
  fail(engine, 2, Status::ResourceExhausted("engine error on worker w: out of memory"), false);
  fail(engine_code, 1, Status::Unavailable("engine error on worker w: device lost"), false);
  ASSERT_TRUE(store_->RecordLease(done.Key(), 1, "w", 9000, 1000).ok());
  ASSERT_TRUE(store_->CommitResults({MakeResult(done, 1, Outcome::kPass)}, 1200).ok());
  ASSERT_EQ(StateOf(expired), JobState::kFailed);

  auto n = store_->RequeueInfrastructureFailures(
      {expired.Key(), engine.Key(), done.Key(), engine_code.Key(), "0unknown"}, 2000);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 1);
  EXPECT_EQ(StateOf(expired), JobState::kQueued);
  EXPECT_EQ(StateOf(engine), JobState::kFailed);
  EXPECT_EQ(StateOf(engine_code), JobState::kFailed);
  EXPECT_EQ(StateOf(done), JobState::kDone);
  // Its attempts continue from the highest one.
  EXPECT_TRUE(store_->RecordLease(expired.Key(), 4, "w2", 9000, 2100).ok());
}

// The coordinator's batch: failures then leases in one transaction, all or nothing.
TEST_F(StoreTest, RecordAttemptsIsOneAllOrNothingBatch) {
  JobSpec a = MakeSpec(1024, 0.0), b = MakeSpec(2048, 0.0), c = MakeSpec(4096, 0.0);
  ASSERT_TRUE(store_->AddJobs(campaign_, {a, b, c}, 1000).ok());
  const std::string ka = a.Key(), kb = b.Key(), kc = c.Key();
  ASSERT_TRUE(store_->RecordAttempts({}, {{ka, 1, "w1", 9000}, {kb, 1, "w2", 9100}}, 1000).ok());
  EXPECT_EQ(StateOf(a), JobState::kLeased);
  EXPECT_EQ(StateOf(b), JobState::kLeased);
  ASSERT_EQ(AttemptsOf(b).size(), 1u);
  EXPECT_EQ(AttemptsOf(b)[0].worker_id, "w2");
  EXPECT_EQ(AttemptsOf(b)[0].lease_expires_ms, 9100);
  EXPECT_EQ(AttemptsOf(b)[0].status, "running");

  // a's attempt fails and is retried in the same batch; b's failure gives up.
  const Status lost = Status::Unavailable("worker lost");
  const Status bad = Status::InvalidArgument("bad job");
  ASSERT_TRUE(store_
                  ->RecordAttempts({{ka, 1, &lost, true}, {kb, 1, &bad, false}},
                                   {{ka, 2, "w3", 9500}}, 2000)
                  .ok());
  EXPECT_EQ(StateOf(a), JobState::kLeased);
  EXPECT_EQ(StateOf(b), JobState::kFailed);
  auto attempts = AttemptsOf(a);
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[0].status, "failed");
  EXPECT_EQ(attempts[0].error_code, "unavailable");
  EXPECT_EQ(attempts[0].ended_ms, 2000);
  EXPECT_EQ(attempts[1].status, "running");
  EXPECT_EQ((*store_->FindJob(kb))->last_error, "invalid_argument: bad job");

  // One refusal (b is failed) rolls back the whole batch, c's lease included, and says why.
  Status refused = store_->RecordAttempts({}, {{kc, 1, "w1", 9000}, {kb, 2, "w1", 9000}}, 3000);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find(kb), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("the job is failed"), std::string::npos) << refused.message();
  EXPECT_EQ(StateOf(c), JobState::kQueued);
  EXPECT_TRUE(AttemptsOf(c).empty());
  // The same for an attempt number that does not grow, an unknown job, attempt 0, and a failure
  // of an attempt that does not exist.
  Status old = store_->RecordAttempts({}, {{kc, 1, "w1", 9000}, {ka, 2, "w1", 9000}}, 3000);
  EXPECT_EQ(old.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(old.message().find("not newer than attempt 2"), std::string::npos) << old.message();
  EXPECT_EQ(store_->RecordAttempts({}, {{"feed", 1, "w1", 9000}}, 3000).code(),
            StatusCode::kNotFound);
  EXPECT_EQ(store_->RecordAttempts({}, {{kc, 0, "w1", 9000}}, 3000).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->RecordAttempts({{kc, 5, &lost, true}}, {{kc, 1, "w1", 9000}}, 3000).code(),
            StatusCode::kNotFound);
  const Status ok = Status::Ok();
  EXPECT_EQ(store_->RecordAttempts({{ka, 2, &ok, true}}, {}, 3000).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(StateOf(c), JobState::kQueued);
  EXPECT_TRUE(AttemptsOf(c).empty());
  EXPECT_EQ(AttemptsOf(a).size(), 2u);
  EXPECT_TRUE(store_->RecordAttempts({}, {}, 3000).ok());
}

// A result closes its attempt as ok and the job's other running attempts as stale, in one
// statement; a result of an attempt that was closed meanwhile (lost) still becomes ok.
TEST_F(StoreTest, CommitClosesTheDeliveringAttemptOkAndTheOthersStale) {
  JobSpec a = MakeSpec(1024, 0.0);
  ASSERT_TRUE(store_->AddJobs(campaign_, {a}, 1000).ok());
  ASSERT_TRUE(store_->RecordLease(a.Key(), 1, "w1", 9000, 1000).ok());
  ASSERT_TRUE(store_->RecordLease(a.Key(), 2, "w2", 9000, 1000).ok());
  ASSERT_TRUE(store_->RecordLease(a.Key(), 3, "w3", 9000, 1000).ok());
  ASSERT_TRUE(
      store_->RecordFailure(a.Key(), 3, Status::Unavailable("worker lost"), true, 1100).ok());
  JobResult r = MakeResult(a, 1, Outcome::kPass);
  ASSERT_TRUE(store_->CommitResults({r}, 1200).ok());
  auto attempts = AttemptsOf(a);
  ASSERT_EQ(attempts.size(), 3u);
  EXPECT_EQ(attempts[0].status, "ok");
  EXPECT_EQ(attempts[0].ended_ms, 1200);
  EXPECT_EQ(attempts[1].status, "stale");
  EXPECT_EQ(attempts[1].ended_ms, 1200);
  EXPECT_EQ(attempts[2].status, "failed");  // already closed: left alone
  EXPECT_EQ(attempts[2].ended_ms, 1100);
  EXPECT_EQ(attempts[2].error_code, "unavailable");
  // Delivered again: stored once, nothing changes.
  ASSERT_TRUE(store_->CommitResults({r}, 1300).ok());
  EXPECT_EQ(AttemptsOf(a)[0].ended_ms, 1200);
  auto history = store_->ResultHistory(a.Key());
  ASSERT_TRUE(history.ok());
  EXPECT_EQ(history->size(), 1u);
}

TEST_F(StoreTest, RequeueLeasedAfterRestart) {
  JobSpec a = MakeSpec(1024, 0.0), b = MakeSpec(2048, 0.0), c = MakeSpec(4096, 0.0);
  ASSERT_TRUE(store_->AddJobs(campaign_, {a, b, c}, 1000).ok());
  ASSERT_TRUE(store_->RecordLease(a.Key(), 1, "w1", 9000, 1000).ok());
  ASSERT_TRUE(store_->RecordLease(b.Key(), 1, "w2", 9000, 1000).ok());
  ASSERT_TRUE(store_->RecordLease(c.Key(), 1, "w2", 9000, 1000).ok());
  ASSERT_TRUE(store_->CommitResults({MakeResult(c, 1, Outcome::kPass)}, 1500).ok());
  store_.reset();  // "crash"

  auto reopened = Store::Open(file_);
  ASSERT_TRUE(reopened.ok());
  store_ = std::move(reopened).value();
  auto n = store_->RequeueLeased(5000);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 2);
  EXPECT_EQ(StateOf(a), JobState::kQueued);
  EXPECT_EQ(StateOf(b), JobState::kQueued);
  EXPECT_EQ(StateOf(c), JobState::kDone);
  auto attempts = AttemptsOf(a);
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_EQ(attempts[0].status, "lost");
  EXPECT_EQ(attempts[0].ended_ms, 5000);
  EXPECT_EQ(AttemptsOf(c)[0].status, "ok");
  // Leasing resumes with the next attempt number.
  ASSERT_TRUE(store_->RecordLease(a.Key(), 2, "w1", 9000, 5100).ok());
  auto again = store_->RequeueLeased(6000);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 1);
}

TEST_F(StoreTest, RerunRequeuesAndTheNewResultReplacesTheOldInReports) {
  JobSpec spec = MakeSpec(1024, 0.0);
  ASSERT_TRUE(store_->AddJobs(campaign_, {spec}, 1000).ok());
  ASSERT_TRUE(store_->RecordLease(spec.Key(), 1, "w1", 9000, 1000).ok());
  ASSERT_TRUE(store_->CommitResults({MakeResult(spec, 1, Outcome::kMiss)}, 1100).ok());
  ASSERT_TRUE(store_->RequeueJobs({spec.Key()}, 2000).ok());
  EXPECT_EQ(StateOf(spec), JobState::kQueued);
  // Until the rerun answers, the old result is still reported.
  auto old = store_->Results(campaign_);
  ASSERT_TRUE(old.ok());
  ASSERT_EQ(old->size(), 1u);
  EXPECT_EQ((*old)[0].outcome, Outcome::kMiss);
  ASSERT_TRUE(store_->RecordLease(spec.Key(), 2, "w1", 9000, 2100).ok());
  // The old attempt's result delivered again is a duplicate, not a new answer.
  ASSERT_TRUE(store_->CommitResults({MakeResult(spec, 1, Outcome::kMiss)}, 2150).ok());
  EXPECT_EQ(StateOf(spec), JobState::kLeased);
  ASSERT_TRUE(store_->CommitResults({MakeResult(spec, 2, Outcome::kPass)}, 2200).ok());
  auto now = store_->Results(campaign_);
  ASSERT_TRUE(now.ok());
  ASSERT_EQ(now->size(), 1u);
  EXPECT_EQ((*now)[0].outcome, Outcome::kPass);
  EXPECT_EQ((*now)[0].attempt, 2);

  // Unknown keys fail the whole call.
  Status s = store_->RequeueJobs({spec.Key(), "0bad"}, 3000);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("0bad"), std::string::npos);
  EXPECT_EQ(StateOf(spec), JobState::kDone);
}

TEST_F(StoreTest, EngineErrorResultIsFinalAndRecordsTheError) {
  JobSpec spec = MakeSpec(1024, 0.0);
  ASSERT_TRUE(store_->AddJobs(campaign_, {spec}, 1000).ok());
  ASSERT_TRUE(store_->RecordLease(spec.Key(), 1, "w1", 9000, 1000).ok());
  ASSERT_TRUE(store_->CommitResults({MakeResult(spec, 1, Outcome::kEngineError)}, 1100).ok());
  auto j = store_->FindJob(spec.Key());
  ASSERT_TRUE(j.ok() && j->has_value());
  EXPECT_EQ((*j)->state, JobState::kDone);
  EXPECT_EQ((*j)->last_error, "engine_error: resource_exhausted: simulated");
  auto attempts = AttemptsOf(spec);
  EXPECT_EQ(attempts[0].error_code, "resource_exhausted");
  auto p = store_->Progress(campaign_);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->other, 1);
  EXPECT_EQ(p->miss, 0);
}

TEST_F(StoreTest, WorkersUpsertKeepsFirstSeen) {
  WorkerRecord w;
  w.id = "gpu0@host";
  w.host = "host";
  w.device = "H200";
  w.capabilities = {{"backends", {"cuda", "cpu"}}};
  w.first_seen_ms = 10;
  w.last_seen_ms = 10;
  ASSERT_TRUE(store_->UpsertWorker(w).ok());
  w.first_seen_ms = 50;
  w.last_seen_ms = 50;
  w.state = "lost";
  ASSERT_TRUE(store_->UpsertWorker(w).ok());
  auto all = store_->ListWorkers();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].first_seen_ms, 10);
  EXPECT_EQ((*all)[0].last_seen_ms, 50);
  EXPECT_EQ((*all)[0].state, "lost");
  EXPECT_EQ((*all)[0].capabilities, w.capabilities);
  w.state = "sleeping";
  EXPECT_EQ(store_->UpsertWorker(w).code(), StatusCode::kInvalidArgument);
  w.id = "";
  EXPECT_EQ(store_->UpsertWorker(w).code(), StatusCode::kInvalidArgument);
}

TEST_F(StoreTest, ReadingAnUnknownCampaignIsNotFound) {
  EXPECT_EQ(store_->Progress(999).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Heatmap(999).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Results(999).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->CampaignJobs(999).status().code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, InTransactionCommitsOrRollsBackEverything) {
  JobSpec a = MakeSpec(1024, 0.0), b = MakeSpec(2048, 0.0);
  // The body fails halfway: the jobs added before the failure are rolled back too.
  Status s = store_->InTransaction([&]() -> Status {
    NW_RETURN_IF_ERROR(store_->AddJobs(campaign_, {a}, 1000));
    return store_->RecordLease(b.Key(), 1, "w1", 9000, 1000);  // b does not exist
  });
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  auto ja = store_->FindJob(a.Key());
  ASSERT_TRUE(ja.ok());
  EXPECT_FALSE(ja->has_value());

  ASSERT_TRUE(store_
                  ->InTransaction([&]() -> Status {
                    NW_RETURN_IF_ERROR(store_->AddJobs(campaign_, {a, b}, 1000));
                    NW_RETURN_IF_ERROR(store_->RecordLease(a.Key(), 1, "w1", 9000, 1000));
                    // A failing inner call that the body tolerates only undoes itself.
                    EXPECT_FALSE(store_->RecordLease(a.Key(), 1, "w1", 9000, 1000).ok());
                    return store_->RecordLease(b.Key(), 1, "w1", 9000, 1000);
                  })
                  .ok());
  EXPECT_EQ(StateOf(a), JobState::kLeased);
  EXPECT_EQ(StateOf(b), JobState::kLeased);
}

// Issue 19: a writer whose lock is held by another process longer than its busy timeout waits,
// retries and reports (SetBusyRetry), and its write lands once the lock is free.
TEST_F(StoreTest, BusyRetryWaitsOutAnotherProcesssLock) {
  auto second = Store::Open(file_);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  ASSERT_TRUE((*second)->SetBusyTimeout(20).ok());
  std::atomic<int> waits{0};
  std::atomic<bool> holding{false};
  std::atomic<bool> release{false};
  std::thread holder([&] {
    EXPECT_TRUE(store_
                    ->InTransaction([&]() -> Status {
                      NW_RETURN_IF_ERROR(store_->AddJobs(campaign_, {MakeSpec(1024, 0)}, 1));
                      holding = true;
                      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(5));
                      return Status::Ok();
                    })
                    .ok());
  });
  while (!holding) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  // Without the retry the write fails at once (the busy timeout is 20 ms) ...
  EXPECT_EQ((*second)->UpsertCampaign("x", "", "", 1).status().code(), StatusCode::kUnavailable);
  // ... with it, the write waits; the lock is released once it has reported a wait.
  Store::BusyRetry retry;
  retry.max_wait_ms = 60'000;
  retry.on_wait = [&](const Status& reason, int64_t) {
    EXPECT_EQ(reason.code(), StatusCode::kUnavailable);
    if (++waits >= 2) release = true;
    return true;
  };
  (*second)->SetBusyRetry(retry);
  auto id = (*second)->UpsertCampaign("x", "", "", 1);
  holder.join();
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_GE(waits.load(), 2);
  // A stop request ends the wait with the reason.
  std::atomic<bool> stop{false};
  retry.on_wait = [&](const Status&, int64_t) { return !stop.exchange(true); };
  (*second)->SetBusyRetry(retry);
  Status held = store_->InTransaction([&]() -> Status {
    auto again = (*second)->UpsertCampaign("y", "", "", 1);
    EXPECT_EQ(again.status().code(), StatusCode::kUnavailable);
    return Status::Ok();
  });
  EXPECT_TRUE(held.ok());
}

// Issue 19: peers that register ever new ids cannot grow table workers without bound: rows of
// departed workers beyond the newest 4096 are dropped; active workers are never dropped.
TEST_F(StoreTest, DepartedWorkerRowsAreBounded) {
  WorkerRecord active;
  active.id = "still-here";
  active.first_seen_ms = active.last_seen_ms = 1;
  active.state = "active";
  ASSERT_TRUE(store_->UpsertWorker(active).ok());
  ASSERT_TRUE(store_
                  ->InTransaction([&]() -> Status {
                    for (int i = 0; i < 5000; ++i) {
                      WorkerRecord w;
                      w.id = "w" + std::to_string(i);
                      w.first_seen_ms = w.last_seen_ms = 10 + i;
                      w.state = i % 2 ? "lost" : "gone";
                      NW_RETURN_IF_ERROR(store_->UpsertWorker(w));
                    }
                    return Status::Ok();
                  })
                  .ok());
  auto workers = store_->ListWorkers();
  ASSERT_TRUE(workers.ok());
  EXPECT_LE(workers->size(), 4096u + 64u + 1u);
  EXPECT_GE(workers->size(), 4096u + 1u);
  std::set<std::string> ids;
  for (const auto& w : *workers) ids.insert(w.id);
  EXPECT_EQ(ids.count("still-here"), 1u);
  EXPECT_EQ(ids.count("w4999"), 1u);  // the newest stay
  EXPECT_EQ(ids.count("w0"), 0u);     // the oldest went
}

TEST_F(StoreTest, OneWriterAtATime) {
  auto second = Store::Open(file_);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  ASSERT_TRUE((*second)->SetBusyTimeout(50).ok());
  auto reader = Store::Open(file_, Store::Mode::kReadOnly);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  const int64_t reader_campaign = campaign_;

  Status body_checks;
  ASSERT_TRUE(store_
                  ->InTransaction([&]() -> Status {
                    NW_RETURN_IF_ERROR(store_->AddJobs(campaign_, {MakeSpec(1024, 0)}, 1));
                    // BEGIN IMMEDIATE holds the write lock: the second writer gives up.
                    auto other = (*second)->UpsertCampaign("x", "", "", 1);
                    EXPECT_FALSE(other.ok());
                    EXPECT_EQ(other.status().code(), StatusCode::kUnavailable);
                    EXPECT_NE(other.status().message().find(file_.string()), std::string::npos);
                    // WAL: a reader is not blocked and does not see uncommitted rows.
                    auto seen = (*reader)->CampaignJobs(reader_campaign);
                    EXPECT_TRUE(seen.ok()) << seen.status().ToString();
                    if (seen.ok()) {
                      EXPECT_TRUE(seen->empty());
                    }
                    return Status::Ok();
                  })
                  .ok());
  auto seen = (*reader)->CampaignJobs(reader_campaign);
  ASSERT_TRUE(seen.ok());
  EXPECT_EQ(seen->size(), 1u);
  // Once the first writer committed, the second one can write.
  EXPECT_TRUE((*second)->UpsertCampaign("x", "", "", 1).ok());
}

TEST_F(StoreTest, ReadTransactionSeesOneSnapshot) {
  auto reader = Store::Open(file_, Store::Mode::kReadOnly);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  size_t inside_before = 0, inside_after = 0;
  ASSERT_TRUE((*reader)
                  ->InReadTransaction([&]() -> Status {
                    NW_ASSIGN_OR_RETURN(auto before, (*reader)->ListCampaigns());
                    inside_before = before.size();
                    // The writer commits a new campaign while the reader's snapshot is open.
                    NW_RETURN_IF_ERROR(store_->UpsertCampaign("later", "", "", 5).status());
                    NW_ASSIGN_OR_RETURN(auto after, (*reader)->ListCampaigns());
                    inside_after = after.size();
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_EQ(inside_before, 1u);
  EXPECT_EQ(inside_after, 1u);
  auto now = (*reader)->ListCampaigns();
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->size(), 2u);
  // A failing body ends the read transaction too, and the error comes back.
  EXPECT_EQ((*reader)->InReadTransaction([] { return Status::Cancelled("stop"); }).code(),
            StatusCode::kCancelled);
  EXPECT_TRUE((*reader)->InReadTransaction([] { return Status::Ok(); }).ok());
}

TEST_F(StoreTest, ReadOnlyModeRefusesEveryWrite) {
  JobSpec spec = MakeSpec(1024, 0.0);
  ASSERT_TRUE(store_->AddJobs(campaign_, {spec}, 1000).ok());
  auto ro_or = Store::Open(file_, Store::Mode::kReadOnly);
  ASSERT_TRUE(ro_or.ok()) << ro_or.status().ToString();
  Store& ro = **ro_or;
  EXPECT_EQ(ro.mode(), Store::Mode::kReadOnly);

  std::vector<Status> writes;
  writes.push_back(ro.UpsertCampaign("new", "", "", 1).status());
  writes.push_back(ro.AddJobs(campaign_, {MakeSpec(2048, 0)}, 1));
  writes.push_back(ro.SetCampaignJobs(campaign_, {}, 1));
  writes.push_back(ro.RequeueJobs({spec.Key()}, 1));
  writes.push_back(ro.RequeueLeased(1).status());
  writes.push_back(ro.RecordLease(spec.Key(), 1, "w", 1, 1));
  writes.push_back(ro.CommitResults({MakeResult(spec, 1, Outcome::kPass)}, 1));
  writes.push_back(ro.RecordFailure(spec.Key(), 1, Status::Internal("x"), true, 1));
  WorkerRecord w;
  w.id = "w";
  writes.push_back(ro.UpsertWorker(w));
  writes.push_back(ro.InTransaction([] { return Status::Ok(); }));
  for (size_t i = 0; i < writes.size(); ++i) {
    EXPECT_EQ(writes[i].code(), StatusCode::kFailedPrecondition)
        << i << ": " << writes[i].ToString();
    EXPECT_NE(writes[i].message().find("read-only"), std::string::npos) << writes[i].message();
  }
  // Reads work and nothing changed.
  auto jobs = ro.CampaignJobs(campaign_);
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].state, JobState::kQueued);
  auto campaigns = ro.ListCampaigns();
  ASSERT_TRUE(campaigns.ok());
  EXPECT_EQ(campaigns->size(), 1u);
  EXPECT_EQ(*ro.SchemaVersion(), Store::LatestSchemaVersion());
}

TEST(JobStateNames, RoundTrip) {
  for (JobState s : {JobState::kQueued, JobState::kLeased, JobState::kDone, JobState::kFailed}) {
    auto parsed = ParseJobState(JobStateName(s));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_FALSE(ParseJobState("running").ok());
}

}  // namespace
}  // namespace nw
