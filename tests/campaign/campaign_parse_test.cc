// Parsing, validation and the cell plan (matrix, exclude, include, ranges, profiles, trials).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <tuple>

#include "coordinator/campaign/campaign.h"
#include "coordinator/campaign/yaml_guard.h"

namespace nw {
namespace {

using ::testing::HasSubstr;

// A campaign with the given matrix body (and optional extra top-level YAML).
std::string Yaml(const std::string& matrix, const std::string& extra = "") {
  return "name: t\nmodel: /models/tiny\nmatrix:\n" + matrix + extra;
}

Campaign MustParse(const std::string& text) {
  auto c = ParseCampaignText(text, "t.yaml");
  EXPECT_TRUE(c.ok()) << c.status().ToString() << "\n" << text;
  if (!c.ok()) return Campaign{};
  return *std::move(c);
}

std::string ParseError(const std::string& text) {
  auto c = ParseCampaignText(text, "t.yaml");
  EXPECT_FALSE(c.ok()) << "parsed, but should not have:\n" << text;
  if (c.ok()) return "";
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  return c.status().message();
}

// The cells as strings of every axis value (the fault only when it is not none).
std::vector<std::string> CellStrings(const Campaign& c) {
  std::vector<std::string> out;
  for (const Cell& cell : c.cells) {
    std::string s;
    for (Axis a : kAllAxes) {
      // The fault axis shows only when a cell replays one (docs/faults.md).
      if (a == Axis::kFault && c.value(cell, a).name() == "none") continue;
      if (!s.empty()) s += " ";
      s += c.value(cell, a).ToString();
    }
    out.push_back(s);
  }
  return out;
}

std::vector<std::string> AxisStrings(const Campaign& c, Axis a) {
  std::vector<std::string> out;
  for (const AxisValue& v : c.matrix[static_cast<size_t>(a)]) out.push_back(v.ToString());
  return out;
}

TEST(CampaignParseTest, MinimalCampaignGetsDefaults) {
  Campaign c = MustParse(Yaml("  context_length: 256\n  needle_position: 0.5\n  topk: 16\n"));
  EXPECT_EQ(c.name, "t");
  EXPECT_EQ(c.model_dir, std::filesystem::path("/models/tiny"));
  EXPECT_EQ(AxisStrings(c, Axis::kTask), std::vector<std::string>{"niah-single"});
  EXPECT_EQ(AxisStrings(c, Axis::kHaystack), std::vector<std::string>{"noise"});
  EXPECT_EQ(AxisStrings(c, Axis::kBackend), std::vector<std::string>{"cpu"});
  EXPECT_EQ(AxisStrings(c, Axis::kPrecision), std::vector<std::string>{"fp32"});
  ASSERT_EQ(c.cells.size(), 1u);
  EXPECT_EQ(c.trial_seeds.size(), 1u);
  EXPECT_EQ(c.job_count(), 1);
  EXPECT_EQ(c.max_new_tokens, 16);
  EXPECT_FALSE(c.probe);
  EXPECT_FALSE(c.max_jobs.has_value());
  EXPECT_EQ(c.precisions.count("fp32"), 1u);
  EXPECT_TRUE(c.warnings.empty());
}

TEST(CampaignParseTest, FullSchema) {
  const std::string text = R"(name: full-1.0_x
description: "every field"
model: ../models/tiny-v4
task: [niah-single, niah-multikey]
haystack: essay
matrix:
  context_length: [256, 512, 1024]
  needle_position: [0.0, 0.5, 1, -30]
  topk: [16, 32]
  precision: [fp32, bf16, k8]
  backend: [cpu, cpu-paged]
precisions:
  k8: {base: bf16, index_k: fp8}
trials: 3
seed: 42
generation: {max_new_tokens: 24}
probe: true
max_jobs: 5000
)";
  ParseOptions opts;
  opts.base_dir = "/work/experiments";
  auto r = ParseCampaignText(text, "full.yaml", opts);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Campaign& c = *r;
  EXPECT_EQ(c.description, "every field");
  EXPECT_EQ(c.model, "../models/tiny-v4");
  EXPECT_EQ(c.model_dir, std::filesystem::path("/work/models/tiny-v4"));
  EXPECT_EQ(c.model_where.line, 3);
  EXPECT_EQ(c.model_where.column, 8);
  EXPECT_EQ(AxisStrings(c, Axis::kTask),
            (std::vector<std::string>{"niah-single", "niah-multikey"}));
  EXPECT_EQ(AxisStrings(c, Axis::kNeedlePosition),
            (std::vector<std::string>{"0", "0.5", "1", "-30"}));
  EXPECT_EQ(c.cells.size(), 2u * 1 * 3 * 4 * 2 * 3 * 2);
  EXPECT_EQ(c.job_count(), static_cast<int64_t>(c.cells.size()) * 3);
  EXPECT_EQ(c.seed, 42);
  EXPECT_FALSE(c.explicit_seeds);
  EXPECT_EQ(c.trial_seeds, (std::vector<int64_t>{DeriveTrialSeed(42, 0), DeriveTrialSeed(42, 1),
                                                 DeriveTrialSeed(42, 2)}));
  EXPECT_EQ(c.max_new_tokens, 24);
  EXPECT_TRUE(c.probe);
  ASSERT_TRUE(c.max_jobs.has_value());
  EXPECT_EQ(*c.max_jobs, 5000);
  for (const Cell& cell : c.cells) {
    EXPECT_EQ(cell.max_new_tokens, 24);
    EXPECT_TRUE(cell.probe);
  }
  EXPECT_EQ(c.custom_precisions, std::vector<std::string>{"k8"});
  ASSERT_EQ(c.precisions.size(), 3u);
  EXPECT_EQ(c.precisions.at("k8").index_k, NumFormat::kFp8);
  EXPECT_EQ(c.precisions.at("k8").index_q, NumFormat::kBf16);
  EXPECT_EQ(c.precisions.at("k8").name, "k8");
  EXPECT_EQ(c.source_name, "full.yaml");
  EXPECT_EQ(c.text, text);
  EXPECT_EQ(c.source_sha256.size(), 64u);
}

TEST(CampaignParseTest, ExpansionOrderIsTaskOutermostNeedleInnermost) {
  Campaign c =
      MustParse(Yaml("  task: [niah-repeat, niah-single]\n  context_length: [512, 256]\n"
                     "  needle_position: [1.0, 0.0]\n  topk: 16\n"));
  EXPECT_EQ(CellStrings(c), (std::vector<std::string>{
                                "niah-repeat noise cpu fp32 16 512 1",
                                "niah-repeat noise cpu fp32 16 512 0",
                                "niah-repeat noise cpu fp32 16 256 1",
                                "niah-repeat noise cpu fp32 16 256 0",
                                "niah-single noise cpu fp32 16 512 1",
                                "niah-single noise cpu fp32 16 512 0",
                                "niah-single noise cpu fp32 16 256 1",
                                "niah-single noise cpu fp32 16 256 0",
                            }));
}

TEST(CampaignParseTest, MapKeyOrderDoesNotChangeThePlan) {
  Campaign a = MustParse(
      "name: t\nmodel: m\nmatrix:\n  context_length: [256, 512]\n  needle_position: [0.5, -30]\n"
      "  topk: [16, 32]\n  backend: [cpu, cpu-paged]\ntrials: 2\n");
  Campaign b = MustParse(
      "trials: 2\nmatrix:\n  backend: [cpu, cpu-paged]\n  topk: [16, 32]\n"
      "  needle_position: [0.5, -30]\n  context_length: [256, 512]\nmodel: m\nname: t\n");
  EXPECT_EQ(CellStrings(a), CellStrings(b));
  EXPECT_EQ(a.trial_seeds, b.trial_seeds);
}

TEST(CampaignParseTest, TaskAndHaystackAsMatrixAxes) {
  Campaign c = MustParse(Yaml(
      "  task: [niah-single, niah-multikey, niah-repeat]\n  haystack: [noise, essay, needles]\n"
      "  context_length: 256\n  needle_position: 0.5\n  topk: 16\n"));
  EXPECT_EQ(c.cells.size(), 9u);
}

TEST(CampaignParseTest, ExcludeRemovesPartialMatches) {
  const std::string m =
      "  context_length: [256, 512, 1024]\n  needle_position: [0.0, 0.5]\n  topk: 16\n"
      "  backend: [cpu, cpu-paged]\n";
  // 3 x 2 x 2 = 12; the exclude names two axes, so it drops both needle positions.
  Campaign c = MustParse(Yaml(m, "exclude:\n  - {backend: cpu-paged, context_length: 1024}\n"));
  EXPECT_EQ(c.cells.size(), 10u);
  for (const std::string& s : CellStrings(c))
    EXPECT_THAT(s, ::testing::Not(HasSubstr("cpu-paged fp32 16 1024")));
  // A list in an exclude entry means any of its values.
  Campaign any =
      MustParse(Yaml(m, "exclude:\n  - {backend: cpu-paged, context_length: [512, 1024]}\n"));
  EXPECT_EQ(any.cells.size(), 8u);
  // Several entries each remove what they match.
  Campaign two = MustParse(Yaml(
      m, "exclude:\n  - {backend: cpu-paged}\n  - {context_length: 256, needle_position: 0}\n"));
  EXPECT_EQ(two.cells.size(), 12u - 6 - 1);
  EXPECT_TRUE(two.warnings.empty());
}

// Issue 19: matching the matrix against exclude/include entries is bounded as a whole: a file
// under the size limit that would take minutes is refused in about a second, with the reason.
TEST(CampaignParseTest, ExcludeAndIncludeMatchingIsBounded) {
  // 10,000 x 1,000 = 10 million combinations against 2,000 exclude entries: 2e10 steps before.
  std::string m =
      "  context_length: {linear: {from: 1, to: 10000, step: 1}}\n"
      "  needle_position: 0.5\n  topk: {linear: {from: 1, to: 1000, step: 1}}\n";
  std::string ex = "exclude:\n";
  for (int i = 0; i < 2000; ++i) ex += "  - {context_length: " + std::to_string(i + 1) + "}\n";
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THAT(ParseError(Yaml(m, ex)),
              HasSubstr("narrow the matrix or use fewer, broader entries"));
  // An include entry whose lists cross into a huge number of items.
  std::string inc = "include:\n  - {context_length: [";
  for (int i = 0; i < 3000; ++i) inc += (i ? ", " : "") + std::to_string(20000 + i);
  inc += "], topk: [";
  for (int i = 0; i < 3000; ++i) inc += (i ? ", " : "") + std::to_string(2000 + i);
  inc += "]}\n";
  EXPECT_THAT(
      ParseError(Yaml("  context_length: [256, 512]\n  needle_position: 0.5\n  topk: 16\n", inc)),
      HasSubstr("steps"));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 30.0);  // ~1-2 s here; generous for a loaded 2-core CI box
}

