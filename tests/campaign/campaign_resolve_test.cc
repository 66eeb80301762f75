// ResolveCampaign (model folder, config limits, job limits), ExpandCampaign (JobSpecs, order,
// keys) and CampaignFingerprint.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "coordinator/campaign/campaign.h"
#include "engine/checkpoint/model_files.h"
#include "engine/engine.h"
#include "tests/campaign/campaign_test_util.h"

namespace nw {
namespace {

using ::testing::HasSubstr;
using testing_campaign::TempDir;
using testing_campaign::WriteFile;
using testing_campaign::WriteTinyModel;

class ResolveTest : public ::testing::Test {
 protected:
  void SetUp() override { WriteTinyModel(model_dir()); }
  std::filesystem::path model_dir() const { return tmp_.path() / "models" / "tiny"; }

  // Writes `text` to <tmp>/campaigns/<file> and parses it (so `model: ../models/tiny` resolves).
  Campaign Parse(const std::string& file, const std::string& text) {
    const auto path = tmp_.path() / "campaigns" / file;
    WriteFile(path, text);
    auto c = ParseCampaignFile(path);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? *std::move(c) : Campaign{};
  }
  ResolvedCampaign Resolve(const Campaign& c, const ResolveOptions& o = {}) {
    auto r = ResolveCampaign(c, o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *std::move(r) : ResolvedCampaign{};
  }
  std::vector<JobSpec> Expand(const ResolvedCampaign& r) {
    auto jobs = ExpandCampaign(r);
    EXPECT_TRUE(jobs.ok()) << jobs.status().ToString();
    return jobs.ok() ? *std::move(jobs) : std::vector<JobSpec>{};
  }

  TempDir tmp_;
};

constexpr const char* kSmall = R"(name: small
model: ../models/tiny
matrix:
  context_length: [256, 512]
  needle_position: [0.0, -30]
  topk: [16, 32]
  precision: [fp32, k8]
  backend: [cpu, cpu-paged]
precisions:
  k8: {base: bf16, index_k: fp8}
trials: 2
seed: 3
generation: {max_new_tokens: 12}
probe: true
)";

TEST_F(ResolveTest, ResolvesTheModelRelativeToTheFile) {
  Campaign c = Parse("small.yaml", kSmall);
  EXPECT_EQ(c.model_dir, model_dir().lexically_normal());
  ResolvedCampaign r = Resolve(c);
  EXPECT_EQ(r.model_dir, model_dir().lexically_normal());
  EXPECT_TRUE(r.model_dir.is_absolute());
  auto files = LocateModel(model_dir());
  ASSERT_TRUE(files.ok());
  EXPECT_EQ(r.model_digest, files->digest);
  EXPECT_EQ(r.model_digest.size(), 64u);
  EXPECT_EQ(r.model_config.max_position_embeddings, 65536);
  EXPECT_EQ(r.model_config.index_topk, 16);
  EXPECT_EQ(r.max_jobs, kDefaultMaxJobs);
}

TEST_F(ResolveTest, ExpandFillsEveryJobField) {
  ResolvedCampaign r = Resolve(Parse("small.yaml", kSmall));
  std::vector<JobSpec> jobs = Expand(r);
  ASSERT_EQ(jobs.size(), 2u * 2 * 2 * 2 * 2 * 2);
  for (const JobSpec& j : jobs) {
    EXPECT_EQ(j.model_dir, model_dir().lexically_normal().string());
    EXPECT_EQ(j.model_digest, r.model_digest);
    EXPECT_EQ(j.engine_version, kEngineVersion);
    EXPECT_EQ(j.task, "niah-single");
    EXPECT_EQ(j.haystack, "noise");
    EXPECT_EQ(j.max_new_tokens, 12);
    EXPECT_TRUE(j.probe);
    EXPECT_EQ(j.seed, DeriveTrialSeed(3, j.trial));
    EXPECT_TRUE(j.precision.Validate().ok());
    // The JSON round trip keeps the key.
    auto back = JobSpec::FromJson(j.ToJson());
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->Key(), j.Key());
  }
  // Order: backend, precision, topk, context_length, needle_position, trial (innermost).
  auto brief = [](const JobSpec& j) {
    return j.backend + " " + j.precision.name + " " + std::to_string(j.topk) + " " +
           std::to_string(j.context_length) + " " + std::to_string(j.needle_position) + " " +
           std::to_string(j.trial);
  };
  EXPECT_EQ(brief(jobs[0]), "cpu fp32 16 256 0.000000 0");
  EXPECT_EQ(brief(jobs[1]), "cpu fp32 16 256 0.000000 1");
  EXPECT_EQ(brief(jobs[2]), "cpu fp32 16 256 -30.000000 0");
  EXPECT_EQ(brief(jobs[4]), "cpu fp32 16 512 0.000000 0");
  EXPECT_EQ(brief(jobs[8]), "cpu fp32 32 256 0.000000 0");
  EXPECT_EQ(brief(jobs[16]), "cpu k8 16 256 0.000000 0");
  EXPECT_EQ(brief(jobs[32]), "cpu-paged fp32 16 256 0.000000 0");
  EXPECT_EQ(brief(jobs.back()), "cpu-paged k8 32 512 -30.000000 1");
  EXPECT_EQ(jobs[16].precision.index_k, NumFormat::kFp8);
  EXPECT_EQ(jobs[16].precision.weights, NumFormat::kBf16);
  // Every job is distinct.
  std::set<std::string> keys;
  for (const JobSpec& j : jobs) keys.insert(j.Key());
  EXPECT_EQ(keys.size(), jobs.size());
}

TEST_F(ResolveTest, SameYamlGivesSameJobsAndKeysInTheSameOrder) {
  std::vector<JobSpec> a = Expand(Resolve(Parse("a.yaml", kSmall)));
  std::vector<JobSpec> b = Expand(Resolve(Parse("b.yaml", kSmall)));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].ToJson().dump(), b[i].ToJson().dump());
    EXPECT_EQ(a[i].Key(), b[i].Key());
  }
  EXPECT_EQ(CampaignFingerprint(a), CampaignFingerprint(b));
}

