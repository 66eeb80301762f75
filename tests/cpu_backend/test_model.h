// Shared helpers for the CPU backend tests: configs, seeded random weights and token streams.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/checkpoint/config.h"
#include "engine/checkpoint/weights.h"
#include "engine/cpu/random_weights.h"
#include "engine/cpu/sequence.h"

namespace nw::cpu::testing {

/// Tiny config A (docs/checkpoint-format.md §5), from the repository's models/configs/tiny-a.json.
inline ModelConfig TinyA() {
  auto c = LoadModelConfig(std::string(NW_SOURCE_DIR) + "/models/configs/tiny-a.json");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : ModelConfig{};
}

/// Config A with a 16-token window and top-4 indexer, so short prompts already exercise the
/// window ring, the compressed entries beyond the window and the indexer's selection.
inline ModelConfig SmallWindow() {
  ModelConfig c = TinyA();
  c.window_size = 16;
  c.index_topk = 4;
  return c;
}

inline std::vector<int32_t> RandomTokens(int64_t n, int vocab, uint64_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int32_t& v : t) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(vocab));
  }
  return t;
}

inline Sequence MakeSequence(const ModelConfig& cfg, const ModelWeights& w, SequenceOptions o) {
  auto s = Sequence::Create(cfg, w, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

/// Every token's logits from one Forward over `tokens` ([n, V]).
inline std::vector<float> AllLogits(const ModelConfig& cfg, const ModelWeights& w,
                                    const std::vector<int32_t>& tokens, SequenceOptions o) {
  o.max_tokens = std::max<int64_t>(o.max_tokens, static_cast<int64_t>(tokens.size()));
  Sequence seq = MakeSequence(cfg, w, o);
  std::vector<float> all;
  const Status st = seq.Forward(tokens, nullptr, &all);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return all;
}

}  // namespace nw::cpu::testing