TEST(CampaignParseTest, ExcludeThatMatchesNothingWarns) {
  Campaign c = MustParse(Yaml("  context_length: [256, 512]\n  needle_position: 0.5\n  topk: 16\n",
                              "exclude:\n  - {context_length: 4096}\n"));
  EXPECT_EQ(c.cells.size(), 2u);
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_THAT(c.warnings[0], HasSubstr("t.yaml:8:5: exclude[0]: matches no combination"));
}

TEST(CampaignParseTest, IncludeCreatesCombinationsFilledFromTheMatrix) {
  Campaign c =
      MustParse(Yaml("  context_length: [256, 512]\n  needle_position: [0.0, 1.0]\n  topk: 16\n"
                     "  precision: fp32\n",
                     "include:\n  - {topk: 64, precision: fp8-index}\n"));
  // 4 matrix cells, then topk 64 / fp8-index crossed with the matrix's lengths and positions.
  ASSERT_EQ(c.cells.size(), 8u);
  EXPECT_EQ(CellStrings(c)[4], "niah-single noise cpu fp8-index 64 256 0");
  EXPECT_EQ(CellStrings(c)[7], "niah-single noise cpu fp8-index 64 512 1");
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(c.cells[i].include, -1);
  for (size_t i = 4; i < 8; ++i) EXPECT_EQ(c.cells[i].include, 0);
  // The new values are in the value tables (after the matrix's), and their profile resolved.
  EXPECT_EQ(c.values[static_cast<size_t>(Axis::kTopk)].size(), 2u);
  EXPECT_EQ(c.values[static_cast<size_t>(Axis::kTopk)][1].where.path, "include[0].topk");
  EXPECT_EQ(c.precisions.count("fp8-index"), 1u);
  EXPECT_EQ(c.job_count(), 8);
}

