// EngineExecutor on a real (random) checkpoint: a job that asks for probes on a model without an
// indexer layer is refused with the reason, not run (issue 19: the daemon may receive a job
// `nw validate` would have refused); Preload() loads a job's engine ahead of the job, as the job
// would, and its failure leaves the job to report the error (issue 13: `nw run` preloads the GPU
// slots' engines while it prepares the database).
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

  // Removes the model's files (the folder stays): a job that has to load the engine now fails.
  void RemoveModelFiles() {
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      std::filesystem::remove_all(entry.path());
    }
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

TEST_F(EngineExecutorTest, APreloadedEngineServesTheFirstJobWithoutLoadingAgain) {
  const std::string digest = WriteModel({0, 4, 128, 0});
  EngineExecutor executor(EngineExecutorOptions{});
  EXPECT_EQ(executor.loaded_engines(), 0u);
  NW_ASSERT_OK(executor.Preload(dir_.string(), "cpu"));
  EXPECT_EQ(executor.loaded_engines(), 1u);
  NW_ASSERT_OK(executor.Preload(dir_.string(), "cpu"));  // already loaded: kept, not reloaded
  EXPECT_EQ(executor.loaded_engines(), 1u);

  // With the files gone only the preloaded engine can run the job: it does.
  RemoveModelFiles();
  JobSpec job = Job(digest);
  job.probe = false;
  const JobResult r = executor.Execute(job, job.Key(), 1);
  EXPECT_NE(r.outcome, Outcome::kEngineError) << r.error_message;
  EXPECT_EQ(r.prompt_tokens, 512);
  EXPECT_EQ(executor.loaded_engines(), 1u);
  // An executor that did not preload loads at the job, and fails.
  EngineExecutor cold(EngineExecutorOptions{});
  EXPECT_EQ(cold.Execute(job, job.Key(), 1).outcome, Outcome::kEngineError);
}

TEST_F(EngineExecutorTest, PreloadEvictsTheLeastRecentlyUsedEngineAsAJobWould) {
  const std::string digest = WriteModel({0, 4, 128, 0});
  EngineExecutorOptions o;
  o.max_loaded_engines = 2;
  EngineExecutor executor(o);
  NW_ASSERT_OK(executor.Preload(dir_.string(), "cpu"));
  NW_ASSERT_OK(executor.Preload(dir_.string(), "cpu-paged"));
  NW_ASSERT_OK(executor.Preload(dir_.string(), "cpu"));     // cpu is now the more recent one
  NW_ASSERT_OK(executor.Preload(dir_.string(), "cpu-pd"));  // evicts cpu-paged
  EXPECT_EQ(executor.loaded_engines(), 2u);

  RemoveModelFiles();
  JobSpec job = Job(digest);
  job.probe = false;
  for (const std::string backend : {"cpu", "cpu-pd"}) {
    job.backend = backend;
    const JobResult r = executor.Execute(job, job.Key(), 1);
    EXPECT_NE(r.outcome, Outcome::kEngineError) << backend << ": " << r.error_message;
  }
  job.backend = "cpu-paged";  // evicted: the job loads it again, from files that are gone
  EXPECT_EQ(executor.Execute(job, job.Key(), 1).outcome, Outcome::kEngineError);
}

TEST_F(EngineExecutorTest, AFailedPreloadNamesTheModelAndTheJobStillReportsItsError) {
  const std::string digest = WriteModel({0, 4, 128, 0});
  EngineExecutor executor(EngineExecutorOptions{});
  const std::string missing = (dir_ / "no-such-model").string();
  const Status st = executor.Preload(missing, "cpu");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(missing), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("preloading the cpu engine of " + missing), std::string::npos)
      << st.ToString();
  EXPECT_EQ(executor.loaded_engines(), 0u);
  EXPECT_FALSE(executor.Preload(dir_.string(), "no-such-backend").ok());
  EXPECT_EQ(executor.loaded_engines(), 0u);

  // The job on that model reports the load's error as it would without the preload ...
  JobSpec bad = Job(digest);
  bad.probe = false;
  bad.model_dir = missing;
  const JobResult r = executor.Execute(bad, bad.Key(), 1);
  EXPECT_EQ(r.outcome, Outcome::kEngineError);
  EXPECT_NE(r.error_message.find(missing), std::string::npos) << r.error_message;
  EXPECT_EQ(r.error_message.find("preloading"), std::string::npos) << r.error_message;
  // ... and the executor runs the next job normally.
  JobSpec good = Job(digest);
  good.probe = false;
  const JobResult ok = executor.Execute(good, good.Key(), 1);
  EXPECT_NE(ok.outcome, Outcome::kEngineError) << ok.error_message;
}

}  // namespace
}  // namespace nw
