// nw diff's library (diff/): a configuration against itself and against the bit-identical CPU
// backends agrees exactly (exit 0); against every fault it parts (exit 1) at the layer and
// component the fault acts on; bad input names the file or field. On models/tiny-v4 (layers of
// ratio 0, 4, 128, 4), top-k 16 so the indexer's selection matters.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "coordinator/campaign/campaign.h"
#include "diff/compare.h"
#include "diff/prompts.h"
#include "diff/render.h"
#include "diff/run_diff.h"
#include "diff/traced_run.h"
#include "task/job_prompt.h"
#include "tests/support/temp_dir.h"

namespace nw::diff {
namespace {

const std::filesystem::path kTiny = std::filesystem::path(NW_SOURCE_DIR) / "models/tiny-v4";

std::unique_ptr<DiffSide> Side(const std::string& spec,
                               const std::filesystem::path& model = kTiny) {
  DiffConfig d;
  d.model_dir = model;
  auto c = ParseDiffConfig(spec, d, "--a");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return nullptr;
  auto s = DiffSide::Create(*c, "A");
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *std::move(s) : nullptr;
}

std::vector<DiffPrompt> Prompts(const DiffSide& side, int64_t length, int trials = 1) {
  PromptDesign d;
  d.context_length = length;
  d.needle_position = 0.25;
  d.seed = 3;
  d.trials = trials;
  auto p = DesignPrompts(side.tokenizer(), d);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : std::vector<DiffPrompt>{};
}

DiffReport Diff(DiffSide& a, DiffSide& b, const std::vector<DiffPrompt>& prompts, int topk = 16) {
  DiffOptions o;
  o.steps = 8;
  o.topk = topk;
  o.prompts_source = "test";
  auto r = RunDiff(a, b, prompts, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : DiffReport{};
}

TEST(DiffTest, AConfigAgainstItselfIsIdentical) {
  auto a = Side("backend=cpu");
  auto b = Side("backend=cpu");
  ASSERT_TRUE(a && b);
  const DiffReport r = Diff(*a, *b, Prompts(*a, 300, 2));
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_FALSE(r.first.has_value());
  ASSERT_EQ(r.layers.size(), 4u);
  for (const LayerDiff& l : r.layers) {
    EXPECT_EQ(l.attn.max_rel_error, 0) << l.layer;
    EXPECT_EQ(l.hidden.max_rel_error, 0) << l.layer;
    EXPECT_EQ(l.attn.cosine, 1) << l.layer;
    EXPECT_EQ(l.indexer, l.ratio == 4) << l.layer;
    for (double j : l.jaccard) EXPECT_EQ(j, 1) << l.layer;
  }
  EXPECT_EQ(r.logits.max_rel_error, 0);
  EXPECT_EQ(r.greedy_agree, r.greedy_total);
  EXPECT_EQ(r.greedy_total, 2 * 9);
  EXPECT_NE(RenderText(r).find("SAME (exit 0)"), std::string::npos);
  EXPECT_NE(RenderJson(r).find("\"verdict\": \"same\""), std::string::npos);
}

TEST(DiffTest, TheCpuBackendsAgreeExactly) {
  auto a = Side("backend=cpu");
  ASSERT_TRUE(a);
  for (const char* name : {"cpu-paged", "cpu-pd"}) {
    auto b = Side(std::string("backend=") + name);
    ASSERT_TRUE(b);
    const DiffReport r = Diff(*a, *b, Prompts(*a, 300));
    EXPECT_EQ(r.exit_code(), 0) << name << "\n" << RenderText(r);
  }
}

struct FaultCase {
  const char* backend;
  const char* fault;
  int64_t length;
  int layer;                           // the first diverging layer
  std::vector<std::string> component;  // the component(s) it may be
};

// Each fault parts where it acts: the first indexer layer (1) for the faults of the indexer and
// the compressed layers; its attention (not its indexer) for compressed KV without RoPE; the
// MoE of a block (hidden) for the shared expert's clamp.
TEST(DiffTest, EveryFaultPartsWhereItActs) {
  const std::vector<FaultCase> cases = {
      {"cpu-pd", "pd-handoff-loses-state", 300, 1, {"indexer"}},
      {"cpu-pd", "compressor-state-not-restored", 300, 1, {"indexer", "attn"}},
      {"cpu", "indexer-rope-layout", 300, 1, {"indexer"}},
      {"cpu", "ragged-key-range", 300, 1, {"indexer"}},
      {"cpu-paged", "partial-block-mod4", 299, 1, {"indexer", "attn"}},
      {"cpu", "compressed-kv-no-rope", 300, 1, {"attn"}},
      {"cpu", "compress-rope-base", 300, 1, {"indexer"}},
  };
  for (const FaultCase& c : cases) {
    auto a = Side(std::string("backend=") + c.backend);
    auto b = Side(std::string("backend=") + c.backend + ",fault=" + c.fault);
    ASSERT_TRUE(a && b) << c.fault;
    const DiffReport r = Diff(*a, *b, Prompts(*a, c.length));
    ASSERT_EQ(r.exit_code(), 1) << c.fault << "\n" << RenderText(r);
    ASSERT_TRUE(r.first.has_value());
    EXPECT_EQ(r.first->layer, c.layer) << c.fault << "\n" << RenderText(r);
    EXPECT_NE(std::find(c.component.begin(), c.component.end(), r.first->component),
              c.component.end())
        << c.fault << ": " << r.first->component << "\n"
        << RenderText(r);
    // Layer 0 (ratio 0, before any indexer) is untouched by every one of them.
    EXPECT_EQ(r.layers[0].hidden.max_rel_error, 0) << c.fault;
  }
}

// partial-block-mod4 only at prompt_len % 4 == 3: a 300-token prompt agrees exactly.
TEST(DiffTest, PartialBlockMod4AgreesOffResidue3) {
  auto a = Side("backend=cpu");
  auto b = Side("backend=cpu,fault=partial-block-mod4");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(Diff(*a, *b, Prompts(*a, 300)).exit_code(), 0);
}

// A copy of tiny-v4 whose config.json says "swiglu_clamp_shared_expert": `clamp`.
std::filesystem::path TinyCopyWithClamp(bool clamp) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("nw-diff-clamp-" + std::to_string(::getpid()) + (clamp ? "-on" : "-off"));
  std::filesystem::create_directories(dir);
  for (const char* f : {"model.safetensors", "tokenizer.json"}) {
    std::filesystem::copy_file(kTiny / f, dir / f,
                               std::filesystem::copy_options::overwrite_existing);
  }
  std::string cfg = test_support::ReadFileText(kTiny / "config.json");
  for (const char* was :
       {"\"swiglu_clamp_shared_expert\": false", "\"swiglu_clamp_shared_expert\": true"}) {
    const size_t at = cfg.find(was);
    if (at != std::string::npos) {
      cfg.replace(
          at, std::string(was).size(),
          clamp ? "\"swiglu_clamp_shared_expert\": true" : "\"swiglu_clamp_shared_expert\": false");
    }
  }
  EXPECT_NE(cfg.find(clamp ? "\"swiglu_clamp_shared_expert\": true"
                           : "\"swiglu_clamp_shared_expert\": false"),
            std::string::npos);
  std::ofstream(dir / "config.json") << cfg;
  return dir;
}

// shared-expert-no-clamp: a no-op where the config already says the shared expert is unclamped;
// where it clamps (tiny-v4 since its clamp fine-tune), the first difference is a block's MoE (the
// hidden state), not attention.
TEST(DiffTest, SharedExpertNoClampPartsInTheMoe) {
  const std::filesystem::path off = TinyCopyWithClamp(false);
  auto plain_a = Side("backend=cpu", off);
  auto plain_b = Side("backend=cpu,fault=shared-expert-no-clamp", off);
  ASSERT_TRUE(plain_a && plain_b);
  EXPECT_EQ(Diff(*plain_a, *plain_b, Prompts(*plain_a, 300)).exit_code(), 0);
  std::filesystem::remove_all(off);

  const std::filesystem::path on = TinyCopyWithClamp(true);
  auto a = Side("backend=cpu", on);
  auto b = Side("backend=cpu,fault=shared-expert-no-clamp", on);
  ASSERT_TRUE(a && b);
  const DiffReport r = Diff(*a, *b, Prompts(*a, 300));
  std::filesystem::remove_all(on);
  ASSERT_EQ(r.exit_code(), 1) << RenderText(r);
  EXPECT_EQ(r.first->component, "hidden") << RenderText(r);
  EXPECT_EQ(r.layers[static_cast<size_t>(r.first->layer)].attn.max_rel_error, 0);
}

TEST(DiffTest, BadInputNamesTheFieldOrFile) {
  DiffConfig d;
  auto bad_key = ParseDiffConfig("backend=cpu,colour=red", d, "--b");
  ASSERT_FALSE(bad_key.ok());
  EXPECT_NE(bad_key.status().message().find("--b: unknown key 'colour'"), std::string::npos);
  auto bad_fault = ParseDiffConfig("fault=nope", d, "--b");
  ASSERT_FALSE(bad_fault.ok());
  EXPECT_NE(bad_fault.status().message().find("--b: fault"), std::string::npos);
  auto no_eq = ParseDiffConfig("cpu", d, "--a");
  ASSERT_FALSE(no_eq.ok());
  EXPECT_NE(no_eq.status().message().find("--a: 'cpu' is not key=value"), std::string::npos);

  DiffConfig pd;
  pd.model_dir = kTiny;
  pd.fault = Fault::kPdHandoffLosesState;  // cpu does not replay it
  auto side = DiffSide::Create(pd, "B");
  ASSERT_FALSE(side.ok());
  EXPECT_NE(side.status().message().find("B: fault"), std::string::npos);
  EXPECT_NE(side.status().message().find("cpu-pd"), std::string::npos);
  DiffConfig prec;
  prec.model_dir = kTiny;
  prec.precision = "fp64";
  auto side2 = DiffSide::Create(prec, "A");
  ASSERT_FALSE(side2.ok());
  EXPECT_NE(side2.status().message().find("A: precision"), std::string::npos);

  auto a = Side("backend=cpu");
  ASSERT_TRUE(a);
  const std::filesystem::path f =
      std::filesystem::temp_directory_path() / ("nw-diff-prompts-" + std::to_string(::getpid()));
  std::ofstream(f) << R"({"prompts": [{"name": "ok", "tokens": [1, 2, 3]},
                                      {"tokens": [4, 99999]}]})";
  auto p = FilePrompts(f, a->tokenizer(), 1024);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find(f.string() + ": prompts[1].tokens[1]: 99999"),
            std::string::npos)
      << p.status().message();
  std::ofstream(f) << R"({"prompts": [{"name": "x", "tokens": [1], "text": "hi"}]})";
  auto both = FilePrompts(f, a->tokenizer(), 1024);
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("prompts[0]: needs exactly one of tokens and text"),
            std::string::npos);
  std::ofstream(f) << R"({"prompts": [{"name": "x", "text": "The quick brown fox"}]})";
  auto text = FilePrompts(f, a->tokenizer(), 1024);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_FALSE(text->front().tokens.empty());
  std::filesystem::remove(f);
  EXPECT_EQ(FilePrompts(f, a->tokenizer(), 1024).status().code(), StatusCode::kNotFound);
}