TEST(CampaignParseTest, IncludeExtendsMatchingCombinations) {
  Campaign c = MustParse(
      Yaml("  context_length: [256, 512]\n  needle_position: [0.0, 1.0]\n  topk: 16\n",
           "generation: {max_new_tokens: 16}\nprobe: true\ninclude:\n"
           "  - {context_length: 512, max_new_tokens: 32}\n"
           "  - {context_length: 512, needle_position: 1.0, probe: false, max_new_tokens: 48}\n"));
  ASSERT_EQ(c.cells.size(), 4u);  // extending adds nothing
  std::vector<std::tuple<int, bool>> got;
  for (const Cell& cell : c.cells) got.emplace_back(cell.max_new_tokens, cell.probe);
  EXPECT_EQ(got,
            (std::vector<std::tuple<int, bool>>{{16, true}, {16, true}, {32, true}, {48, false}}));
  EXPECT_TRUE(c.warnings.empty());
}

TEST(CampaignParseTest, IncludeWithOnlySettingsAppliesToEveryCell) {
  Campaign c = MustParse(Yaml("  context_length: [256, 512]\n  needle_position: 0.5\n  topk: 16\n",
                              "probe: true\ninclude:\n  - {probe: false}\n"));
  ASSERT_EQ(c.cells.size(), 2u);
  for (const Cell& cell : c.cells) EXPECT_FALSE(cell.probe);
}

TEST(CampaignParseTest, IncludeAddsBackExcludedCombinations) {
  const std::string m =
      "  context_length: [256, 1024]\n  needle_position: 0.5\n  topk: 16\n"
      "  backend: [cpu, cpu-paged]\n";
  Campaign c = MustParse(Yaml(m,
                              "exclude:\n  - {backend: cpu-paged, context_length: 1024}\n"
                              "include:\n  - {backend: cpu-paged, context_length: 1024}\n"));
  ASSERT_EQ(c.cells.size(), 4u);
  EXPECT_EQ(CellStrings(c)[3], "niah-single noise cpu-paged fp32 16 1024 0.5");
  EXPECT_EQ(c.cells[3].include, 0);
}

