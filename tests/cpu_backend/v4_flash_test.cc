// Real DeepSeek-V4-Flash shapes and tensor formats: a layer-truncated random checkpoint of
// models/configs/v4-flash.json (ReduceConfig + WriteRandomCheckpoint in the FP8+FP4 layout, what
// `nw model init --layers N --layout real` writes) is loaded by the engine and runs a short prompt
// on the CPU.
//
// The suite variant keeps every per-layer shape of V4-Flash (hidden 4096, 64 heads x 512, q rank
// 1024, 8 x 1024 output groups, expert width 2048, mHC 4) in the real formats (F8_E4M3 linears with
// 128x128 F8_E8M0 scales, FP4 e2m1 routed experts with per-32 F8_E8M0 scales), but writes one
// layer, no MTP block, a 1,024-token vocabulary and 6 routed experts (= num_experts_per_tok): about
// 200 MB on disk and a few seconds per token. A real-size layer (256 experts, 129,280-token
// vocabulary) holds about 6.6G parameters, about 26 GB once the CPU engine expands them to fp32, so
// it is opt-in: NW_V4_FLASH_LAYERS=N runs the first N layers with the full vocabulary and every
// expert (NW_V4_FLASH_EXPERTS=E to reduce the experts, NW_V4_FLASH_VOCAB=V the vocabulary).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <vector>

#include "engine/checkpoint/config.h"
#include "engine/checkpoint/loader.h"
#include "engine/checkpoint/random_checkpoint.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/cpu/sequence.h"
#include "engine/generate.h"
#include "tests/support/temp_dir.h"

namespace nw {
namespace {

namespace fs = std::filesystem;

using TempDir = test_support::TempDir;

ModelConfig V4Flash() {
  Result<ModelConfig> c =
      LoadModelConfig(fs::path(NW_SOURCE_DIR) / "models" / "configs" / "v4-flash.json");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : ModelConfig{};
}

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

void ExpectDtype(const SafetensorsArchive& a, const std::string& name, StDtype dtype,
                 std::vector<int64_t> shape) {
  const StTensor* t = a.Find(name);
  ASSERT_NE(t, nullptr) << name;
  EXPECT_EQ(t->dtype, dtype) << name;
  EXPECT_EQ(t->shape, shape) << name;
}

// Writes the reduced checkpoint, checks the on-disk formats of a few tensors, loads it and runs
// a prefill of `prompt_len` tokens and `decode` greedy steps.
void WriteLoadRun(const ConfigReduction& r, int prompt_len, int decode) {
  Result<ModelConfig> cfg = ReduceConfig(V4Flash(), r);
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->dim, 4096);
  EXPECT_EQ(cfg->n_heads, 64);
  EXPECT_EQ(cfg->head_dim, 512);
  EXPECT_EQ(cfg->moe_inter_dim, 2048);
  TempDir dir;
  ASSERT_TRUE(WriteRandomCheckpoint(*cfg, 1, CheckpointLayout::kFp8Fp4, dir.path()).ok());
  Result<SafetensorsArchive> archive = SafetensorsArchive::Open(dir.path());
  ASSERT_TRUE(archive.ok()) << archive.status().ToString();
  // FP8 linear: [1024, 4096] e4m3 with [8, 32] ue8m0 block scales.
  ExpectDtype(*archive, "layers.0.attn.wq_a.weight", StDtype::kF8E4M3, {1024, 4096});
  ExpectDtype(*archive, "layers.0.attn.wq_a.scale", StDtype::kF8E8M0, {8, 32});
  // FP4 routed expert: [2048, 4096] e2m1 packed two per byte, per-32 ue8m0 scales.
  ExpectDtype(*archive, "layers.0.ffn.experts.0.w1.weight", StDtype::kI8, {2048, 2048});
  ExpectDtype(*archive, "layers.0.ffn.experts.0.w1.scale", StDtype::kF8E8M0, {2048, 128});
  // The shared expert is FP8 like the other linears.
  ExpectDtype(*archive, "layers.0.ffn.shared_experts.w2.weight", StDtype::kF8E4M3, {4096, 2048});

