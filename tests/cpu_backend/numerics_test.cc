// Precision hooks and the random-weights helper.
#include "engine/cpu/numerics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "engine/cpu/random_weights.h"
#include "engine/cpu/sequence.h"
#include "kernels/quant/quant.h"
#include "tests/cpu_backend/test_model.h"

namespace nw::cpu {
namespace {

std::vector<float> Ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(static_cast<float>(i) * 0.37f) * 3.1f;
  return v;
}

bool IsBf16(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return (b & 0xFFFF) == 0;
}

TEST(NumericsTest, Fp32ProfileRoundsNothing) {
  const Numerics n(PrecisionProfile{}, 128, 64);
  const std::vector<float> x = Ramp(128);
  std::vector<float> y = x;
  n.Act(y.data(), 128);
  n.IndexQ(y.data(), 128);
  n.IndexK(y.data(), 128);
  n.Kv(y.data());
  EXPECT_EQ(x, y);
}

TEST(NumericsTest, EachPartUsesItsFormat) {
  PrecisionProfile p;
  p.activations = NumFormat::kBf16;
  p.index_q = NumFormat::kMxfp4;
  p.index_k = NumFormat::kFp8;
  p.kv = NumFormat::kFp8;
  const Numerics n(p, 128, 64);
  const std::vector<float> x = Ramp(128);

  std::vector<float> act = x;
  n.Act(act.data(), 128);
  for (float v : act) EXPECT_TRUE(IsBf16(v));

  std::vector<float> q = x, want(128);
  n.IndexQ(q.data(), 128);
  quant::FakeQuantMxfp4(x.data(), want.data(), 128);
  EXPECT_EQ(q, want);

  std::vector<float> k = x;
  n.IndexK(k.data(), 128);
  quant::FakeQuantFp8(x.data(), want.data(), 128, 128);
  EXPECT_EQ(k, want);

  std::vector<float> kv = x;
  n.Kv(kv.data());
  quant::FakeQuantV4Kv(x.data(), want.data(), 128, 64);
  EXPECT_EQ(kv, want);
  EXPECT_NE(kv, x);
}

TEST(RandomWeightsTest, DeterministicPerSeedAndValid) {
  const ModelConfig cfg = testing::TinyA();
  const ModelWeights a = RandomModelWeights(cfg, 1);
  const ModelWeights b = RandomModelWeights(cfg, 1);
  const ModelWeights c = RandomModelWeights(cfg, 2);
  EXPECT_EQ(a.embed.data, b.embed.data);
  EXPECT_EQ(a.layers[1].attn.indexer->compressor.ape.data,
            b.layers[1].attn.indexer->compressor.ape.data);
  EXPECT_NE(a.embed.data, c.embed.data);
  EXPECT_TRUE(ValidateWeights(cfg, a).ok());
  // Hash layer 0: k distinct experts per token.
  const auto& t2e = a.layers[0].ffn.tid2eid;
  ASSERT_EQ(t2e.size(), static_cast<size_t>(cfg.vocab_size * cfg.n_activated_experts));
  for (int t = 0; t < cfg.vocab_size; ++t) {
    std::set<int32_t> ids(t2e.begin() + t * cfg.n_activated_experts,
                          t2e.begin() + (t + 1) * cfg.n_activated_experts);
    EXPECT_EQ(ids.size(), static_cast<size_t>(cfg.n_activated_experts));
  }
  // Linear weights have variance ~1/in.
  double ss = 0;
  for (float v : a.layers[0].attn.wq_b.data) ss += static_cast<double>(v) * v;
  EXPECT_NEAR(ss / static_cast<double>(a.layers[0].attn.wq_b.numel()), 1.0 / cfg.q_lora_rank,
              0.1 / cfg.q_lora_rank);
}

}  // namespace
}  // namespace nw::cpu
