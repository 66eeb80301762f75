// Golden test: the C++ CPU backend reproduces the PyTorch model of models/train/v4.py.
//
// tests/data/golden/<name>.json (written by models/train/golden.py) holds, for fixed prompts, the
// PyTorch model's fp32 logits at a few positions and its greedy continuation. Two checkpoints:
//   random-seed0  WriteRandomCheckpoint(golden/random-seed0.config.json, seed 0, BF16 layout),
//                 regenerated here: its values are a pure function of config, seed and tensor
//                 name, so the file `nw model init --seed 0` gave the PyTorch side is reproduced;
//   tiny-v4       the shipped trained model, models/tiny-v4, loaded through LoadEngine as well.
// Each prompt runs as one prefill that returns every position's logits, then greedy step decode
// on the same sequence. Requirements, in fp32: at every compared position
// max |cpp - ref| <= 1e-4 * max |ref|, and the same greedy tokens. The trained model's greedy
// answers are also checked end to end through LoadEngine on both CPU backends.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <vector>

#include "engine/checkpoint/config.h"
#include "engine/checkpoint/loader.h"
#include "engine/checkpoint/random_checkpoint.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/cpu/sequence.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "tests/support/temp_dir.h"

namespace nw {
namespace {

namespace fs = std::filesystem;

constexpr double kRelTolerance = 1e-4;

struct GoldenPrompt {
  std::string name;
  std::vector<int32_t> tokens;
  int index_topk = 0;  // 0: the config's
  std::vector<int64_t> positions;
  std::vector<std::vector<float>> logits;  // one row of vocab_size per position
  std::vector<int32_t> greedy;
};

fs::path GoldenPath(const std::string& name) {
  return fs::path(NW_TEST_DATA_DIR) / "golden" / name;
}

fs::path ShippedModel() { return fs::path(NW_SOURCE_DIR) / "models" / "tiny-v4"; }

std::vector<GoldenPrompt> ReadGolden(const fs::path& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  const nlohmann::json doc = nlohmann::json::parse(f);
  std::vector<GoldenPrompt> out;
  for (const auto& p : doc.at("prompts")) {
    GoldenPrompt g;
    g.name = p.at("name").get<std::string>();
    g.tokens = p.at("tokens").get<std::vector<int32_t>>();
    if (!p.at("index_topk").is_null()) g.index_topk = p.at("index_topk").get<int>();
    g.positions = p.at("positions").get<std::vector<int64_t>>();
    g.logits = p.at("logits").get<std::vector<std::vector<float>>>();
    g.greedy = p.at("greedy").get<std::vector<int32_t>>();
    out.push_back(std::move(g));
  }
  return out;
}

// A fresh folder under the system temp dir, removed with its contents on destruction.
using TempDir = test_support::TempDir;

// Prefill with every position's logits, then greedy decode; compares against the golden prompt.
void CheckPrompt(const ModelConfig& cfg, const ModelWeights& weights, const GoldenPrompt& g) {
  SCOPED_TRACE("prompt " + g.name + " (" + std::to_string(g.tokens.size()) + " tokens, top-k " +
               std::to_string(g.index_topk) + ")");
  const int64_t n = static_cast<int64_t>(g.tokens.size());
  const int64_t vocab = cfg.vocab_size;
  cpu::SequenceOptions so;
  so.index_topk = g.index_topk;
  so.max_tokens = n + static_cast<int64_t>(g.greedy.size());
  Result<cpu::Sequence> seq = cpu::Sequence::Create(cfg, weights, so);
  ASSERT_TRUE(seq.ok()) << seq.status().ToString();
  std::vector<float> all;
  ASSERT_TRUE(seq->Forward(g.tokens, nullptr, &all).ok());
  ASSERT_EQ(static_cast<int64_t>(all.size()), n * vocab);

  ASSERT_EQ(g.positions.size(), g.logits.size());
  double worst_rel = 0;
  for (size_t k = 0; k < g.positions.size(); ++k) {
    const int64_t pos = g.positions[k];
    ASSERT_TRUE(pos >= 0 && pos < n);
    ASSERT_EQ(static_cast<int64_t>(g.logits[k].size()), vocab);
    const float* got = all.data() + pos * vocab;
    double max_ref = 0, max_diff = 0;
    int64_t worst = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double ref = g.logits[k][static_cast<size_t>(v)];
      const double diff = std::fabs(static_cast<double>(got[v]) - ref);
      max_ref = std::max(max_ref, std::fabs(ref));
      if (diff > max_diff) {
        max_diff = diff;
        worst = v;
      }
    }
    worst_rel = std::max(worst_rel, max_diff / max_ref);
    EXPECT_LE(max_diff, kRelTolerance * max_ref)
        << "position " << pos << ": token " << worst << " cpp " << got[worst] << " ref "
        << g.logits[k][static_cast<size_t>(worst)] << " (relative error " << max_diff / max_ref
        << ")";
  }

