// The Slurm pieces that need no Slurm: the worker array's batch script, shell quoting, sbatch's
// --parsable output and refusals (through stand-in sbatch scripts), and the job facts a worker
// reports and `nw status` shows. The real thing: tests/slurm/slurm_campaign_test.sh.
#include "slurm/sbatch.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "slurm/slurm_env.h"

namespace nw {
namespace {

using json = nlohmann::json;

WorkerArraySpec Spec() {
  WorkerArraySpec s;
  s.workers = 4;
  s.cpus_per_worker = 2;
  s.log_dir = "/shared/nw logs";
  s.command = {"/opt/nw/bin/nw",   "worker",  "--coordinator-file",
               "/shared/coord ep", "--slots", "2"};
  return s;
}

TEST(SbatchScript, CpuWorkersWithEveryOption) {
  WorkerArraySpec s = Spec();
  s.log_dir = "/shared/logs";
  s.max_running = 2;
  s.partition = "debug";
  s.account = "llm-eval";
  s.qos = "normal";
  s.time_limit = "4:00:00";
  s.mem = "16G";
  s.signal_grace_s = 120;
  s.extra = {"--constraint=avx512", "--exclusive"};
  auto script = RenderWorkerArrayScript(s);
  ASSERT_TRUE(script.ok()) << script.status().ToString();
  const std::string& t = *script;
  EXPECT_EQ(t.rfind("#!/bin/bash\n", 0), 0u);
  for (const char* line :
       {"#SBATCH --job-name=nw-worker\n", "#SBATCH --array=0-3%2\n", "#SBATCH --ntasks=1\n",
        "#SBATCH --cpus-per-task=2\n", "#SBATCH --mem=16G\n", "#SBATCH --partition=debug\n",
        "#SBATCH --account=llm-eval\n", "#SBATCH --qos=normal\n", "#SBATCH --time=4:00:00\n",
        "#SBATCH --requeue\n", "#SBATCH --signal=B:TERM@120\n",
        "#SBATCH --output=/shared/logs/%x-%A_%a.out\n", "#SBATCH --open-mode=append\n",
        "#SBATCH --constraint=avx512\n", "#SBATCH --exclusive\n"}) {
    EXPECT_NE(t.find(line), std::string::npos) << line << " missing from\n" << t;
  }
  EXPECT_EQ(t.find("--gpus-per-task"), std::string::npos);
  EXPECT_NE(
      t.find("\nexec /opt/nw/bin/nw worker --coordinator-file '/shared/coord ep' --slots 2\n"),
      std::string::npos)
      << t;
}

TEST(SbatchScript, GpuWorkersOneGpuEachOrGres) {
  WorkerArraySpec s = Spec();
  s.log_dir = "/l";
  s.gpus_per_worker = 1;
  s.requeue = false;
  auto t = RenderWorkerArrayScript(s);
  ASSERT_TRUE(t.ok());
  EXPECT_NE(t->find("#SBATCH --gpus-per-task=1\n"), std::string::npos);
  EXPECT_NE(t->find("#SBATCH --no-requeue\n"), std::string::npos);
  EXPECT_EQ(t->find("--signal"), std::string::npos);
  s.gres = "gpu:h200:1";
  t = RenderWorkerArrayScript(s);
  ASSERT_TRUE(t.ok());
  EXPECT_NE(t->find("#SBATCH --gres=gpu:h200:1\n"), std::string::npos);
  EXPECT_EQ(t->find("--gpus-per-task"), std::string::npos);
}

TEST(SbatchScript, RefusesWhatAnSbatchLineCannotCarryNamingTheFlag) {
  auto refused = [](WorkerArraySpec s, const std::string& flag) {
    auto t = RenderWorkerArrayScript(s);
    ASSERT_FALSE(t.ok()) << flag;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(t.status().message().rfind(flag, 0), 0u) << t.status().message();
  };
  WorkerArraySpec s = Spec();
  s.log_dir = "/l";
  WorkerArraySpec bad = s;
  bad.partition = "gpu\n#SBATCH --account=other";
  refused(bad, "--partition");
  bad = s;
  bad.account = "a b";
  refused(bad, "--account");
  bad = s;
  bad.extra = {"constraint=x"};
  refused(bad, "--sbatch-arg");
  bad = s;
  bad.extra = {"--comment=$(reboot)"};
  refused(bad, "--sbatch-arg");
  bad = s;
  bad.workers = 0;
  refused(bad, "--workers");
  bad = s;
  bad.gpus_per_worker = 2;
  refused(bad, "--gpu");
  bad = s;
  bad.gres = "gpu:1";
  refused(bad, "--gres");
  bad = s;
  bad.log_dir = "relative/logs";
  refused(bad, "--dir");
  bad = s;
  bad.job_name = "../x";
  refused(bad, "--job-name");
}

TEST(SbatchScript, ShellQuote) {
  EXPECT_EQ(ShellQuote("tcp://host:5555"), "tcp://host:5555");
  EXPECT_EQ(ShellQuote("a b"), "'a b'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("$HOME"), "'$HOME'");
}

class FakeSbatch : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("nw-sbatch-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // A stand-in sbatch: a shell script with this body.
  std::string Write(const std::string& body) {
    const std::string path = (dir_ / "sbatch").string();
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(FakeSbatch, ParsableJobIdWithAndWithoutCluster) {
  // It must be called as `sbatch --parsable SCRIPT`.
  std::string sbatch = Write(
      "[ \"$1\" = --parsable ] && [ \"$2\" = /x/job.sbatch ] || exit 9\n"
      "echo 'sbatch: warning: a warning on stderr' >&2\necho 4242");
  auto id = SubmitBatchScript(sbatch, "/x/job.sbatch");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, "4242");
  sbatch = Write("echo '4243;cluster-b'");
  id = SubmitBatchScript(sbatch, "/x/job.sbatch");
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, "4243");
}

TEST_F(FakeSbatch, RefusalCarriesSbatchsMessage) {
  const std::string sbatch =
      Write("echo 'sbatch: error: invalid partition specified: nope' >&2\nexit 1");
  auto id = SubmitBatchScript(sbatch, "/x/job.sbatch");
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(id.status().message().find("invalid partition specified: nope"), std::string::npos);
  EXPECT_EQ(Write("echo 'Submitted batch job 5'").empty(), false);
  id = SubmitBatchScript((dir_ / "sbatch").string(), "/x/job.sbatch");
  EXPECT_EQ(id.status().code(), StatusCode::kInternal);  // not --parsable output
  id = SubmitBatchScript((dir_ / "no-such-sbatch").string(), "/x/job.sbatch");
  EXPECT_EQ(id.status().code(), StatusCode::kUnavailable);
}

TEST(SlurmEnv, FactsLabelAndPlacement) {
  std::map<std::string, std::string> env;
  auto lookup = [&env](const char* k) -> const char* {
    auto it = env.find(k);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  EXPECT_FALSE(SlurmFactsFromEnv(lookup).has_value());
  env = {{"SLURM_JOB_ID", "1236"},     {"SLURM_ARRAY_JOB_ID", "1234"},
         {"SLURM_ARRAY_TASK_ID", "2"}, {"SLURMD_NODENAME", "gpu-node7"},
         {"SLURM_RESTART_COUNT", "1"}, {"SLURM_JOB_PARTITION", "h200 x"}};  // not plain: dropped
  auto facts = SlurmFactsFromEnv(lookup);
  ASSERT_TRUE(facts);
  EXPECT_EQ((*facts)["node"], "gpu-node7");
  EXPECT_FALSE(facts->contains("partition"));
  EXPECT_EQ(SlurmJobLabel(*facts), "1234_2.r1");
  std::string job, node;
  SlurmPlacement(json{{"backends", {"cpu"}}, {"slurm", *facts}}, &job, &node);
  EXPECT_EQ(job, "1234_2.r1");
  EXPECT_EQ(node, "gpu-node7");
  // A plain job; and whatever a peer sends instead.
  SlurmPlacement(json{{"slurm", {{"job_id", "77"}, {"node", "n1"}}}}, &job, &node);
  EXPECT_EQ(job, "77");
  SlurmPlacement(json{{"slurm", {{"job_id", "7\x1b[2J"}, {"node", 5}}}}, &job, &node);
  EXPECT_EQ(job, "");
  EXPECT_EQ(node, "");
  SlurmPlacement(json{{"slurm", "x"}}, &job, &node);
  EXPECT_EQ(job, "");
  SlurmPlacement(json::array(), &job, &node);
  EXPECT_EQ(job, "");
}

}  // namespace
}  // namespace nw
