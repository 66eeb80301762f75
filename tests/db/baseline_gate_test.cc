// The Store's additions for `nw export`, `nw baseline` and `nw gate`: campaign samples with
// their configuration and latest result, a job's result history, baselines that freeze results
// (a rerun after `baseline set` does not move the baseline), and flaky verdicts.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "db/store.h"
#include "tests/db/campaign_fixture.h"

namespace nw {
namespace {

using testing_db::CampaignBuilder;
using testing_db::ConfigLabel;
using testing_db::MakeProbe;
using testing_db::MakeResult;
using testing_db::MakeSpec;
using testing_db::TempDir;

constexpr Outcome P = Outcome::kPass;
constexpr Outcome M = Outcome::kMiss;

class BaselineStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = Store::Open(dir_.File("nw.db"));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    CampaignBuilder b(*store_, "base");
    b.Cell(1000, 0.0, {P, M}).WithProbes({MakeProbe(0, true, 2)}).Cell(2000, 0.5, {M});
    b.Pending(2000, 0.5, 1);
    b.Commit();
    campaign_ = b.id();
  }

  // Leases the job again and commits a new result with `outcome` (what --rerun does).
  void Rerun(const JobSpec& spec, int attempt, Outcome outcome, int64_t now = 50'000) {
    ASSERT_TRUE(store_->RequeueJobs({spec.Key()}, now).ok());
    ASSERT_TRUE(store_->RecordLease(spec.Key(), attempt, "w2", now + 1000, now).ok());
    ASSERT_TRUE(store_->CommitResults({MakeResult(spec, attempt, outcome)}, now + 1).ok());
  }

  TempDir dir_;
  std::unique_ptr<Store> store_;
  int64_t campaign_ = 0;
};

TEST_F(BaselineStoreTest, CampaignSamplesCarryConfigAndLatestResult) {
  auto samples = store_->CampaignSamples(campaign_, /*with_probes=*/true);
  ASSERT_TRUE(samples.ok()) << samples.status().ToString();
  ASSERT_EQ(samples->size(), 4u);
  const CampaignSample& first = (*samples)[0];
  EXPECT_EQ(first.config, ConfigLabel());
  EXPECT_EQ(first.job.spec.context_length, 1000);
  EXPECT_EQ(first.job.state, JobState::kDone);
  ASSERT_TRUE(first.result.has_value());
  EXPECT_EQ(first.result->outcome, P);
  EXPECT_EQ(first.result->prompt_hash, "hash-" + first.job.key.substr(0, 8));
  EXPECT_GT(first.result_id, 0);
  EXPECT_EQ(first.result_created_ms, 4000);
  EXPECT_TRUE(first.result->probes.empty());
  ASSERT_TRUE((*samples)[1].result.has_value());
  EXPECT_EQ((*samples)[1].result->outcome, M);
  ASSERT_EQ((*samples)[1].result->probes.size(), 1u);  // WithProbes went to the second result
  EXPECT_EQ((*samples)[1].result->probes[0].needle_rank_min, 2);
  EXPECT_FALSE((*samples)[3].result.has_value());  // the pending job
  EXPECT_EQ((*samples)[3].result_id, 0);
  EXPECT_EQ((*samples)[3].job.state, JobState::kQueued);
  // Without probes, none are read.
  auto lean = store_->CampaignSamples(campaign_, false);
  ASSERT_TRUE(lean.ok());
  EXPECT_TRUE((*lean)[1].result->probes.empty());
  EXPECT_EQ(store_->CampaignSamples(9999, false).status().code(), StatusCode::kNotFound);
}

