// The CPU engine against HF transformers' own DeepSeek-V4 (DeepseekV4ForCausalLM), an
// implementation needlework shares no code with.
//
// tests/data/hf_reference/tiny-v4.json is written on the GPU machine by
//   python3 models/train/hf_reference.py --model models/tiny-v4 --out $OUT/tiny-v4.json
// (HF in fp32, TF32 off, eager attention, every forward a full prefill). It holds, per prompt,
// the prompt ids, HF's logit rows at 8 stored positions (the last one included), its 8-token
// greedy continuation with each step's top-2 margin, and per ratio-4 layer and stored position the
// indexer's top-k set with the k-th and (k+1)-th scores. Until that file is checked in, the tests
// skip with a message; once it is there, any mismatch fails.
//
// HF clamps the shared expert's SwiGLU (DeepSeek's current definition), and so does models/tiny-v4
// ("swiglu_clamp_shared_expert": true since run 3); the flag is set explicitly here so the
// comparison holds whatever the config file says, and the legacy test below can switch it off.
//
// Requirements (docs/engine-reference.md, "How the references are checked"):
//   logits    per stored position, max_v |cpp_v - hf_v| <= 1e-4 * max_v |hf_v| (the norm of
//             golden_test.cc: relative to the row's largest logit, so near-zero logits do not
//             blow the ratio up);
//   greedy    the same tokens, compared up to the first step where HF's top-1/top-2 margin is a
//             near-tie (<= 1e-4 * max |logit| of the prompt's last row), after which a flip would
//             be legitimate and the rest is not compared;
//   top-k     the same sets (as sets) at every stored position and ratio-4 layer, except near-ties
//             at the cut: (kth - next) <= 1e-4 * max |score| over the visible entries. Positions
//             with no more visible entries than k select all of them and are always compared.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/checkpoint/config.h"
#include "engine/checkpoint/loader.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/cpu/sequence.h"
#include "engine/generate.h"
#include "tests/cpu_backend/hf_golden.h"

