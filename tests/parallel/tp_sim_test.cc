// Simulated tensor parallelism against the single-rank CPU backend: the partition plan, its
// validation, and R in {1, 2, 4} giving the same greedy tokens and top-k selections with logits
// within 1e-5 relative (only the all-reduce sum order differs).
#include "engine/parallel/tp_sim.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/cpu/random_weights.h"
#include "engine/parallel/partition.h"
#include "tests/parallel/test_util.h"

namespace nw::parallel {
namespace {

using testing::GreedyDecode;
using testing::GreedyRun;
using testing::LoadTiny;
using testing::RelErr;
using testing::Tokens;

TEST(PartitionPlanTest, SplitsEveryDimensionInRankOrder) {
  const ModelConfig cfg = LoadTiny("tiny-b.json", 16, 4);  // H 8, g 4, h_I 8, E 16
  auto plan = MakePartitionPlan(cfg, 4);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->slices.size(), 4u);
  const RankSlice& s = plan->slices[2];
  EXPECT_EQ(s.heads, (Range{4, 6}));
  EXPECT_EQ(s.groups, (Range{2, 3}));
  EXPECT_EQ(s.wo_b_columns, (Range{2 * cfg.o_lora_rank, 3 * cfg.o_lora_rank}));
  EXPECT_EQ(s.index_heads, (Range{4, 6}));
  EXPECT_EQ(s.experts, (Range{8, 12}));
  EXPECT_TRUE(ValidatePartitionPlan(cfg, *plan).ok());
}

TEST(PartitionPlanTest, RejectsRanksThatDoNotDivide) {
  const ModelConfig a = LoadTiny("tiny-a.json", 16, 4);  // H 4, g 2, h_I 4, E 4
  auto four = MakePartitionPlan(a, 4);
  ASSERT_FALSE(four.ok());
  EXPECT_NE(four.status().ToString().find("o_groups"), std::string::npos)
      << four.status().ToString();
  EXPECT_FALSE(MakePartitionPlan(a, 3).ok());
  EXPECT_FALSE(MakePartitionPlan(a, 0).ok());
  ModelConfig b = LoadTiny("tiny-b.json", 16, 4);
  b.n_routed_experts = 6;
  auto experts = MakePartitionPlan(b, 4);
  ASSERT_FALSE(experts.ok());
  EXPECT_NE(experts.status().ToString().find("n_routed_experts"), std::string::npos);
  b = LoadTiny("tiny-b.json", 16, 4);
  b.index_n_heads = 6;
  auto index = MakePartitionPlan(b, 4);
  ASSERT_FALSE(index.ok());
  EXPECT_NE(index.status().ToString().find("index_n_heads"), std::string::npos);
}

TEST(PartitionPlanTest, ValidationRejectsTamperedPlans) {
  const ModelConfig cfg = LoadTiny("tiny-b.json", 16, 4);
  auto plan = MakePartitionPlan(cfg, 2);
  ASSERT_TRUE(plan.ok());
  PartitionPlan bad = *plan;
  bad.slices[1].experts.begin = 7;  // overlaps rank 0
  EXPECT_FALSE(ValidatePartitionPlan(cfg, bad).ok());
  bad = *plan;
  bad.slices[0].groups = Range{1, 2};
  bad.slices[1].groups = Range{0, 1};
  EXPECT_FALSE(ValidatePartitionPlan(cfg, bad).ok());
  bad = *plan;
  bad.slices.pop_back();
  EXPECT_FALSE(ValidatePartitionPlan(cfg, bad).ok());
  const ModelWeights w = cpu::RandomModelWeights(cfg, 3);
  cpu::SequenceOptions o;
  o.max_tokens = 64;
  EXPECT_FALSE(CreateTpSequence(cfg, w, o, bad).ok());
  o.tp_ranks = 3;  // the Sequence itself rejects a non-dividing rank count too
  EXPECT_FALSE(cpu::Sequence::Create(cfg, w, o).ok());
}

TEST(AllReduceTest, SumsInRankOrder) {
  const std::vector<std::vector<float>> p = {{1e8f, 1.0f}, {-1e8f, 2.0f}, {1.0f, 3.0f}};
  std::vector<float> out;
  ASSERT_TRUE(AllReduceSum(p, &out).ok());
  EXPECT_EQ(out, (std::vector<float>{1.0f, 6.0f}));  // (1e8 - 1e8) + 1, fixed order
  const std::vector<std::vector<float>> uneven = {{1.0f}, {1.0f, 2.0f}};
  EXPECT_FALSE(AllReduceSum(uneven, &out).ok());
}

struct TpCase {
  std::string config;
  int ranks;
  KvLayout layout;
};

class TpEquivalenceTest : public ::testing::TestWithParam<TpCase> {};

struct Outcome {
  GreedyRun run;
  std::vector<IndexerProbe> probes;
};

Outcome RunOnce(const ModelConfig& cfg, const ModelWeights& w, cpu::SequenceOptions o, int ranks,
                const std::vector<int32_t>& prompt, int steps) {
  Result<cpu::Sequence> seq = Status::Internal("unset");
  if (ranks == 0) {
    seq = cpu::Sequence::Create(cfg, w, o);
  } else {
    auto plan = MakePartitionPlan(cfg, ranks);
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    seq = CreateTpSequence(cfg, w, o, *plan);
  }
  EXPECT_TRUE(seq.ok()) << seq.status().ToString();
  std::vector<float> logits;
  const Status st = seq->Prefill(prompt, &logits);
  EXPECT_TRUE(st.ok()) << st.ToString();
  Outcome out;
  out.run = GreedyDecode(*seq, logits, steps);
  out.probes = seq->probes();
  return out;
}

TEST_P(TpEquivalenceTest, SameGreedyTokensTopKSetsAndLogits) {
  const TpCase c = GetParam();
  const ModelConfig cfg = LoadTiny(c.config, 16, 4);
  const ModelWeights w = cpu::RandomModelWeights(cfg, 11);
  const std::vector<int32_t> prompt = Tokens(96, cfg.vocab_size, 5);
  cpu::SequenceOptions o;
  o.layout = c.layout;
  o.prefill_chunk = c.layout == KvLayout::kPaged ? 32 : 0;
  o.max_tokens = 160;
  ProbeRequest probe;
  probe.needle_begin = 20;
  probe.needle_end = 28;
  probe.query_begin = 40;
  probe.keep_topk_sets = true;
  o.probe = probe;
  const int steps = 12;
  const Outcome ref = RunOnce(cfg, w, o, /*ranks=*/0, prompt, steps);
  const Outcome tp = RunOnce(cfg, w, o, c.ranks, prompt, steps);
  EXPECT_EQ(tp.run.tokens, ref.run.tokens);
  ASSERT_EQ(tp.run.logits.size(), ref.run.logits.size());
  for (size_t i = 0; i < ref.run.logits.size(); ++i) {
    const double err = RelErr(tp.run.logits[i], ref.run.logits[i]);
    EXPECT_LE(err, 1e-5) << "step " << i;
    if (c.ranks == 1) {
      EXPECT_EQ(tp.run.logits[i], ref.run.logits[i]) << "R=1 must be exact";
    }
  }
  ASSERT_EQ(tp.probes.size(), ref.probes.size());
  ASSERT_FALSE(ref.probes.empty());
  for (size_t l = 0; l < ref.probes.size(); ++l) {
    ASSERT_FALSE(ref.probes[l].topk_sets.empty());
    EXPECT_EQ(tp.probes[l].topk_sets, ref.probes[l].topk_sets) << "layer " << l;
    EXPECT_EQ(tp.probes[l].needle_rank, ref.probes[l].needle_rank) << "layer " << l;
    EXPECT_EQ(tp.probes[l].positions, ref.probes[l].positions);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, TpEquivalenceTest,
                         ::testing::Values(TpCase{"tiny-a.json", 1, KvLayout::kContiguous},
                                           TpCase{"tiny-a.json", 2, KvLayout::kContiguous},
                                           TpCase{"tiny-b.json", 1, KvLayout::kContiguous},
                                           TpCase{"tiny-b.json", 2, KvLayout::kContiguous},
                                           TpCase{"tiny-b.json", 4, KvLayout::kContiguous},
                                           TpCase{"tiny-b.json", 4, KvLayout::kPaged}),
                         [](const ::testing::TestParamInfo<TpCase>& i) {
                           std::string n =
                               i.param.config.substr(0, 6) + "_R" + std::to_string(i.param.ranks) +
                               (i.param.layout == KvLayout::kPaged ? "_paged" : "_contiguous");
                           for (char& ch : n) {
                             if (ch == '-') ch = '_';
                           }
                           return n;
                         });

// The split must matter: a rank count of 2 changes the reduction order, so the logits are not
// all bitwise equal to the single-rank ones (the test above could not tell otherwise).
TEST(TpSimTest, RanksReallyChangeTheReductionOrder) {
  const ModelConfig cfg = LoadTiny("tiny-b.json", 16, 4);
  const ModelWeights w = cpu::RandomModelWeights(cfg, 11);
  const std::vector<int32_t> prompt = Tokens(40, cfg.vocab_size, 9);
  cpu::SequenceOptions o;
  o.max_tokens = 64;
  const Outcome ref = RunOnce(cfg, w, o, 0, prompt, 0);
  const Outcome tp = RunOnce(cfg, w, o, 4, prompt, 0);
  EXPECT_NE(tp.run.logits[0], ref.run.logits[0]);
  EXPECT_LE(RelErr(tp.run.logits[0], ref.run.logits[0]), 1e-5);
}

}  // namespace
}  // namespace nw::parallel