TEST(CampaignParseTest, ExcludeStillAppliesToAxesAnIncludeLeavesToTheMatrix) {
  const std::string m =
      "  context_length: [256, 1024]\n  needle_position: 0.5\n  topk: 16\n"
      "  backend: [cpu, cpu-paged]\n";
  Campaign c = MustParse(Yaml(m,
                              "exclude:\n  - {backend: cpu-paged, context_length: 1024}\n"
                              "include:\n  - {topk: 64}\n"));
  // 3 matrix cells + topk 64 over the 4 (length, backend) pairs minus cpu-paged@1024.
  EXPECT_EQ(c.cells.size(), 6u);
  for (const std::string& s : CellStrings(c)) {
    EXPECT_NE(s, "niah-single noise cpu-paged fp32 64 1024 0.5");
  }
}

TEST(CampaignParseTest, DocumentedIncludeExcludeExample) {
  // The example in docs/campaigns.md, "include and exclude".
  Campaign c =
      MustParse(Yaml("  context_length: [1024, 4096]\n  needle_position: [0.0, 1.0]\n  topk: 16\n"
                     "  precision: fp32\n  backend: [cpu, cpu-paged]\n",
                     "exclude:\n  - {backend: cpu-paged, context_length: 4096}\n"
                     "include:\n  - {topk: 64, precision: fp8-index}\n"
                     "  - {context_length: 4096, max_new_tokens: 32}\n"
                     "  - {backend: cpu-paged, context_length: 4096}\n"));
  const std::vector<std::string> cells = CellStrings(c);
  ASSERT_EQ(cells.size(), 14u);
  std::vector<int> origin;
  for (const Cell& cell : c.cells) origin.push_back(cell.include);
  EXPECT_EQ(origin, (std::vector<int>{-1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 2, 2}));
  EXPECT_EQ(cells[6], "niah-single noise cpu fp8-index 64 1024 0");
  EXPECT_EQ(cells[11], "niah-single noise cpu-paged fp8-index 64 1024 1");
  EXPECT_EQ(cells[12], "niah-single noise cpu-paged fp32 16 4096 0");
  EXPECT_EQ(cells[13], "niah-single noise cpu-paged fp32 16 4096 1");
  for (size_t i = 0; i < cells.size(); ++i) {
    // Entry 1 extended the 4096 cells that existed when it ran; entry 2's cells came later.
    const bool long_ctx = c.value(c.cells[i], Axis::kContextLength).integer() == 4096;
    EXPECT_EQ(c.cells[i].max_new_tokens, long_ctx && i < 12 ? 32 : 16) << cells[i];
  }
  EXPECT_TRUE(c.warnings.empty());
}

TEST(CampaignParseTest, IncludeListsExpandToEachCombination) {
  Campaign c = MustParse(Yaml("  context_length: 256\n  needle_position: 0.5\n  topk: 16\n",
                              "include:\n  - {topk: [32, 64], backend: [cpu, cpu-paged]}\n"));
  EXPECT_EQ(c.cells.size(), 1u + 4);
  // An include repeating an earlier include's combination extends it instead of duplicating.
  Campaign d = MustParse(Yaml("  context_length: 256\n  needle_position: 0.5\n  topk: 16\n",
                              "include:\n  - {topk: 64}\n  - {topk: 64, max_new_tokens: 8}\n"));
  ASSERT_EQ(d.cells.size(), 2u);
  EXPECT_EQ(d.cells[1].max_new_tokens, 8);
}

TEST(CampaignParseTest, IncludeThatChangesNothingWarns) {
  Campaign c = MustParse(Yaml("  context_length: [256, 512]\n  needle_position: 0.5\n  topk: 16\n",
                              "include:\n  - {context_length: 512}\n"));
  EXPECT_EQ(c.cells.size(), 2u);
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_THAT(c.warnings[0], HasSubstr("include[0]: names only existing combinations"));
}

TEST(CampaignParseTest, LinearAndGeometricRanges) {
  Campaign c =
      MustParse(Yaml("  context_length: {linear: {from: 1000, to: 4500, step: 1000}}\n"
                     "  needle_position: {linear: {from: 0, to: 1, step: 0.1}}\n"
                     "  topk: {geometric: {from: 16, to: 1024, factor: 2}}\n"));
  EXPECT_EQ(AxisStrings(c, Axis::kContextLength),
            (std::vector<std::string>{"1000", "2000", "3000", "4000"}));
  EXPECT_EQ(AxisStrings(c, Axis::kNeedlePosition),
            (std::vector<std::string>{"0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7", "0.8",
                                      "0.9", "1"}));
  EXPECT_EQ(AxisStrings(c, Axis::kTopk),
            (std::vector<std::string>{"16", "32", "64", "128", "256", "512", "1024"}));
  // 0.1 steps give exactly the doubles a hand-written 0.3 gives (same job keys).
  EXPECT_EQ(c.matrix[static_cast<size_t>(Axis::kNeedlePosition)][3].number(), 0.3);

  Campaign g =
      MustParse(Yaml("  context_length: {geometric: {from: 1000, to: 64000, count: 4}}\n"
                     "  needle_position: {linear: {from: 0, to: 1, count: 5}}\n"
                     "  topk: {linear: {from: 16, to: 64, count: 4}}\n"));
  EXPECT_EQ(AxisStrings(g, Axis::kContextLength),
            (std::vector<std::string>{"1000", "4000", "16000", "64000"}));
  EXPECT_EQ(AxisStrings(g, Axis::kNeedlePosition),
            (std::vector<std::string>{"0", "0.25", "0.5", "0.75", "1"}));
  EXPECT_EQ(AxisStrings(g, Axis::kTopk), (std::vector<std::string>{"16", "32", "48", "64"}));

  // Ranges mix with plain values in a list; negative offsets come from linear ranges too.
  Campaign m = MustParse(
      Yaml("  context_length: [128, {geometric: {from: 256, to: 2048, factor: 2}}, 3000]\n"
           "  needle_position: [0.5, {linear: {from: -90, to: -30, step: 30}}]\n  topk: 16\n"));
  EXPECT_EQ(AxisStrings(m, Axis::kContextLength),
            (std::vector<std::string>{"128", "256", "512", "1024", "2048", "3000"}));
  EXPECT_EQ(AxisStrings(m, Axis::kNeedlePosition),
            (std::vector<std::string>{"0.5", "-90", "-60", "-30"}));
  // A geometric factor that does not land on `to` stops below it.
  Campaign s =
      MustParse(Yaml("  context_length: {geometric: {from: 300, to: 5000, factor: 3}}\n"
                     "  needle_position: 0.5\n  topk: 16\n"));
  EXPECT_EQ(AxisStrings(s, Axis::kContextLength), (std::vector<std::string>{"300", "900", "2700"}));
}

