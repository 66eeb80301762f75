// The campaign files in the tree: every tests/data/campaigns/bad/*.yaml must be rejected with the
// message its header announces, and every experiments/*.yaml must parse (and resolve against a
// model with the shipped tiny config).
//
// A bad file starts with one or more "# expect: TEXT" lines. The first TEXT must follow
// "<file path>:" in the error message (so it begins with line:column when the error has a
// location); further TEXTs must occur anywhere in it. "# model: campaign" resolves against the
// file's own `model` instead of a test model folder.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "coordinator/campaign/campaign.h"
#include "tests/campaign/campaign_test_util.h"

namespace nw {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::vector<fs::path> YamlFiles(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".yaml") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct Header {
  std::vector<std::string> expect;
  bool campaign_model = false;
};

Header ReadHeader(const fs::path& p) {
  Header h;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line) && line.rfind("# ", 0) == 0) {
    if (line.rfind("# expect: ", 0) == 0) h.expect.push_back(line.substr(10));
    if (line == "# model: campaign") h.campaign_model = true;
  }
  return h;
}

// Parses, then resolves and expands; the first error.
Status Load(const fs::path& file, const ResolveOptions& options) {
  auto c = ParseCampaignFile(file);
  if (!c.ok()) return c.status();
  auto r = ResolveCampaign(*c, options);
  if (!r.ok()) return r.status();
  auto jobs = ExpandCampaign(*r);
  if (!jobs.ok()) return jobs.status();
  return Status::Ok();
}

TEST(CampaignFilesTest, EveryBadFileIsRejectedWithItsMessage) {
  testing_campaign::TempDir tmp;
  testing_campaign::WriteTinyModel(tmp.path());
  ResolveOptions with_model;
  with_model.model_dir = tmp.path();

  const fs::path dir = fs::path(NW_TEST_DATA_DIR) / "campaigns" / "bad";
  const std::vector<fs::path> files = YamlFiles(dir);
  std::set<std::string> names;
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.string());
    names.insert(file.stem().string());
    const Header h = ReadHeader(file);
    ASSERT_FALSE(h.expect.empty()) << "no '# expect:' header";
    const Status s = Load(file, h.campaign_model ? ResolveOptions{} : with_model);
    ASSERT_FALSE(s.ok()) << "accepted";
    EXPECT_THAT(s.message(), HasSubstr(file.string() + ":" + h.expect[0]));
    for (size_t i = 1; i < h.expect.size(); ++i) EXPECT_THAT(s.message(), HasSubstr(h.expect[i]));
  }
  // The cases the suite promises to cover.
  for (const char* required :
       {"unknown_key", "wrong_type", "topk_zero", "negative_fraction", "needle_outside_context",
        "unknown_backend", "unknown_precision", "context_too_long", "too_many_jobs", "alias_bomb",
        "malformed", "missing_name"}) {
    EXPECT_EQ(names.count(required), 1u) << required;
  }
}

TEST(CampaignFilesTest, BadFileHeadersAreExercised) {
  // A file whose problem is fixed must load: guards against headers that pass by accident.
  testing_campaign::TempDir tmp;
  testing_campaign::WriteTinyModel(tmp.path() / "model");
  const fs::path file = tmp.path() / "campaigns" / "fixed.yaml";
  testing_campaign::WriteFile(file, R"(name: fixed
model: ../model
matrix:
  context_length: [256, 512]
  needle_position: [0.5]
  topk: [16, 32, 1]
probe: true
trials: 3
)");
  EXPECT_TRUE(Load(file, {}).ok()) << Load(file, {}).ToString();
}

class ExperimentsTest : public ::testing::Test {
 protected:
  static std::vector<fs::path> Files() {
    return YamlFiles(fs::path(NW_SOURCE_DIR) / "experiments");
  }
};

TEST_F(ExperimentsTest, EveryExperimentParses) {
  const std::vector<fs::path> files = Files();
  std::set<std::string> names;
  for (const fs::path& f : files) {
    SCOPED_TRACE(f.string());
    auto c = ParseCampaignFile(f);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->name, f.stem().string()) << "campaign name should match the file name";
    EXPECT_TRUE(c->warnings.empty()) << c->warnings.front();
    EXPECT_FALSE(c->description.empty());
    EXPECT_EQ(c->model, "../models/tiny-v4");
    EXPECT_EQ(c->model_dir, (fs::path(NW_SOURCE_DIR) / "models" / "tiny-v4").lexically_normal());
    EXPECT_GT(c->job_count(), 0);
    EXPECT_LE(c->job_count(), kDefaultMaxJobs);
    names.insert(c->name);
  }
  for (const char* required : {"quickstart", "needle-sweep", "topk-doubled",
                               "index-keys-fp8-vs-bf16", "prefill-paths", "window"}) {
    EXPECT_EQ(names.count(required), 1u) << required;
  }
}