// A design point's prompts are the prompts of the jobs a campaign expands for it, as the executors
// build them (BuildJobPrompt), trial by trial, token for token.
TEST(DiffTest, DesignPromptsAreTheCampaignJobsPrompts) {
  auto a = Side("backend=cpu");
  ASSERT_TRUE(a);
  for (const auto& [task, haystack] : std::vector<std::pair<std::string, std::string>>{
           {"niah-single", "noise"}, {"niah-multikey", "essay"}, {"niah-repeat", "needles"}}) {
    SCOPED_TRACE(task + " " + haystack);
    const std::string yaml = "name: d\nmodel: tiny-v4\ntask: " + task + "\nhaystack: " + haystack +
                             "\nseed: 11\ntrials: 3\nmatrix:\n  context_length: 400\n"
                             "  needle_position: 0.25\n  topk: 16\n  backend: cpu\n";
    ParseOptions po;
    po.base_dir = std::filesystem::path(NW_SOURCE_DIR) / "models";
    auto campaign = ParseCampaignText(yaml, "d.yaml", po);
    ASSERT_TRUE(campaign.ok()) << campaign.status().ToString();
    auto resolved = ResolveCampaign(*campaign);
    ASSERT_TRUE(resolved.ok()) << resolved.status().ToString();
    auto jobs = ExpandCampaign(*resolved);
    ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
    ASSERT_EQ(jobs->size(), 3u);

    PromptDesign d;
    d.task = task;
    d.haystack = haystack;
    d.context_length = 400;
    d.needle_position = 0.25;
    d.seed = 11;
    d.trials = 3;
    auto prompts = DesignPrompts(a->tokenizer(), d);
    ASSERT_TRUE(prompts.ok()) << prompts.status().ToString();
    ASSERT_EQ(prompts->size(), 3u);
    for (size_t t = 0; t < jobs->size(); ++t) {
      auto want = BuildJobPrompt(a->tokenizer(), (*jobs)[t]);
      ASSERT_TRUE(want.ok()) << want.status().ToString();
      EXPECT_EQ((*prompts)[t].name, "trial " + std::to_string(t));
      EXPECT_EQ((*prompts)[t].tokens, want->tokens) << "trial " << t;
    }
  }
  PromptDesign bad;
  bad.task = "niah-nope";
  auto p = DesignPrompts(a->tokenizer(), bad);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("--task"), std::string::npos) << p.status().message();
  bad.task = "niah-single";
  bad.haystack = "hay";
  p = DesignPrompts(a->tokenizer(), bad);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("--haystack"), std::string::npos) << p.status().message();
}

}  // namespace
}  // namespace nw::diff
