// Shared helpers for the parallel tests: tiny configs, tokens, greedy runs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/checkpoint/config.h"
#include "engine/cpu/sequence.h"

namespace nw::parallel::testing {

inline ModelConfig LoadTiny(const std::string& name, int64_t window, int topk) {
  auto c = LoadModelConfig(std::string(NW_SOURCE_DIR) + "/models/configs/" + name);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  ModelConfig cfg = c.ok() ? *c : ModelConfig{};
  cfg.window_size = window;  // small, so short prompts wrap the ring and need the indexer
  cfg.index_topk = topk;
  return cfg;
}

inline std::vector<int32_t> Tokens(int64_t n, int vocab, uint64_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int32_t& v : t) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(vocab));
  }
  return t;
}

inline int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

/// Greedy run: `steps` tokens after the prompt's logits; every logits vector is kept.
struct GreedyRun {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};

/// Decodes `steps` greedy tokens from `logits` (the last logits so far).
inline GreedyRun GreedyDecode(cpu::Sequence& seq, std::vector<float> logits, int steps) {
  GreedyRun run;
  run.logits.push_back(logits);
  for (int i = 0; i < steps; ++i) {
    const int32_t tok = Argmax(logits);
    run.tokens.push_back(tok);
    const Status st = seq.Decode(tok, &logits);
    EXPECT_TRUE(st.ok()) << st.ToString();
    run.logits.push_back(logits);
  }
  return run;
}

/// max |a - b| / max |b|.
inline double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

}  // namespace nw::parallel::testing