TEST_F(ResolveTest, OverlappingCampaignsShareKeys) {
  // Different names, descriptions, comments, axis spellings and extra cells; the cells at
  // (512, 0.5, topk 16, fp32, cpu) with trials 0 and 1 are the same jobs.
  std::vector<JobSpec> a = Expand(Resolve(Parse("a.yaml", R"(name: first
description: one
model: ../models/tiny
matrix:
  context_length: [256, 512]
  needle_position: 0.5
  topk: 16
trials: 2
)")));
  std::vector<JobSpec> b = Expand(Resolve(Parse("b.yaml", R"(# another campaign
name: second
model: ../models/tiny/       # same folder, other spelling
task: niah-single
haystack: noise
matrix:
  context_length: {geometric: {from: 512, to: 2048, factor: 2}}
  needle_position: [0.5, 1.0]
  topk: [16]
  precision: [fp32]
  backend: cpu
trials: 3
seed: 0
)")));
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 3u * 2 * 3);
  std::set<std::string> ka, kb;
  for (const JobSpec& j : a) ka.insert(j.Key());
  for (const JobSpec& j : b) kb.insert(j.Key());
  std::vector<std::string> shared;
  std::set_intersection(ka.begin(), ka.end(), kb.begin(), kb.end(), std::back_inserter(shared));
  ASSERT_EQ(shared.size(), 2u);
  for (const JobSpec& j : a) {
    const bool expect_shared = j.context_length == 512;
    EXPECT_EQ(kb.count(j.Key()) == 1, expect_shared) << j.ToJson().dump();
  }
  EXPECT_NE(CampaignFingerprint(a), CampaignFingerprint(b));
  // A different seed or another model digest makes different jobs.
  std::vector<JobSpec> c = Expand(Resolve(Parse("c.yaml", R"(name: third
model: ../models/tiny
matrix: {context_length: 512, needle_position: 0.5, topk: 16}
seed: 1
)")));
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(ka.count(c[0].Key()), 0u);
  WriteTinyModel(tmp_.path() / "models" / "tiny2", "other weights");
  ResolveOptions other;
  other.model_dir = tmp_.path() / "models" / "tiny2";
  std::vector<JobSpec> d = Expand(Resolve(Parse("a.yaml", R"(name: first
model: ../models/tiny
matrix: {context_length: 512, needle_position: 0.5, topk: 16}
)"),
                                          other));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].model_dir, (tmp_.path() / "models" / "tiny2").lexically_normal().string());
  EXPECT_EQ(ka.count(d[0].Key()), 0u);
}

TEST_F(ResolveTest, FingerprintIsOrderIndependent) {
  std::vector<JobSpec> a = Expand(Resolve(Parse("a.yaml", kSmall)));
  std::vector<JobSpec> reversed(a.rbegin(), a.rend());
  EXPECT_EQ(CampaignFingerprint(a), CampaignFingerprint(reversed));
  a.pop_back();
  EXPECT_NE(CampaignFingerprint(a), CampaignFingerprint(reversed));
  EXPECT_EQ(CampaignFingerprint(a).size(), 64u);
}

TEST_F(ResolveTest, ContextLongerThanTheModelIsAnErrorNamingTheValue) {
  Campaign c = Parse("long.yaml", R"(name: long
model: ../models/tiny
matrix:
  context_length: [1024, 65536, 70000]
  needle_position: 0.5
  topk: 16
)");
  auto r = ResolveCampaign(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(),
              HasSubstr("long.yaml:4:33: matrix.context_length[2]: context_length 70000 is longer "
                        "than the model's max_position_embeddings (65536, "));
  // Excluding it entirely makes the campaign fit.
  Campaign ok = Parse("long.yaml", R"(name: long
model: ../models/tiny
matrix:
  context_length: [1024, 65536, 70000]
  needle_position: 0.5
  topk: 16
exclude: [{context_length: 70000}]
)");
  EXPECT_TRUE(ResolveCampaign(ok).ok());
}

// Issue 19: probes name indexer layers; a model without any (no compress ratio 4) is refused
// for a campaign that asks for probes, with the reason, and accepted without them.
TEST_F(ResolveTest, ProbesOnAModelWithoutIndexerLayersAreRefused) {
  std::string config = testing_campaign::kTinyConfigJson;
  const std::string ratios = "\"compress_ratios\": [0, 4, 128, 0]";
  config.replace(config.find(ratios), ratios.size(), "\"compress_ratios\": [0, 128, 128, 0]");
  WriteFile(model_dir() / "config.json", config);
  const std::string text = R"(name: noindexer
model: ../models/tiny
matrix:
  context_length: 1024
  needle_position: 0.5
  topk: 16
probe: true
)";
  auto r = ResolveCampaign(Parse("p.yaml", text));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(),
              HasSubstr("probe: the model has no layer with an indexer to probe (compress_ratios "
                        "has no 4;"));
  EXPECT_TRUE(ResolveCampaign(Parse("p.yaml", text.substr(0, text.find("probe:")))).ok());
}

TEST_F(ResolveTest, JobLimitPrecedence) {
  // 101 positions x 100 lengths = 10100 jobs: over the default limit.
  const std::string body = R"(model: ../models/tiny
matrix:
  context_length: {linear: {from: 1000, to: 100000, step: 1000}}
  needle_position: {linear: {from: 0, to: 1, step: 0.01}}
  topk: 16
)";
  Campaign big = Parse("big.yaml", "name: big\n" + body);
  ASSERT_EQ(big.job_count(), 10100);
  // (Lengths beyond the model are caught after the limit; the limit comes first.)
  auto r = ResolveCampaign(big);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr("big.yaml:3:1: matrix: the campaign expands to 10100 jobs (10100 cells x 1 "
                        "trials), more than the limit of 10000 (the default limit)"));
  // --max-jobs raises it (and now the model's context limit speaks).
  ResolveOptions cli;
  cli.max_jobs = 20000;
  auto raised = ResolveCampaign(big, cli);
  ASSERT_FALSE(raised.ok());
  EXPECT_THAT(raised.status().message(), HasSubstr("max_position_embeddings"));
  // The campaign's own max_jobs raises the default too.
  Campaign declared = Parse("big.yaml", "name: big\nmax_jobs: 20000\n" + body);
  auto decl = ResolveCampaign(declared);
  ASSERT_FALSE(decl.ok());
  EXPECT_THAT(decl.status().message(), HasSubstr("max_position_embeddings"));
  // --max-jobs wins over the campaign's max_jobs, in both directions.
  Campaign small = Parse("small.yaml", kSmall);  // 64 jobs
  cli.max_jobs = 63;
  auto capped = ResolveCampaign(small, cli);
  ASSERT_FALSE(capped.ok());
  EXPECT_THAT(capped.status().message(),
              HasSubstr("small.yaml:3:1: matrix: the campaign expands to 64 jobs (32 cells x 2 "
                        "trials), more than the limit of 63 (--max-jobs)"));
  cli.max_jobs = 64;
  EXPECT_EQ(Resolve(small, cli).max_jobs, 64);
  ResolveOptions over;
  over.max_jobs = kMaxJobsCeiling + 1;
  EXPECT_FALSE(ResolveCampaign(small, over).ok());
}