  Result<ModelWeights> weights = LoadModelWeights(*archive, *cfg);
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  cpu::SequenceOptions so;
  so.max_tokens = prompt_len + decode;
  Result<cpu::Sequence> seq = cpu::Sequence::Create(*cfg, *weights, so);
  ASSERT_TRUE(seq.ok()) << seq.status().ToString();
  std::vector<int32_t> prompt;
  for (int i = 0; i < prompt_len; ++i) prompt.push_back((i * 37 + 11) % cfg->vocab_size);
  std::vector<float> logits;
  ASSERT_TRUE(seq->Prefill(prompt, &logits).ok());
  ASSERT_EQ(static_cast<int64_t>(logits.size()), cfg->vocab_size);
  for (int step = 0; step < decode; ++step) {
    for (float v : logits) ASSERT_TRUE(std::isfinite(v)) << "step " << step;
    const int32_t next = Argmax(logits.data(), cfg->vocab_size);
    ASSERT_TRUE(seq->Decode(next, &logits).ok());
  }
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

TEST(V4FlashTest, ReduceConfigKeepsPerLayerShapes) {
  const ModelConfig full = V4Flash();
  ASSERT_EQ(full.n_layers, 43);
  ASSERT_EQ(full.vocab_size, 129280);
  ASSERT_EQ(full.num_indexer_layers(), 21);
  EXPECT_TRUE(full.swiglu_clamp_shared_expert);
  ConfigReduction r;
  r.layers = 4;
  Result<ModelConfig> c = ReduceConfig(full, r);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->compress_ratios, (std::vector<int>{0, 0, 4, 128, 0}));  // + the MTP block's 0
  EXPECT_EQ(c->n_hash_layers, 3);
  r.layers = 2;
  r.mtp_layers = 0;
  r.vocab_size = 1024;
  r.routed_experts = 8;
  c = ReduceConfig(full, r);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->compress_ratios, (std::vector<int>{0, 0}));
  EXPECT_EQ(c->n_hash_layers, 1);  // capped below n_layers
  EXPECT_EQ(c->vocab_size, 1024);
  EXPECT_EQ(c->n_routed_experts, 8);
  ModelConfig expect = full;
  expect.n_layers = 2;
  expect.n_mtp_layers = 0;
  expect.compress_ratios = {0, 0};
  expect.n_hash_layers = 1;
  expect.vocab_size = 1024;
  expect.n_routed_experts = 8;
  EXPECT_EQ(*c, expect);  // nothing else changed
  EXPECT_FALSE(ReduceConfig(full, {.layers = 44}).ok());
  EXPECT_FALSE(ReduceConfig(full, {.mtp_layers = 2}).ok());
  EXPECT_FALSE(ReduceConfig(full, {.vocab_size = 200000}).ok());
  EXPECT_FALSE(ReduceConfig(full, {.routed_experts = 5}).ok());  // below num_experts_per_tok 6
}

TEST(V4FlashTest, OneRealShapeLayerSmallVocabRunsOnTheCpu) {
  WriteLoadRun({.layers = 1, .mtp_layers = 0, .vocab_size = 1024, .routed_experts = 6},
               /*prompt_len=*/4, /*decode=*/2);
}

TEST(V4FlashTest, FullSizeLayersOptIn) {
  const int layers = EnvInt("NW_V4_FLASH_LAYERS", 0);
  if (layers <= 0) {
    GTEST_SKIP() << "set NW_V4_FLASH_LAYERS=N to write, load and run the first N real-size "
                    "V4-Flash layers (about 26 GB of fp32 weights per layer with all 256 experts; "
                    "NW_V4_FLASH_EXPERTS / NW_V4_FLASH_VOCAB reduce them)";
  }
  WriteLoadRun({.layers = layers,
                .mtp_layers = 0,
                .vocab_size = EnvInt("NW_V4_FLASH_VOCAB", 0),
                .routed_experts = EnvInt("NW_V4_FLASH_EXPERTS", 0)},
               /*prompt_len=*/4, /*decode=*/1);
}

}  // namespace
}  // namespace nw
