// A CPU sequence that would not fit in memory is refused before it allocates, with the numbers
// (engine/cpu/memory_check.h), on every path that creates one: Sequence::Create, the "cpu" and
// "cpu-paged" backends, "cpu-pd" and Engine::Generate.
#include "engine/cpu/memory_check.h"

#include <gtest/gtest.h>

#include <string>

#include "engine/cpu/random_weights.h"
#include "engine/cpu/sequence.h"
#include "engine/engine.h"
#include "engine/text/tokenizer.h"
#include "tests/cpu_backend/test_model.h"
#include "tests/support/status_matchers.h"

namespace nw::cpu {
namespace {

using testing::TinyA;

TEST(MemoryCheckTest, EstimateGrowsWithTokensAndIsBelowTheMachineForShortPrompts) {
  const ModelConfig cfg = TinyA();
  const double short_seq = CpuSequenceBytes(cfg, 512, 0, 0, nullptr);
  const double long_seq = CpuSequenceBytes(cfg, 512 * 1024, 0, 0, nullptr);
  EXPECT_GT(short_seq, 0);
  EXPECT_GT(long_seq, 500 * short_seq);
  // Paged prefill in chunks needs less than one pass over the whole prompt.
  EXPECT_LT(CpuSequenceBytes(cfg, 512 * 1024, 256, 0, nullptr), long_seq);
  // Kept top-k sets of the probes add to it.
  ProbeRequest p;
  p.keep_topk_sets = true;
  EXPECT_GT(CpuSequenceBytes(cfg, 4096, 0, 0, &p), CpuSequenceBytes(cfg, 4096, 0, 0, nullptr));
  NW_EXPECT_OK(CheckCpuSequenceFits(cfg, 512, 0, 0, nullptr, HostMemoryLimitBytes(0)));
  EXPECT_EQ(HostMemoryLimitBytes(12345), 12345);
  EXPECT_GT(HostMemoryLimitBytes(0), int64_t{1} << 20);
}

TEST(MemoryCheckTest, SequenceOverTheLimitIsRefusedWithTheNumbers) {
  const ModelConfig cfg = TinyA();
  const ModelWeights w = RandomModelWeights(cfg, 3);
  SequenceOptions o;
  o.max_tokens = 4096;
  o.memory_limit_bytes = 1 << 20;  // 1 MiB: far too little
  auto seq = Sequence::Create(cfg, w, o);
  ASSERT_FALSE(seq.ok());
  EXPECT_EQ(seq.status().code(), StatusCode::kOutOfRange);
  EXPECT_FALSE(IsRetryable(seq.status().code()));
  const std::string m = seq.status().message();
  EXPECT_NE(m.find("a sequence of 4096 tokens needs about"), std::string::npos) << m;
  EXPECT_NE(m.find("MiB of host memory, which has 1 MiB"), std::string::npos) << m;
  // The same sequence under the machine's limit is created.
  o.memory_limit_bytes = 0;
  NW_EXPECT_OK(Sequence::Create(cfg, w, o));
}

TEST(MemoryCheckTest, EveryCpuBackendRefusesARequestThatDoesNotFit) {
  const ModelConfig cfg = TinyA();
  const ModelWeights w = RandomModelWeights(cfg, 3);
  for (const char* backend : {"cpu", "cpu-paged", "cpu-pd"}) {
    EngineOptions eo;
    eo.backend = backend;
    auto e = CreateEngine(cfg, Tokenizer(), w, "digest", eo);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    GenerateRequest req;
    req.prompt = testing::RandomTokens(64, cfg.vocab_size, 1);
    req.max_new_tokens = 2;
    req.memory_limit_bytes = 64 << 10;
    auto r = (*e)->Generate(req);
    ASSERT_FALSE(r.ok()) << backend;
    EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange) << backend;
    EXPECT_NE(r.status().message().find("MiB of host memory"), std::string::npos)
        << backend << ": " << r.status().message();
    req.memory_limit_bytes = 0;
    NW_EXPECT_OK((*e)->Generate(req));
  }
}

}  // namespace
}  // namespace nw::cpu