namespace nw {
namespace {

namespace fs = std::filesystem;

constexpr double kLogitRel = 1e-4;
constexpr double kGreedyTieRel = 1e-4;
constexpr double kTopkTieRel = 1e-4;

fs::path GoldenFile(const std::string& model = "tiny-v4") {
  return fs::path(NW_TEST_DATA_DIR) / "hf_reference" / (model + ".json");
}
fs::path Model(const std::string& model = "tiny-v4") {
  return fs::path(NW_SOURCE_DIR) / "models" / model;
}

constexpr const char* kHowToMake =
    "produce it on the GPU machine with `python3 models/train/hf_reference.py --model "
    "models/tiny-v4 --out $OUT/tiny-v4.json` and check it in as "
    "tests/data/hf_reference/tiny-v4.json";

struct Loaded {
  ModelConfig cfg;
  ModelWeights weights;
};

std::optional<Loaded> LoadTinyV4(bool clamp_shared, const std::string& model = "tiny-v4") {
  Result<ModelConfig> cfg = LoadModelConfig(Model(model) / "config.json");
  EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
  if (!cfg.ok()) return std::nullopt;
  Result<SafetensorsArchive> archive = SafetensorsArchive::Open(Model(model));
  EXPECT_TRUE(archive.ok()) << archive.status().ToString();
  if (!archive.ok()) return std::nullopt;
  Result<ModelWeights> weights = LoadModelWeights(*archive, *cfg);
  EXPECT_TRUE(weights.ok()) << weights.status().ToString();
  if (!weights.ok()) return std::nullopt;
  Loaded l{*cfg, std::move(weights).value()};
  l.cfg.swiglu_clamp_shared_expert = clamp_shared;
  return l;
}

// Largest per-row relative logit error over the stored positions of `all` ([n, V]).
double WorstRowError(const HfPrompt& g, const std::vector<float>& all, int64_t vocab, bool expect) {
  double worst = 0;
  for (size_t k = 0; k < g.positions.size(); ++k) {
    const int64_t pos = g.positions[k];
    const float* got = all.data() + pos * vocab;
    double max_ref = 0, max_diff = 0;
    int64_t at = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double ref = g.logits[k][static_cast<size_t>(v)];
      const double diff = std::fabs(static_cast<double>(got[v]) - ref);
      max_ref = std::max(max_ref, std::fabs(ref));
      if (diff > max_diff) {
        max_diff = diff;
        at = v;
      }
    }
    worst = std::max(worst, max_diff / max_ref);
    if (expect) {
      EXPECT_LE(max_diff, kLogitRel * max_ref)
          << "position " << pos << ": token " << at << " cpp " << got[at] << " hf "
          << g.logits[k][static_cast<size_t>(at)] << " (relative error " << max_diff / max_ref
          << ")";
    }
  }
  return worst;
}

struct Counts {
  int topk_compared = 0, topk_ties = 0, greedy_compared = 0;
};

void CheckPrompt(const Loaded& m, const HfPrompt& g, Counts* counts) {
  SCOPED_TRACE("prompt " + g.name + " (" + std::to_string(g.tokens.size()) + " tokens, top-k " +
               std::to_string(g.index_topk) + ")");
  const int64_t n = static_cast<int64_t>(g.tokens.size());
  const int64_t vocab = m.cfg.vocab_size;
  ASSERT_EQ(g.positions.size(), g.logits.size());
  for (const auto& row : g.logits) ASSERT_EQ(static_cast<int64_t>(row.size()), vocab);

  cpu::SequenceOptions so;
  so.index_topk = g.index_topk;
  so.max_tokens = n + static_cast<int64_t>(g.greedy.size());
  ProbeRequest probe;
  probe.keep_topk_sets = true;
  so.probe = probe;
  Result<cpu::Sequence> seq = cpu::Sequence::Create(m.cfg, m.weights, so);
  ASSERT_TRUE(seq.ok()) << seq.status().ToString();
  std::vector<float> all;
  ASSERT_TRUE(seq->Forward(g.tokens, nullptr, &all).ok());
  ASSERT_EQ(static_cast<int64_t>(all.size()), n * vocab);

  const double worst = WorstRowError(g, all, vocab, /*expect=*/true);
  std::cout << "hf " << g.name << ": largest relative logit error " << worst << "\n";

  // Top-k sets at the stored positions.
  const std::vector<IndexerProbe>& probes = seq->probes();
  ASSERT_EQ(probes.size(), g.indexer.size());
  for (size_t l = 0; l < probes.size(); ++l) {
    const IndexerProbe& p = probes[l];
    const IndexerRecord& r = g.indexer[l];
    ASSERT_EQ(p.layer, r.layer);
    ASSERT_EQ(p.topk, g.index_topk);
    ASSERT_EQ(r.sets.size(), g.positions.size());
    for (size_t k = 0; k < g.positions.size(); ++k) {
      const int64_t pos = g.positions[k];
      auto it = std::find(p.positions.begin(), p.positions.end(), pos);
      ASSERT_NE(it, p.positions.end()) << "position " << pos << " not probed";
      const auto row = static_cast<size_t>(it - p.positions.begin());
      std::vector<int32_t> mine;
      for (int j = 0; j < p.topk; ++j) {
        const int32_t id = p.topk_sets[row * static_cast<size_t>(p.topk) + static_cast<size_t>(j)];
        if (id >= 0) mine.push_back(id);
      }
      std::sort(mine.begin(), mine.end());
      if (r.kth[k] && r.next[k] && *r.kth[k] - *r.next[k] <= kTopkTieRel * r.max_abs[k]) {
        ++counts->topk_ties;  // a near-tie at the cut: either choice is right
        EXPECT_EQ(mine.size(), r.sets[k].size()) << "layer " << r.layer << " position " << pos;
        continue;
      }
      ++counts->topk_compared;
      EXPECT_EQ(mine, r.sets[k]) << "layer " << r.layer << " position " << pos;
    }
  }

  // Greedy continuation (prefill's last row, then decode steps).
  std::vector<float> last(all.end() - vocab, all.end());
  for (size_t step = 0; step < g.greedy.size(); ++step) {
    const int32_t next = Argmax(last.data(), vocab);
    if (g.greedy_margins[step] <= kGreedyTieRel * g.greedy_scale) {
      std::cout << "hf " << g.name << ": greedy step " << step
                << " is a near-tie in HF; later steps not compared\n";
      break;
    }
    ++counts->greedy_compared;
    ASSERT_EQ(next, g.greedy[step]) << "greedy step " << step;
    if (step + 1 < g.greedy.size()) {
      ASSERT_TRUE(seq->Decode(next, &last).ok());
    }
  }
}

TEST(HfReferenceTest, TinyV4MatchesHfTransformers) {
  if (!fs::exists(GoldenFile())) {
    GTEST_SKIP() << GoldenFile() << " is absent: " << kHowToMake;
  }
  const std::vector<HfPrompt> prompts = ReadGolden(GoldenFile());
  ASSERT_GE(prompts.size(), 6u);
  std::optional<Loaded> m = LoadTinyV4(/*clamp_shared=*/true);
  ASSERT_TRUE(m.has_value());
  Counts counts;
  for (const HfPrompt& g : prompts) CheckPrompt(*m, g, &counts);
  std::cout << "hf: top-k sets compared " << counts.topk_compared << ", near-ties skipped "
            << counts.topk_ties << "; greedy steps compared " << counts.greedy_compared << "\n";
  // The comparisons must not have been skipped away.
  EXPECT_GT(counts.topk_compared, 4 * counts.topk_ties);
  EXPECT_GE(counts.greedy_compared, static_cast<int>(prompts.size()) * 4);
}

// models/tiny-v4-indexer (ratio-0/ratio-4 layers only, top-k 16) against HF, same requirements.
TEST(HfReferenceTest, TinyV4IndexerMatchesHfTransformers) {
  const fs::path golden = GoldenFile("tiny-v4-indexer");
  ASSERT_TRUE(fs::exists(golden)) << golden;
  const std::vector<HfPrompt> prompts = ReadGolden(golden);
  ASSERT_GE(prompts.size(), 6u);
  std::optional<Loaded> m = LoadTinyV4(/*clamp_shared=*/true, "tiny-v4-indexer");
  ASSERT_TRUE(m.has_value());
  Counts counts;
  for (const HfPrompt& g : prompts) CheckPrompt(*m, g, &counts);
  std::cout << "hf tiny-v4-indexer: top-k sets compared " << counts.topk_compared
            << ", near-ties skipped " << counts.topk_ties << "; greedy steps compared "
            << counts.greedy_compared << "\n";
  EXPECT_GT(counts.topk_compared, 4 * counts.topk_ties);
  EXPECT_GE(counts.greedy_compared, static_cast<int>(prompts.size()) * 4);
}

// The shared-expert clamp is what separated needlework from HF (issue 18): with the legacy
// unclamped shared expert the logits move further from HF's. Printed for the record and checked
// to be worse than with the clamp.
TEST(HfReferenceTest, WithoutTheSharedClampTheLogitsMoveAway) {
  if (!fs::exists(GoldenFile())) {
    GTEST_SKIP() << GoldenFile() << " is absent: " << kHowToMake;
  }
  const std::vector<HfPrompt> prompts = ReadGolden(GoldenFile());
  std::optional<Loaded> on = LoadTinyV4(true);
  std::optional<Loaded> off = LoadTinyV4(false);
  ASSERT_TRUE(on.has_value() && off.has_value());
  double worst_on = 0, worst_off = 0;
  for (const HfPrompt& g : prompts) {
    for (const Loaded* m : {&*on, &*off}) {
      cpu::SequenceOptions so;
      so.index_topk = g.index_topk;
      so.max_tokens = static_cast<int64_t>(g.tokens.size());
      Result<cpu::Sequence> seq = cpu::Sequence::Create(m->cfg, m->weights, so);
      ASSERT_TRUE(seq.ok()) << seq.status().ToString();
      std::vector<float> all;
      ASSERT_TRUE(seq->Forward(g.tokens, nullptr, &all).ok());
      const double w = WorstRowError(g, all, m->cfg.vocab_size, /*expect=*/false);
      double& worst = m == &*on ? worst_on : worst_off;
      worst = std::max(worst, w);
    }
  }
  std::cout << "hf: largest relative logit error with the shared clamp " << worst_on << ", without "
            << worst_off << "\n";
  EXPECT_GT(worst_off, worst_on);
}

}  // namespace
}  // namespace nw