  std::cout << "golden " << g.name << ": largest relative logit error " << worst_rel << "\n";

  std::vector<int32_t> greedy;
  std::vector<float> last(all.end() - vocab, all.end());
  for (size_t step = 0; step < g.greedy.size(); ++step) {
    const int32_t next = Argmax(last.data(), vocab);
    greedy.push_back(next);
    if (step + 1 < g.greedy.size()) {
      ASSERT_TRUE(seq->Decode(next, &last).ok());
    }
  }
  EXPECT_EQ(greedy, g.greedy);
}

TEST(GoldenTest, RandomCheckpointMatchesPyTorch) {
  Result<ModelConfig> cfg = LoadModelConfig(GoldenPath("random-seed0.config.json"));
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  TempDir dir;
  ASSERT_TRUE(WriteRandomCheckpoint(*cfg, 0, CheckpointLayout::kBf16, dir.path()).ok());
  Result<SafetensorsArchive> archive = SafetensorsArchive::Open(dir.path());
  ASSERT_TRUE(archive.ok()) << archive.status().ToString();
  Result<ModelWeights> weights = LoadModelWeights(*archive, *cfg);
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  const std::vector<GoldenPrompt> prompts = ReadGolden(GoldenPath("random-seed0.json"));
  ASSERT_FALSE(prompts.empty());
  for (const GoldenPrompt& g : prompts) CheckPrompt(*cfg, *weights, g);
}

void CheckTrainedModel(const fs::path& model, const std::string& golden) {
  Result<ModelConfig> cfg = LoadModelConfig(model / "config.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  Result<SafetensorsArchive> archive = SafetensorsArchive::Open(model);
  ASSERT_TRUE(archive.ok()) << archive.status().ToString();
  Result<ModelWeights> weights = LoadModelWeights(*archive, *cfg);
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  const std::vector<GoldenPrompt> prompts = ReadGolden(GoldenPath(golden));
  ASSERT_FALSE(prompts.empty());
  for (const GoldenPrompt& g : prompts) CheckPrompt(*cfg, *weights, g);
}

TEST(GoldenTest, TrainedModelMatchesPyTorch) { CheckTrainedModel(ShippedModel(), "tiny-v4.json"); }

// models/tiny-v4-indexer: ratio-0 and ratio-4 layers only, top-k 16 (its retrieval goes through the
// lightning indexer's selection).
TEST(GoldenTest, IndexerModelMatchesPyTorch) {
  CheckTrainedModel(fs::path(NW_SOURCE_DIR) / "models" / "tiny-v4-indexer", "tiny-v4-indexer.json");
}

// The trained model's greedy answers through the public engine API, on both CPU backends.
TEST(GoldenTest, TrainedModelGreedyThroughLoadEngine) {
  const std::vector<GoldenPrompt> prompts = ReadGolden(GoldenPath("tiny-v4.json"));
  ASSERT_FALSE(prompts.empty());
  for (const std::string backend : {"cpu", "cpu-paged"}) {
    EngineOptions eo;
    eo.backend = backend;
    Result<std::unique_ptr<Engine>> engine = LoadEngine(ShippedModel(), eo);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    for (const GoldenPrompt& g : prompts) {
      GenerateRequest req;
      req.prompt = g.tokens;
      req.max_new_tokens = static_cast<int>(g.greedy.size());
      req.index_topk = g.index_topk;
      Result<GenerateResult> r = (*engine)->Generate(req);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(r->tokens, g.greedy) << backend << " " << g.name;
    }
  }
}

}  // namespace
}  // namespace nw