TEST_F(ExperimentsTest, JobCountsMatchTheDocumentation) {
  // docs/campaigns.md "Experiments" and the files' own comments state these.
  const std::map<std::string, int64_t> expected = {
      {"quickstart", 50},        {"needle-sweep", 126},
      {"topk-doubled", 150},     {"index-keys-fp8-vs-bf16", 150},
      {"prefill-paths", 96},     {"window", 24},
      {"quickstart-search", 50}, {"boundary-search", 96},
      {"boundary-grid", 96},     {"pd-vs-single", 24}};
  for (const auto& [name, jobs] : expected) {
    auto c = ParseCampaignFile(fs::path(NW_SOURCE_DIR) / "experiments" / (name + ".yaml"));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->job_count(), jobs) << name;
  }
}

TEST_F(ExperimentsTest, NegativeOffsetsLeaveRoomForTheQuestion) {
  // The question takes up to 47 tokens with the tiny model's vocabulary; -N must exceed it.
  for (const fs::path& f : Files()) {
    auto c = ParseCampaignFile(f);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    for (const AxisValue& v : c->values[static_cast<size_t>(Axis::kNeedlePosition)]) {
      if (v.number() < 0) {
        EXPECT_LE(v.number(), -64) << f.string();
      }
    }
  }
}

TEST_F(ExperimentsTest, EveryExperimentResolvesAgainstTheTinyConfig) {
  testing_campaign::TempDir tmp;
  testing_campaign::WriteTinyModel(tmp.path());
  ResolveOptions o;
  o.model_dir = tmp.path();
  for (const fs::path& f : Files()) {
    SCOPED_TRACE(f.string());
    auto c = ParseCampaignFile(f);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    auto r = ResolveCampaign(*c, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto jobs = ExpandCampaign(*r);
    ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
    EXPECT_EQ(static_cast<int64_t>(jobs->size()), c->job_count());
    for (const JobSpec& j : *jobs) {
      EXPECT_TRUE(j.backend == "cpu" || j.backend == "cpu-paged" || j.backend == "cpu-pd")
          << j.backend;
    }
  }
}

TEST_F(ExperimentsTest, QuickstartIsSmallAndOnTheCpu) {
  auto c = ParseCampaignFile(fs::path(NW_SOURCE_DIR) / "experiments" / "quickstart.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_LE(c->job_count(), 60);
  EXPECT_GE(c->job_count(), 20);
  EXPECT_TRUE(c->probe);
  EXPECT_EQ(c->trial_seeds.size(), 2u);
  const auto& lengths = c->matrix[static_cast<size_t>(Axis::kContextLength)];
  ASSERT_GE(lengths.size(), 3u);
  EXPECT_EQ(lengths.front().integer(), 256);
  EXPECT_EQ(lengths.back().integer(), 4096);
  const auto& positions = c->matrix[static_cast<size_t>(Axis::kNeedlePosition)];
  EXPECT_EQ(positions.size(), 5u);
  EXPECT_TRUE(std::any_of(positions.begin(), positions.end(),
                          [](const AxisValue& v) { return v.number() < 0; }));
  for (Axis a : {Axis::kBackend, Axis::kPrecision, Axis::kTopk}) {
    EXPECT_EQ(c->matrix[static_cast<size_t>(a)].size(), 1u) << AxisName(a);
  }
  EXPECT_EQ(c->matrix[static_cast<size_t>(Axis::kBackend)][0].name(), "cpu");
  EXPECT_EQ(c->matrix[static_cast<size_t>(Axis::kPrecision)][0].name(), "fp32");
  EXPECT_EQ(c->matrix[static_cast<size_t>(Axis::kTopk)][0].integer(), 64);
}

TEST_F(ExperimentsTest, IndexKeyProfilesDifferOnlyInIndexK) {
  auto c =
      ParseCampaignFile(fs::path(NW_SOURCE_DIR) / "experiments" / "index-keys-fp8-vs-bf16.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->precisions.size(), 2u);
  PrecisionProfile a = c->precisions.begin()->second;
  PrecisionProfile b = std::next(c->precisions.begin())->second;
  EXPECT_NE(a.index_k, b.index_k);
  a.name = b.name;
  a.index_k = b.index_k;
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace nw
