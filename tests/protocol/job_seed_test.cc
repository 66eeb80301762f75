// JobSpec::HaystackSeed: the prompt depends on the design point only, so configurations compared
// with each other read the same prompts; every design-point field changes it.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "protocol/job.h"
#include "tests/protocol/sample_spec.h"

namespace nw {
namespace {

JobSpec Spec() { return testing_protocol::SampleSpec(); }

using Change = std::pair<std::string, std::function<void(JobSpec*)>>;

TEST(JobSeedTest, WhatACampaignComparesKeepsThePrompt) {
  const JobSpec base = Spec();
  JobSpec moved = base;
  moved.model_dir = "/elsewhere";  // where the files live is neither key nor prompt
  EXPECT_EQ(moved.Key(), base.Key());
  EXPECT_EQ(moved.HaystackSeed(), base.HaystackSeed());
  const std::vector<Change> same = {
      {"model_digest", [](JobSpec* s) { s->model_digest = "def"; }},
      {"engine_version", [](JobSpec* s) { s->engine_version = "nw-engine-next"; }},
      {"topk", [](JobSpec* s) { s->topk = 32; }},
      {"precision", [](JobSpec* s) { s->precision.index_k = NumFormat::kFp8; }},
      {"backend", [](JobSpec* s) { s->backend = "cpu-paged"; }},
      {"max_new_tokens", [](JobSpec* s) { s->max_new_tokens = 20; }},
      {"probe", [](JobSpec* s) { s->probe = false; }},
      {"http", [](JobSpec* s) {
         s->backend = "http";
         s->http = HttpBackendSpec{};
         s->http->url = "http://127.0.0.1:8000";
         s->http->model = "tiny";
       }}};
  for (const auto& [name, change] : same) {
    JobSpec s = base;
    change(&s);
    EXPECT_EQ(s.HaystackSeed(), base.HaystackSeed()) << name;
    EXPECT_NE(s.Key(), base.Key()) << name << " is part of the key";
  }
}

TEST(JobSeedTest, EveryDesignPointFieldChangesThePrompt) {
  const JobSpec base = Spec();
  const std::vector<Change> differ = {
      {"task", [](JobSpec* s) { s->task = "niah-repeat"; }},
      {"haystack", [](JobSpec* s) { s->haystack = "essay"; }},
      {"context_length", [](JobSpec* s) { s->context_length = 4097; }},
      {"needle_position", [](JobSpec* s) { s->needle_position = 0.5; }},
      {"seed", [](JobSpec* s) { s->seed = 43; }},
      {"trial", [](JobSpec* s) { s->trial = 4; }}};
  for (const auto& [name, change] : differ) {
    JobSpec s = base;
    change(&s);
    EXPECT_NE(s.HaystackSeed(), base.HaystackSeed()) << name;
  }
  EXPECT_EQ(Spec().HaystackSeed(), base.HaystackSeed());  // deterministic
}

}  // namespace
}  // namespace nw

namespace nw {
namespace {

// A fault is part of the key, not of the prompt; "none" is written nowhere, so every job without a
// fault keeps the key it had before the field existed.
TEST(JobSeedTest, FaultIsInTheKeyAndNoneIsInvisible) {
  const JobSpec base = testing_protocol::SampleSpec();
  EXPECT_EQ(base.fault, "none");
  EXPECT_FALSE(base.ToJson().contains("fault"));
  JobSpec f = base;
  f.fault = "partial-block-mod4";
  EXPECT_NE(f.Key(), base.Key());
  EXPECT_EQ(f.HaystackSeed(), base.HaystackSeed());
  auto back = JobSpec::FromJson(f.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->fault, "partial-block-mod4");
  auto plain = JobSpec::FromJson(base.ToJson());
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->fault, "none");
  nlohmann::json j = base.ToJson();
  j["fault"] = "none";  // never written: refused, so one job has one canonical form
  EXPECT_FALSE(JobSpec::FromJson(j).ok());
  j["fault"] = 3;
  auto bad = JobSpec::FromJson(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("job.fault"), std::string::npos);
}

}  // namespace
}  // namespace nw
