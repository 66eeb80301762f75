// EngineExecutor on a real (random) checkpoint: a job that asks for probes on a model without an
// indexer layer is refused with the reason, not run (issue 19: the daemon may receive a job
// `nw validate` would have refused).
#include "worker/engine_executor.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/checkpoint/config.h"
#include "engine/checkpoint/random_checkpoint.h"
#include "engine/engine.h"
#include "engine/text/tokenizer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/temp_dir.h"

namespace nw {
namespace {

class EngineExecutorTest : public ::testing::Test {
 protected:
  // Tiny-A with the given compress ratios, random weights and a small trained tokenizer.
  std::string WriteModel(std::vector<int> ratios) {
    auto cfg = LoadModelConfig(std::string(NW_SOURCE_DIR) + "/models/configs/tiny-a.json");
    EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
    cfg->compress_ratios = std::move(ratios);
    NW_EXPECT_OK(WriteRandomCheckpoint(*cfg, 9, CheckpointLayout::kBf16, dir_));
    std::string corpus;
    for (int i = 0; i < 200; ++i) corpus += "the needle " + std::to_string(i * 7919 % 1000) + " ";
    auto tok = TrainByteLevelBpe(corpus, 300, {"<|bos|>", "<|eos|>"});
    EXPECT_TRUE(tok.ok()) << tok.status().ToString();
    test_support::WriteFileText(dir_ / "tokenizer.json", tok->dump());
    auto engine = LoadEngine(dir_, EngineOptions{});
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    return engine.ok() ? (*engine)->model_digest() : "";
  }

  JobSpec Job(const std::string& digest) const {
    JobSpec s;
    s.model_dir = dir_.string();
    s.model_digest = digest;
    s.engine_version = "nw-test";
    s.task = "niah-single";
    s.haystack = "noise";
    s.context_length = 512;
    s.needle_position = 0.5;
    s.topk = 4;
    s.backend = "cpu";
    s.max_new_tokens = 2;
    s.probe = true;
    return s;
  }

  test_support::TempDir tmp_{"engine-executor"};
  std::filesystem::path dir_ = tmp_.path();
};

TEST_F(EngineExecutorTest, ProbesOnAModelWithoutAnIndexerAreRefused) {
  const std::string digest = WriteModel({0, 128, 128, 0});
  EngineExecutor executor(EngineExecutorOptions{});
  const JobSpec job = Job(digest);
  const JobResult r = executor.Execute(job, job.Key(), 1);
  EXPECT_EQ(r.outcome, Outcome::kEngineError);
  EXPECT_EQ(r.error_code, "invalid_argument");
  EXPECT_FALSE(r.retryable);
  EXPECT_NE(r.error_message.find("job.probe: the model in " + dir_.string() +
                                 " has no layer with an indexer to probe"),
            std::string::npos)
      << r.error_message;
  // Without probes the same model runs the job.
  JobSpec plain = job;
  plain.probe = false;
  const JobResult ok = executor.Execute(plain, plain.Key(), 1);
  EXPECT_NE(ok.outcome, Outcome::kEngineError) << ok.error_message;
}

TEST_F(EngineExecutorTest, ProbesNameTheModelsIndexerLayers) {
  const std::string digest = WriteModel({0, 4, 128, 0});
  EngineExecutor executor(EngineExecutorOptions{});
  const JobSpec job = Job(digest);
  const JobResult r = executor.Execute(job, job.Key(), 1);
  ASSERT_NE(r.outcome, Outcome::kEngineError) << r.error_message;
  ASSERT_EQ(r.probes.size(), 1u);
  EXPECT_EQ(r.probes[0].layer, 1);
  NW_EXPECT_OK(CheckResultBounds(r, &job, nullptr));
}

}  // namespace
}  // namespace nw