TEST(CampaignParseTest, RangeErrors) {
  const std::string rest = "  needle_position: 0.5\n  topk: 16\n";
  EXPECT_THAT(
      ParseError(Yaml("  context_length: {geometric: {from: 256, to: 300, count: 60}}\n" + rest)),
      HasSubstr("t.yaml:4:19: matrix.context_length: the range yields 257 twice after "
                "rounding to whole numbers; lower count"));
  EXPECT_THAT(
      ParseError(Yaml("  context_length: {linear: {from: 1, to: 1000000, step: 1}}\n" + rest)),
      HasSubstr("the range yields more than 10000 values"));
  EXPECT_THAT(
      ParseError(Yaml("  context_length: {linear: {from: 256, to: 512}}\n" + rest)),
      HasSubstr("matrix.context_length.linear: a linear range needs from, to and step or count"));
  EXPECT_THAT(ParseError(Yaml(
                  "  context_length: {linear: {from: 256, to: 512, step: 8, count: 3}}\n" + rest)),
              HasSubstr("give one of step and count, not both"));
  EXPECT_THAT(ParseError(Yaml("  context_length: {cubic: {from: 256, to: 512}}\n" + rest)),
              HasSubstr("unknown key 'cubic'"));
  EXPECT_THAT(
      ParseError(Yaml("  context_length: {linear: {from: 0, to: 512, step: 256}}\n" + rest)),
      HasSubstr("matrix.context_length.linear.from: must be >= 1, got 0"));
  EXPECT_THAT(ParseError(Yaml("  context_length: 256\n  needle_position: {linear: {from: 0.5, to: "
                              "1.5, step: 0.5}}\n  topk: 16\n")),
              HasSubstr("matrix.needle_position: must be a fraction in [0, 1]"));
  EXPECT_THAT(ParseError(Yaml(
                  "  context_length: [256, {linear: {from: 128, to: 512, step: 128}}]\n" + rest)),
              HasSubstr("duplicate value 256"));
  EXPECT_THAT(ParseError(Yaml("  context_length: 256\n  needle_position: 0.5\n  topk: 16\n  "
                              "backend: {linear: {from: 1, to: 2, step: 1}}\n")),
              HasSubstr("matrix.backend: must be a name or a list of names, got a map"));
}