TEST_F(ResolveTest, MissingModelFilesAreReportedAtTheModelField) {
  Campaign c = Parse("m.yaml", R"(name: m
model: ../models/none
matrix: {context_length: 256, needle_position: 0.5, topk: 16}
)");
  auto r = ResolveCampaign(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("m.yaml:2:8: model: "));
  std::filesystem::remove(model_dir() / "tokenizer.json");
  auto t = ResolveCampaign(Parse("small.yaml", kSmall));
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("small.yaml:2:8: model: "));
  EXPECT_THAT(t.status().message(), HasSubstr("tokenizer.json"));
}

TEST_F(ResolveTest, BadModelConfigIsReportedAtTheModelField) {
  WriteFile(model_dir() / "config.json", R"({"model_type": "deepseek_v4"})");
  auto r = ResolveCampaign(Parse("small.yaml", kSmall));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("small.yaml:2:8: model: "));
  EXPECT_THAT(r.status().message(), HasSubstr("config.json"));
}

TEST_F(ResolveTest, ExpandNeedsAResolvedCampaign) {
  ResolvedCampaign unresolved;
  unresolved.campaign = Parse("small.yaml", kSmall);
  auto jobs = ExpandCampaign(unresolved);
  ASSERT_FALSE(jobs.ok());
  EXPECT_EQ(jobs.status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace nw

namespace nw {
namespace {

// The fault axis (docs/faults.md): `none` (or no axis) leaves every job and key as it was; a
// fault is part of the key but not of the prompt.
TEST_F(ResolveTest, FaultNoneKeepsEveryJobAndKey) {
  const auto plain = Expand(Resolve(Parse("a.yaml", kSmall)));
  std::string text = kSmall;
  text.replace(text.find("  backend: [cpu, cpu-paged]\n"), 28,
               "  backend: [cpu, cpu-paged]\n  fault: [none]\n");
  const auto none = Expand(Resolve(Parse("b.yaml", text)));
  ASSERT_EQ(plain.size(), none.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(plain[i].Key(), none[i].Key());
    EXPECT_EQ(none[i].fault, "none");
    EXPECT_FALSE(none[i].ToJson().contains("fault"));
  }
  EXPECT_EQ(CampaignFingerprint(plain), CampaignFingerprint(none));
}

TEST_F(ResolveTest, AFaultIsInTheKeyNotThePrompt) {
  std::string text = kSmall;
  text.replace(text.find("  backend: [cpu, cpu-paged]\n"), 28,
               "  backend: [cpu, cpu-paged]\n  fault: [none, partial-block-mod4]\n");
  const auto jobs = Expand(Resolve(Parse("c.yaml", text)));
  const auto plain = Expand(Resolve(Parse("a.yaml", kSmall)));
  ASSERT_EQ(jobs.size(), 2 * plain.size());
  std::set<std::string> plain_keys;
  for (const JobSpec& j : plain) plain_keys.insert(j.Key());
  int faulted = 0;
  for (const JobSpec& j : jobs) {
    if (j.fault == "none") {
      EXPECT_TRUE(plain_keys.count(j.Key()));
      continue;
    }
    ++faulted;
    EXPECT_EQ(j.fault, "partial-block-mod4");
    EXPECT_FALSE(plain_keys.count(j.Key()));
    EXPECT_EQ(j.ToJson().at("fault"), "partial-block-mod4");
    JobSpec clean = j;
    clean.fault = "none";
    EXPECT_EQ(clean.HaystackSeed(), j.HaystackSeed());
    EXPECT_TRUE(plain_keys.count(clean.Key()));
    auto back = JobSpec::FromJson(j.ToJson());
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->Key(), j.Key());
  }
  EXPECT_EQ(faulted, static_cast<int>(plain.size()));
}

}  // namespace
}  // namespace nw