TEST_F(BaselineStoreTest, BaselinesFreezeResults) {
  auto set = store_->SetBaseline("release-1", campaign_, "first cut", 10'000);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->name, "release-1");
  EXPECT_EQ(set->campaign_name, "base");
  EXPECT_EQ(set->jobs, 4);
  EXPECT_EQ(set->results, 3);
  EXPECT_EQ(set->created_ms, 10'000);

  // Rerun the first job: the campaign now reports a miss, the baseline still its pass.
  const JobSpec first = MakeSpec(1000, 0.0, 0, 16, "cpu", campaign_);
  Rerun(first, 2, M);
  auto live = store_->CampaignSamples(campaign_, false);
  auto frozen = store_->BaselineSamples("release-1", false);
  ASSERT_TRUE(live.ok() && frozen.ok()) << frozen.status().ToString();
  ASSERT_EQ(frozen->size(), 4u);
  EXPECT_EQ((*live)[0].job.key, first.Key());
  EXPECT_EQ((*live)[0].result->outcome, M);
  EXPECT_EQ((*frozen)[0].job.key, first.Key());
  EXPECT_EQ((*frozen)[0].result->outcome, P);
  EXPECT_EQ((*frozen)[0].result->attempt, 1);
  EXPECT_EQ((*frozen)[0].config, ConfigLabel());
  EXPECT_FALSE((*frozen)[3].result.has_value());

  // The history has both results, oldest first.
  auto history = store_->ResultHistory(first.Key());
  ASSERT_TRUE(history.ok()) << history.status().ToString();
  ASSERT_EQ(history->size(), 2u);
  EXPECT_EQ((*history)[0].second.outcome, P);
  EXPECT_EQ((*history)[1].second.outcome, M);
  EXPECT_LT((*history)[0].first, (*history)[1].first);
  EXPECT_TRUE(store_->ResultHistory("nope")->empty());

  // Setting the name again re-freezes (the rerun now counts) and keeps created_ms.
  auto again = store_->SetBaseline("release-1", campaign_, "", 20'000);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->created_ms, 10'000);
  EXPECT_EQ(again->updated_ms, 20'000);
  auto refrozen = store_->BaselineSamples("release-1", false);
  ASSERT_TRUE(refrozen.ok());
  EXPECT_EQ((*refrozen)[0].result->outcome, M);

  ASSERT_TRUE(store_->SetBaseline("a-second", campaign_, "", 30'000).ok());
  auto list = store_->ListBaselines();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].name, "a-second");
  EXPECT_EQ((*list)[1].name, "release-1");
  ASSERT_TRUE(store_->DeleteBaseline("a-second").ok());
  EXPECT_EQ(store_->DeleteBaseline("a-second").code(), StatusCode::kNotFound);
  auto gone = store_->FindBaseline("a-second");
  ASSERT_TRUE(gone.ok());
  EXPECT_FALSE(gone->has_value());
  EXPECT_EQ(store_->BaselineSamples("a-second", false).status().code(), StatusCode::kNotFound);
}

TEST_F(BaselineStoreTest, BadBaselineInput) {
  EXPECT_EQ(store_->SetBaseline("", campaign_, "", 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->SetBaseline("x", 4242, "", 1).status().code(), StatusCode::kNotFound);
  auto none = store_->FindBaseline("x");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());  // the failed set left nothing behind
}

TEST_F(BaselineStoreTest, ReadOnlyStoresCannotSetBaselines) {
  ASSERT_TRUE(store_->SetBaseline("r", campaign_, "", 1).ok());
  auto ro = Store::Open(dir_.File("nw.db"), Store::Mode::kReadOnly);
  ASSERT_TRUE(ro.ok());
  EXPECT_EQ((*ro)->SetBaseline("r2", campaign_, "", 2).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ((*ro)->DeleteBaseline("r").code(), StatusCode::kFailedPrecondition);
  auto samples = (*ro)->BaselineSamples("r", false);
  ASSERT_TRUE(samples.ok()) << samples.status().ToString();
  EXPECT_EQ(samples->size(), 4u);
}

TEST_F(BaselineStoreTest, FlakyVerdicts) {
  const JobSpec first = MakeSpec(1000, 0.0, 0, 16, "cpu", campaign_);
  FlakyVerdict v;
  v.job_key = first.Key();
  v.gate = "base -> cand";
  v.runs = 4;
  v.passes = 3;
  v.misses = 1;
  v.verdict = "flaky";
  v.result_ids = {1, 7, 8, 9};
  v.decided_ms = 77;
  ASSERT_TRUE(store_->RecordFlakyVerdicts({v}).ok());
  FlakyVerdict stable = v;
  stable.passes = 4;
  stable.misses = 0;
  stable.verdict = "stable_pass";
  ASSERT_TRUE(store_->RecordFlakyVerdicts({stable}).ok());
  auto got = store_->FlakyVerdicts(first.Key());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0].verdict, "flaky");
  EXPECT_EQ((*got)[0].result_ids, (std::vector<int64_t>{1, 7, 8, 9}));
  EXPECT_EQ((*got)[0].gate, "base -> cand");
  EXPECT_EQ((*got)[1].verdict, "stable_pass");

  FlakyVerdict bad = v;
  bad.verdict = "maybe";
  EXPECT_EQ(store_->RecordFlakyVerdicts({bad}).code(), StatusCode::kInvalidArgument);
  FlakyVerdict unknown = v;
  unknown.job_key = "0000";
  EXPECT_EQ(store_->RecordFlakyVerdicts({stable, unknown}).code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->FlakyVerdicts(first.Key())->size(), 2u);  // the failed batch added nothing
}

}  // namespace
}  // namespace nw