TEST(CampaignParseTest, ScalarErrorsNameTheField) {
  const std::string base = "  context_length: 256\n  needle_position: 0.5\n";
  EXPECT_THAT(ParseError(Yaml(base + "  topk: 16.5\n")),
              HasSubstr("t.yaml:6:9: matrix.topk: must be an integer, got the number 16.5"));
  EXPECT_THAT(ParseError(Yaml(base + "  topk: [[16]]\n")),
              HasSubstr("matrix.topk[0]: lists inside lists are not allowed"));
  EXPECT_THAT(ParseError(Yaml(base + "  topk: 99999999999999999999\n")),
              HasSubstr("matrix.topk: integer 99999999999999999999 is out of range"));
  EXPECT_THAT(ParseError(Yaml(base + "  topk: 2000000\n")),
              HasSubstr("matrix.topk: must be <= 1048576, got 2000000"));
  EXPECT_THAT(ParseError(Yaml(base + "  topk:\n")),
              HasSubstr("matrix.topk: must be an integer, got null"));
  EXPECT_THAT(ParseError(Yaml("  context_length: 256\n  needle_position: .inf\n  topk: 16\n")),
              HasSubstr("matrix.needle_position: must be a number, got the string \".inf\""));
  EXPECT_THAT(ParseError(Yaml("  context_length: 256\n  needle_position: -30.5\n  topk: 16\n")),
              HasSubstr("must be a whole number (such as -30), got -30.5"));
  EXPECT_THAT(ParseError(Yaml(base + "  topk: 16\n", "generation: {max_new_tokens: 0}\n")),
              HasSubstr("generation.max_new_tokens: must be >= 1, got 0"));
  EXPECT_THAT(ParseError(Yaml(base + "  topk: 16\n", "generation: {temperature: 0}\n")),
              HasSubstr("generation: unknown key 'temperature'"));
  EXPECT_THAT(ParseError(Yaml(base + "  topk: 16\n", "trials: 0\n")),
              HasSubstr("trials: must be >= 1, got 0"));
  EXPECT_THAT(ParseError(Yaml(base + "  topk: 16\n", "max_jobs: 2000000\n")),
              HasSubstr("max_jobs: must be <= 1000000, got 2000000"));
  EXPECT_THAT(ParseError(Yaml(base + "  topk: 16\n", "description: [a]\n")),
              HasSubstr("description: must be a string, got a list"));
  EXPECT_THAT(ParseError(Yaml(base + "  topk: 16\n", "seed: 1\nseeds: [1, 2]\n")),
              HasSubstr("seed: seed derives the trial seeds of `trials`"));
  EXPECT_THAT(
      ParseError("name: t\nmodel: ''\nmatrix: {context_length: 1, needle_position: 0, topk: 1}\n"),
      HasSubstr("t.yaml:2:8: model: must not be empty"));
  EXPECT_THAT(ParseError("- just\n- a list\n"),
              HasSubstr("t.yaml:1:1: the top level must be a map of campaign fields, got a list"));
  EXPECT_THAT(ParseError("name: t\nmodel: m\n"),
              HasSubstr("t.yaml:1:1: missing required field 'matrix'"));
}

TEST(CampaignParseTest, BackendsAreCheckedAgainstTheGivenList) {
  const std::string text = Yaml(
      "  context_length: 256\n  needle_position: 0.5\n  topk: 16\n"
      "  backend: [cpu, cuda]\n");
  EXPECT_TRUE(ParseCampaignText(text, "t.yaml").ok());
  ParseOptions cpu_only;
  cpu_only.backends = {"cpu", "cpu-paged"};
  auto r = ParseCampaignText(text, "t.yaml", cpu_only);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr("t.yaml:7:18: matrix.backend[1]: unknown backend 'cuda' (expected cpu, "
                        "cpu-paged)"));
}

TEST(CampaignParseTest, CustomPrecisionProfiles) {
  Campaign c = MustParse(
      Yaml("  context_length: 256\n  needle_position: 0.5\n  topk: 16\n"
           "  precision: [k-bf16, k-fp8]\n",
           "precisions:\n"
           "  k-bf16: {weights: fp32, activations: fp32, index_q: fp32, index_k: bf16, kv: fp32}\n"
           "  k-fp8: {base: fp32, index_k: fp8}\n"));
  ASSERT_EQ(c.precisions.size(), 2u);
  const PrecisionProfile& a = c.precisions.at("k-bf16");
  const PrecisionProfile& b = c.precisions.at("k-fp8");
  EXPECT_EQ(a.name, "k-bf16");
  EXPECT_EQ(a.index_k, NumFormat::kBf16);
  EXPECT_EQ(b.index_k, NumFormat::kFp8);
  for (const PrecisionProfile* p : {&a, &b}) {
    EXPECT_EQ(p->weights, NumFormat::kFp32);
    EXPECT_EQ(p->activations, NumFormat::kFp32);
    EXPECT_EQ(p->index_q, NumFormat::kFp32);
    EXPECT_EQ(p->kv, NumFormat::kFp32);
  }
  EXPECT_EQ(c.custom_precisions, (std::vector<std::string>{"k-bf16", "k-fp8"}));
  EXPECT_TRUE(c.warnings.empty());
}

TEST(CampaignParseTest, CustomProfileWarnings) {
  // Same parts as built-in bf16, and a second profile no cell uses.
  Campaign c = MustParse(
      Yaml("  context_length: 256\n  needle_position: 0.5\n  topk: 16\n  precision: mine\n",
           "precisions:\n  mine: {base: bf16}\n  unused: {base: fp32, kv: fp8}\n"));
  ASSERT_EQ(c.warnings.size(), 2u);
  EXPECT_THAT(c.warnings[0],
              HasSubstr("precisions.mine: same parts as the built-in profile 'bf16'"));
  EXPECT_THAT(c.warnings[1], HasSubstr("precisions.unused: defined but not used"));
  EXPECT_EQ(c.precisions.count("unused"), 0u);
}

TEST(CampaignParseTest, UnknownPrecisionListsCampaignProfiles) {
  EXPECT_THAT(ParseError(Yaml("  context_length: 256\n  needle_position: 0.5\n  topk: 16\n"
                              "  precision: k9\n",
                              "precisions:\n  k8: {base: bf16, index_k: fp8}\n")),
              HasSubstr("unknown precision profile 'k9' (built-in: fp32, bf16, fp8-index, "
                        "mxfp4-index, nvfp4-index, fp8-kv; defined under precisions: k8)"));
}

