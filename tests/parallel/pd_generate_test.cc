// The "cpu-pd" backend: every request prefilled on one instance, its decode state shipped as a
// transfer buffer, decoded on a paged instance. It must give exactly what "cpu" gives (tokens,
// stop flag, probe rows of the prompt and of every decode step) on the shipped trained model,
// for several precision profiles and prompt lengths around the window and block boundaries.
#include "engine/parallel/pd_generate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tests/parallel/test_util.h"

namespace nw::parallel {
namespace {

std::unique_ptr<Engine> Load(const std::string& backend) {
  EngineOptions o;
  o.backend = backend;
  auto e = LoadEngine(std::string(NW_SOURCE_DIR) + "/models/tiny-v4", o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

GenerateRequest Request(int64_t prompt_len, uint64_t seed, const std::string& profile) {
  GenerateRequest r;
  r.prompt = testing::Tokens(prompt_len, 1000, seed);
  r.max_new_tokens = 10;
  r.index_topk = 8;  // small, so selection matters from 32 compressed entries on
  auto p = NamedPrecisionProfile(profile);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  if (p.ok()) r.precision = *p;
  ProbeRequest probe;
  probe.needle_begin = prompt_len / 3;
  probe.needle_end = prompt_len / 3 + 6;
  probe.query_begin = prompt_len - 20;  // prompt rows (prefill side) and decode rows
  probe.keep_topk_sets = true;
  r.probe = probe;
  return r;
}

void ExpectSame(const GenerateResult& pd, const GenerateResult& ref) {
  EXPECT_EQ(pd.tokens, ref.tokens);
  EXPECT_EQ(pd.stopped, ref.stopped);
  ASSERT_EQ(pd.probes.size(), ref.probes.size());
  ASSERT_FALSE(ref.probes.empty());
  for (size_t l = 0; l < ref.probes.size(); ++l) {
    const IndexerProbe& a = pd.probes[l];
    const IndexerProbe& b = ref.probes[l];
    EXPECT_EQ(a.layer, b.layer);
    EXPECT_EQ(a.topk, b.topk);
    // 20 prompt rows and one row per decode step after the first token.
    EXPECT_EQ(b.positions.size(), 20 + ref.tokens.size() - 1);
    EXPECT_EQ(a.positions, b.positions);
    EXPECT_EQ(a.needle_rank, b.needle_rank);
    EXPECT_EQ(a.in_topk, b.in_topk);
    EXPECT_EQ(a.num_visible, b.num_visible);
    EXPECT_EQ(a.topk_sets, b.topk_sets);
    ASSERT_EQ(a.needle_score.size(), b.needle_score.size());
    EXPECT_EQ(0, std::memcmp(a.needle_score.data(), b.needle_score.data(),
                             a.needle_score.size() * sizeof(float)));
    ASSERT_EQ(a.kth_score.size(), b.kth_score.size());
    EXPECT_EQ(
        0, std::memcmp(a.kth_score.data(), b.kth_score.data(), a.kth_score.size() * sizeof(float)));
  }
}

TEST(CpuPdBackend, IsAvailableAndNamedInResults) {
  const auto names = AvailableBackends();
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu-pd"), names.end());
  auto pd = Load("cpu-pd");
  ASSERT_NE(pd, nullptr);
  EXPECT_EQ(pd->backend(), "cpu-pd");
  EngineOptions bad;
  bad.backend = "cpu-pdx";
  EXPECT_FALSE(LoadEngine(std::string(NW_SOURCE_DIR) + "/models/tiny-v4", bad).ok());
}

TEST(CpuPdBackend, SameAnswersAndProbesAsCpu) {
  auto ref = Load("cpu");
  auto pd = Load("cpu-pd");
  ASSERT_NE(ref, nullptr);
  ASSERT_NE(pd, nullptr);
  // Lengths: inside the window, just past it, mid ratio-4 block, a ratio-128 block boundary.
  const std::vector<int64_t> lengths = {60, 129, 331, 512};
  const std::vector<std::string> profiles = {"fp32", "bf16", "fp8-index", "fp8-kv"};
  for (size_t i = 0; i < lengths.size(); ++i) {
    const GenerateRequest r = Request(lengths[i], 7 + i, profiles[i]);
    SCOPED_TRACE("prompt " + std::to_string(lengths[i]) + " " + profiles[i]);
    auto a = pd->Generate(r);
    auto b = ref->Generate(r);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    ExpectSame(*a, *b);
  }
}

TEST(CpuPdBackend, BatchesRunEachRequestThroughThePair) {
  auto ref = Load("cpu");
  auto pd = Load("cpu-pd");
  ASSERT_NE(ref, nullptr);
  ASSERT_NE(pd, nullptr);
  const std::vector<GenerateRequest> rs = {Request(200, 1, "fp32"), Request(140, 2, "fp32")};
  auto a = pd->GenerateBatch(rs);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->size(), rs.size());
  for (size_t i = 0; i < rs.size(); ++i) {
    auto b = ref->Generate(rs[i]);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    ExpectSame((*a)[i], *b);
  }
}

TEST(CpuPdBackend, BadRequestsFailAsOnCpu) {
  auto pd = Load("cpu-pd");
  ASSERT_NE(pd, nullptr);
  GenerateRequest empty;
  EXPECT_EQ(pd->Generate(empty).status().code(), StatusCode::kInvalidArgument);
  GenerateRequest too_long = Request(40, 3, "fp32");
  too_long.max_new_tokens = 40000;  // past max_position_embeddings
  EXPECT_FALSE(pd->Generate(too_long).ok());
}

}  // namespace
}  // namespace nw::parallel