TEST(CampaignParseTest, TrialsAndSeeds) {
  const std::string m = "  context_length: [256, 512]\n  needle_position: 0.5\n  topk: 16\n";
  Campaign t = MustParse(Yaml(m, "trials: 4\nseed: 7\n"));
  EXPECT_EQ(t.job_count(), 8);
  ASSERT_EQ(t.trial_seeds.size(), 4u);
  EXPECT_EQ(std::set<int64_t>(t.trial_seeds.begin(), t.trial_seeds.end()).size(), 4u);
  EXPECT_EQ(t.trial_seeds[2], DeriveTrialSeed(7, 2));
  Campaign s = MustParse(Yaml(m, "seeds: [5, 1, 9]\n"));
  EXPECT_TRUE(s.explicit_seeds);
  EXPECT_EQ(s.trial_seeds, (std::vector<int64_t>{5, 1, 9}));
  EXPECT_EQ(s.job_count(), 6);
  Campaign one = MustParse(Yaml(m, "seeds: 3\n"));
  EXPECT_EQ(one.trial_seeds, std::vector<int64_t>{3});
}

TEST(CampaignParseTest, TrialSeedDerivationIsPinned) {
  // Part of every job key: changing the derivation silently invalidates stored results.
  EXPECT_EQ(DeriveTrialSeed(0, 0), DeriveTrialSeed(0, 0));
  EXPECT_NE(DeriveTrialSeed(0, 0), DeriveTrialSeed(0, 1));
  EXPECT_NE(DeriveTrialSeed(0, 1), DeriveTrialSeed(1, 0));
  for (int t = 0; t < 100; ++t) {
    EXPECT_GE(DeriveTrialSeed(12345, t), 0);
    EXPECT_LT(DeriveTrialSeed(12345, t), int64_t{1} << 52);
  }
  EXPECT_EQ(DeriveTrialSeed(0, 0), int64_t{3073002700210288});
}

TEST(CampaignParseTest, NeedleOffsetMustFitEveryCellItIsCombinedWith) {
  const std::string m =
      "  context_length: [64, 1024]\n  needle_position: [0.5, -100]\n  topk: 16\n";
  std::string err = ParseError(Yaml(m));
  EXPECT_THAT(err, HasSubstr("t.yaml:5:26: matrix.needle_position[1]: offset -100 puts the needle "
                             "before the start of a 64 tokens context (matrix.context_length[0] at "
                             "line 4, column 20)"));
  // Excluding the impossible combination makes the campaign valid.
  Campaign c = MustParse(Yaml(m, "exclude:\n  - {context_length: 64, needle_position: -100}\n"));
  EXPECT_EQ(c.cells.size(), 3u);
  // An offset equal to the context is outside it too.
  EXPECT_FALSE(ParseCampaignText(
                   Yaml("  context_length: 100\n  needle_position: -100\n  topk: 16\n"), "t.yaml")
                   .ok());
  EXPECT_TRUE(ParseCampaignText(
                  Yaml("  context_length: 101\n  needle_position: -100\n  topk: 16\n"), "t.yaml")
                  .ok());
}

TEST(CampaignParseTest, AnchorsAndAliasesWithinLimitsWork) {
  Campaign c = MustParse(
      "name: t\nmodel: m\nmatrix:\n  context_length: &lengths [256, 512]\n"
      "  needle_position: 0.5\n  topk: 16\n  backend: [cpu, cpu-paged]\n"
      "exclude:\n  - {backend: cpu-paged, context_length: *lengths}\n");
  EXPECT_EQ(c.cells.size(), 2u);
}

TEST(CampaignParseTest, JobCeilingIsEnforcedWhilePlanning) {
  // 10000 lengths x 101 positions x 2 trials: over the ceiling before any model is touched.
  std::string err =
      ParseError(Yaml("  context_length: {linear: {from: 1, to: 10000, step: 1}}\n"
                      "  needle_position: {linear: {from: 0, to: 1, step: 0.01}}\n  topk: 16\n",
                      "trials: 2\n"));
  EXPECT_THAT(err, HasSubstr("t.yaml:3:1: matrix: the campaign expands to more than 1000000 jobs"));
}

TEST(YamlGuardTest, CountsAndLimits) {
  YamlGuardLimits limits;
  auto ok = GuardYaml("a: &x [1, 2, 3]\nb: *x\nc: {d: [*x, *x]}\n", "g.yaml", limits);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->documents, 1);
  EXPECT_EQ(ok->aliases, 3);
  // root map(1) + a: key 1 + seq 4 | b: key 1 + 4 | c: key 1 + map 1 + d key 1 + seq 1 + 2*4
  EXPECT_EQ(ok->expanded_nodes, 1 + (1 + 4) + (1 + 4) + (1 + 1 + 1 + 1 + 8));
  EXPECT_EQ(ok->max_depth, 3);

  limits.max_aliases = 2;
  auto aliases = GuardYaml("a: &x [1]\nb: [*x, *x, *x]\n", "g.yaml", limits);
  ASSERT_FALSE(aliases.ok());
  EXPECT_THAT(aliases.status().message(), HasSubstr("g.yaml:2:13: too many aliases (more than 2)"));

  YamlGuardLimits depth;
  depth.max_depth = 3;
  auto deep = GuardYaml("a: [[[[1]]]]\n", "g.yaml", depth);
  ASSERT_FALSE(deep.ok());
  EXPECT_THAT(deep.status().message(), HasSubstr("g.yaml:1:6: nesting deeper than 3 levels"));

  YamlGuardLimits bytes;
  bytes.max_bytes = 10;
  auto big = GuardYaml("name: a-longer-name\n", "g.yaml", bytes);
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(big.status().message(),
              HasSubstr("g.yaml: file is 20 bytes, more than the limit of 10"));

  YamlGuardLimits events;
  events.max_events = 5;
  auto many = GuardYaml("[1, 2, 3, 4, 5, 6]\n", "g.yaml", events);
  ASSERT_FALSE(many.ok());
  EXPECT_THAT(many.status().message(), HasSubstr("too many YAML events (more than 5)"));
}

TEST(YamlGuardTest, AliasBombIsRejectedBeforeNodesAreBuilt) {
  std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  char prev = 'a';
  for (char name = 'b'; name <= 'j'; ++name) {
    bomb += std::string(1, name) + ": &" + name + " [";
    for (int i = 0; i < 10; ++i) bomb += std::string(i ? ", *" : "*") + prev;
    bomb += "]\n";
    prev = name;
  }
  // 10^10 nodes once expanded, from ~450 bytes and 100 aliases.
  auto r = GuardYaml(bomb, "bomb.yaml", YamlGuardLimits{});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("expands to more than 100000 nodes"));
  auto c = ParseCampaignText(bomb, "bomb.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("bomb.yaml:5:36:"));
}

TEST(YamlGuardTest, MalformedYamlCarriesTheMark) {
  auto r = GuardYaml("a: [1, 2\nb: 3\n", "m.yaml", YamlGuardLimits{});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("m.yaml:"));
  EXPECT_THAT(r.status().message(), HasSubstr("malformed YAML: "));
  auto two = GuardYaml("a: 1\n---\nb: 2\n", "m.yaml", YamlGuardLimits{});
  ASSERT_FALSE(two.ok());
  EXPECT_THAT(two.status().message(),
              HasSubstr("m.yaml:2:1: a campaign file holds one YAML document, found more"));
}

}  // namespace
}  // namespace nw

namespace nw {
namespace {

TEST(CampaignParseTest, FaultAxisDefaultsToNoneAndIsChecked) {
  const Campaign c =
      MustParse(Yaml("  context_length: [256]\n  needle_position: [0.5]\n  topk: 8\n"));
  ASSERT_EQ(c.values[static_cast<size_t>(Axis::kFault)].size(), 1u);
  EXPECT_EQ(c.values[static_cast<size_t>(Axis::kFault)][0].name(), "none");
  EXPECT_THAT(ParseError(Yaml("  context_length: [256]\n  needle_position: [0.5]\n  topk: 8\n"
                              "  fault: [none, pd-handof]\n")),
              HasSubstr("t.yaml:7:17: matrix.fault[1]: unknown fault 'pd-handof'"));
}

TEST(CampaignParseTest, AFaultNeedsABackendThatReplaysIt) {
  const std::string e =
      ParseError(Yaml("  context_length: [256]\n  needle_position: [0.5]\n  topk: 8\n"
                      "  backend: [cpu, cpu-pd]\n  fault: [pd-handoff-loses-state]\n"));
  EXPECT_THAT(e, HasSubstr("t.yaml:8:11: matrix.fault[0]: backend 'cpu' does not replay fault "
                           "'pd-handoff-loses-state' (replayed by: cpu-pd, cuda-pd)"));
  EXPECT_THAT(e, HasSubstr("matrix.backend[0]"));
  // Excluding the combination makes it valid; include can add a faulted cell.
  const Campaign c =
      MustParse(Yaml("  context_length: [256]\n  needle_position: [0.5]\n  topk: 8\n"
                     "  backend: [cpu, cpu-pd]\n  fault: [none, pd-handoff-loses-state]\n",
                     "exclude:\n  - {backend: cpu, fault: pd-handoff-loses-state}\n"
                     "include:\n  - {backend: cpu, fault: partial-block-mod4}\n"));
  EXPECT_EQ(c.cells.size(), 4u);
  EXPECT_THAT(ParseError(Yaml("  context_length: [256]\n  needle_position: [0.5]\n  topk: 8\n"
                              "  backend: [cuda]\n  fault: [pd-handoff-loses-state]\n")),
              HasSubstr("backend 'cuda' does not replay fault 'pd-handoff-loses-state' (replayed "
                        "by: cpu-pd, cuda-pd)"));
  // The GPU backends replay the forward-pass faults (validation needs no GPU).
  EXPECT_EQ(MustParse(Yaml("  context_length: [256]\n  needle_position: [0.5]\n  topk: 8\n"
                           "  backend: [cuda, cuda-paged, cuda-pd]\n"
                           "  fault: [indexer-rope-layout, partial-block-mod4]\n"))
                .cells.size(),
            6u);
}

}  // namespace
}  // namespace nw
