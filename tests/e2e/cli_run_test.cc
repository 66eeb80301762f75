// End to end through the real `nw` binary: a random-weight V4 checkpoint, a small campaign run by
// the embedded coordinator and workers over ZeroMQ into a real SQLite file, the report, re-runs,
// and bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "db/store.h"
#include "tests/support/shell.h"

namespace nw {
namespace {

namespace fs = std::filesystem;

using test_support::CommandResult;
using test_support::Sh;

class CliRunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_.emplace(fs::temp_directory_path() / ("nw-e2e-" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    const std::string init = std::string(NW_BIN) + " model init --config " + NW_SOURCE_DIR +
                             "/models/configs/tiny-a.json --seed 7 " + (*dir_ / "model").string();
    CommandResult r = Sh(init);
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    dir_.reset();
  }

  static fs::path WriteCampaign(const std::string& name, const std::string& body) {
    fs::path p = *dir_ / (name + ".yaml");
    std::ofstream(p) << "name: " << name << "\nmodel: model\n" << body;
    return p;
  }
  static std::string Nw(const std::string& args) {
    return std::string(NW_BIN) + " --db " + (*dir_ / "nw.db").string() + " " + args;
  }

  static inline std::optional<fs::path> dir_;
};

TEST_F(CliRunTest, RunsACampaignIntoTheDatabaseAndReports) {
  fs::path c = WriteCampaign("small", R"(task: niah-single
haystack: noise
matrix:
  context_length: [160, 300]
  needle_position: [0.0, 0.9]
  topk: 16
  precision: fp32
  backend: [cpu, cpu-paged]
trials: 1
generation: {max_new_tokens: 6}
probe: true
)");
  CommandResult r = Sh(Nw("run --workers 2 " + c.string()));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("heatmap"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("backend=cpu-paged"), std::string::npos) << r.out;

  auto store = Store::Open(*dir_ / "nw.db", Store::Mode::kReadOnly);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto campaign = (*store)->FindCampaign("small");
  ASSERT_TRUE(campaign.ok() && campaign->has_value());
  auto progress = (*store)->Progress((*campaign)->id);
  ASSERT_TRUE(progress.ok());
  EXPECT_EQ(progress->total, 8);
  EXPECT_EQ(progress->done, 8);
  EXPECT_EQ(progress->pass + progress->miss + progress->other, 8);
  auto results = (*store)->Results((*campaign)->id);
  ASSERT_TRUE(results.ok());
  ASSERT_EQ(results->size(), 8u);
  for (const JobResult& res : *results) {
    EXPECT_TRUE(IsAnswerOutcome(res.outcome) || res.outcome == Outcome::kEmpty ||
                res.outcome == Outcome::kTruncated)
        << OutcomeName(res.outcome) << " " << res.error_message;
    EXPECT_GE(res.prompt_tokens, 160);
    EXPECT_EQ(res.prompt_hash.size(), 64u);
    EXPECT_EQ(res.device, "cpu");
    ASSERT_EQ(res.probes.size(), 1u);  // tiny-a has one ratio-4 (indexer) layer
    EXPECT_EQ(res.probes[0].layer, 1);
  }

  // The contiguous and paged CPU backends must give identical answers for identical jobs.
  std::map<std::string, std::string> by_prompt;
  for (const JobResult& res : *results) {
    auto [it, inserted] = by_prompt.emplace(res.prompt_hash, res.generated_text);
    if (!inserted) {
      EXPECT_EQ(it->second, res.generated_text) << "prompt " << res.prompt_hash;
    }
  }

  // Running the same campaign again reuses every finished job.
  CommandResult again = Sh(Nw("run " + c.string()));
  ASSERT_EQ(again.exit_code, 0) << again.out;
  EXPECT_NE(again.out.find("8 already done"), std::string::npos) << again.out;
  auto results2 = (*store)->Results((*campaign)->id);
  ASSERT_TRUE(results2.ok());
  EXPECT_EQ(results2->size(), 8u);

  CommandResult plan = Sh(Nw("plan " + c.string()));
  ASSERT_EQ(plan.exit_code, 0) << plan.out;
  EXPECT_NE(plan.out.find("already done in"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("to run: 0"), std::string::npos) << plan.out;

  CommandResult status = Sh(Nw("status small"));
  ASSERT_EQ(status.exit_code, 0) << status.out;
  EXPECT_NE(status.out.find("small"), std::string::npos);

  CommandResult json = Sh(Nw("report small --format json"));
  ASSERT_EQ(json.exit_code, 0) << json.out;
  auto j = nlohmann::json::parse(json.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << json.out;
}

TEST_F(CliRunTest, SharedJobsAreNotRunTwiceAcrossCampaigns) {
  const std::string body = R"(task: niah-single
haystack: essay
matrix:
  context_length: 200
  needle_position: [0.5]
  topk: 16
  precision: fp32
  backend: cpu
trials: 1
generation: {max_new_tokens: 4}
)";
  fs::path a = WriteCampaign("share-a", body);
  fs::path b = WriteCampaign("share-b", body);
  ASSERT_EQ(Sh(Nw("-q run " + a.string())).exit_code, 0);
  CommandResult rb = Sh(Nw("run " + b.string()));
  ASSERT_EQ(rb.exit_code, 0) << rb.out;
  EXPECT_NE(rb.out.find("1 already done"), std::string::npos) << rb.out;
}

TEST_F(CliRunTest, PlanSaysASearchRunsOnlyPartOfTheGrid) {
  const std::string grid = R"(task: niah-single
haystack: noise
matrix:
  context_length: [256, 512, 1024]
  needle_position: [0.5]
  topk: 16
  precision: fp32
  backend: cpu
trials: 2
)";
  CommandResult plain = Sh(Nw("plan " + WriteCampaign("grid", grid).string()));
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  EXPECT_NE(plain.out.find("6 jobs = 3 cells x 2 trials"), std::string::npos) << plain.out;
  EXPECT_EQ(plain.out.find("boundary search"), std::string::npos) << plain.out;
  CommandResult search = Sh(Nw(
      "plan " + WriteCampaign("search", grid + "search: {boundary: {first_trials: 1, budget: 4}}\n")
                    .string()));
  ASSERT_EQ(search.exit_code, 0) << search.out;
  EXPECT_NE(search.out.find("boundary search (first_trials 1, confidence 0.95, budget 4 jobs per "
                            "line): nw run runs only the grid jobs the search asks for"),
            std::string::npos)
      << search.out;
}

TEST_F(CliRunTest, CudaBackendsWithoutAGpuAreNotedAndRefusedByRun) {
  // This build has no usable cuda backend unless it is a CUDA build on a GPU machine.
  const std::string available = Sh(std::string(NW_BIN) + " version").out;
  CommandResult v0 = Sh(Nw("validate " + WriteCampaign("gpu-probe", R"(task: niah-single
haystack: noise
matrix:
  context_length: [256]
  needle_position: [0.5]
  topk: 16
  precision: fp32
  backend: [cpu, cuda]
trials: 1
)")
                                             .string()));
  ASSERT_EQ(v0.exit_code, 0) << v0.out;
  if (v0.out.find("note: backend cuda is not available here") == std::string::npos) {
    GTEST_SKIP() << "this build and machine run the cuda backend: " << available;
  }
  EXPECT_NE(v0.out.find("these jobs need a GPU worker (nw worker --gpu N) on a machine with one"),
            std::string::npos)
      << v0.out;
  EXPECT_EQ(v0.out.find("note: backend cpu "), std::string::npos) << v0.out;
  fs::path c = *dir_ / "gpu-probe.yaml";
  CommandResult plan = Sh(Nw("plan " + c.string()));
  ASSERT_EQ(plan.exit_code, 0) << plan.out;
  EXPECT_NE(plan.out.find("note: backend cuda is not available here"), std::string::npos)
      << plan.out;
  EXPECT_NE(plan.out.find("2 jobs = 2 cells x 1 trials"), std::string::npos) << plan.out;
  CommandResult run = Sh(Nw("run " + c.string()));
  EXPECT_EQ(run.exit_code, 2) << run.out;
  EXPECT_NE(run.out.find("nw run: backend cuda is not available here"), std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("nw worker --gpu N"), std::string::npos) << run.out;
  // Refused up front: nothing was written for the campaign.
  auto store = Store::Open(*dir_ / "nw.db", Store::Mode::kReadOnly);
  if (store.ok()) {
    auto campaign = (*store)->FindCampaign("gpu-probe");
    ASSERT_TRUE(campaign.ok());
    EXPECT_FALSE(campaign->has_value());
  }
  // nw serve names the backend and why it cannot run it, before reading the model.
  CommandResult serve =
      Sh(std::string(NW_BIN) + " serve --model " + (*dir_ / "model").string() + " --backend cuda");
  EXPECT_EQ(serve.exit_code, 2) << serve.out;
  EXPECT_NE(serve.out.find("backend 'cuda' needs"), std::string::npos) << serve.out;
  // A CPU-only campaign gets no note.
  CommandResult cpu = Sh(Nw("validate " + WriteCampaign("cpu-only", R"(task: niah-single
haystack: noise
matrix:
  context_length: [256]
  needle_position: [0.5]
  topk: 16
  precision: fp32
  backend: [cpu, cpu-pd]
trials: 1
)")
                                              .string()));
  ASSERT_EQ(cpu.exit_code, 0) << cpu.out;
  EXPECT_EQ(cpu.out.find("note:"), std::string::npos) << cpu.out;
}

TEST_F(CliRunTest, BadCampaignsAreRejectedWithFileLineAndColumn) {
  fs::path c = WriteCampaign("bad", R"(task: niah-single
haystack: noise
matrix:
  context_length: [256]
  needle_position: [0.5]
  topk: 0
  precision: fp32
  backend: cpu
)");
  for (const std::string verb : {"validate", "plan", "run"}) {
    CommandResult r = Sh(Nw(verb + " " + c.string()));
    EXPECT_EQ(r.exit_code, 2) << verb << ": " << r.out;
    EXPECT_NE(r.out.find("bad.yaml:8:"), std::string::npos) << verb << ": " << r.out;
    EXPECT_NE(r.out.find("topk"), std::string::npos) << verb << ": " << r.out;
  }
  // Nothing was written for the bad campaign.
  auto store = Store::Open(*dir_ / "nw.db", Store::Mode::kReadOnly);
  if (store.ok()) {
    auto campaign = (*store)->FindCampaign("bad");
    ASSERT_TRUE(campaign.ok());
    EXPECT_FALSE(campaign->has_value());
  }
}

TEST_F(CliRunTest, JobsTheEngineCannotRunEndAsEngineErrorsAndAFailingExitCode) {
  // The needle 40 tokens from the end of a prompt leaves no room for the question: the worker's
  // prompt builder rejects the job; the run records engine_error, never a miss.
  fs::path c = WriteCampaign("noroom", R"(task: niah-single
haystack: noise
matrix:
  context_length: [300]
  needle_position: [-5]
  topk: 16
  precision: fp32
  backend: cpu
trials: 1
)");
  CommandResult r = Sh(Nw("run " + c.string()));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("engine_error 1"), std::string::npos) << r.out;
}

TEST_F(CliRunTest, HelpOnEverySubcommand) {
  for (const std::string sub :
       {"", "run", "validate", "plan", "status", "report", "model init", "data niah", "version"}) {
    CommandResult r = Sh(std::string(NW_BIN) + " " + sub + " --help");
    EXPECT_EQ(r.exit_code, 0) << sub << ": " << r.out;
    EXPECT_NE(r.out.find("Usage:"), std::string::npos) << sub;
  }
}

// An http server that is down: every attempt is refused, the jobs end failed after their
// retries, never pending, and both the report and nw run's closing message say why (issue 14).
TEST_F(CliRunTest, AServerThatIsDownEndsFailedWithItsReason) {
  fs::path c = WriteCampaign("down", R"(matrix:
  context_length: [300]
  needle_position: [0.5]
  topk: 16
  backend: {http: {url: 'http://127.0.0.1:9', model: tiny, retries: 0, health_path: ''}}
trials: 2
)");
  CommandResult r = Sh(Nw("run " + c.string()));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("jobs: 2 total, 0 done, 2 failed, 0 leased, 0 queued"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("backend=http:tiny@http://127.0.0.1:9 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("without an answer: 2 failed (retries used up): unavailable: "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("- f2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 jobs ended without an answer (failed after their retries, "
                       "engine_error or timeout):\n  2 failed (retries used up): unavailable: "),
            std::string::npos)
      << r.out;
  // "pending" only in the legend.
  EXPECT_EQ(r.out.find("pending"), r.out.find("pN = N jobs pending") + 12) << r.out;

  CommandResult j = Sh(Nw("report down --format json"));
  ASSERT_EQ(j.exit_code, 0) << j.out;
  const auto report = nlohmann::json::parse(j.out);
  EXPECT_EQ(report["progress"]["failed"], 2);
  EXPECT_EQ(report["configs"][0]["totals"]["pending"], 0);
  EXPECT_EQ(report["configs"][0]["totals"]["failed"], 2);
  ASSERT_EQ(report["failures"].size(), 1u);
  EXPECT_EQ(report["failures"][0]["kind"], "failed");
  EXPECT_NE(report["failures"][0]["reason"].get<std::string>().find("127.0.0.1:9"),
            std::string::npos)
      << j.out;
}

// Worker ids and devices come from peers: `nw status` prints their control bytes escaped, so a
// registered id cannot move the terminal's cursor or forge a line (issue 19).
TEST_F(CliRunTest, StatusEscapesPeerStrings) {
  const fs::path db = *dir_ / "peer-strings.db";
  {
    auto store = Store::Open(db);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    WorkerRecord w;
    w.id = "evil\ncampaign FAKE\x1b[2J";
    w.host = "h";
    w.device = "cpu\x1b[31m";
    w.capabilities = nlohmann::json::object();
    w.state = "active";
    ASSERT_TRUE((*store)->UpsertWorker(w).ok());
  }
  CommandResult r = Sh(std::string(NW_BIN) + " --db " + db.string() + " status");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("evil\\x0acampaign FAKE\\x1b[2J"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cpu\\x1b[31m"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
}

}  // namespace
}  // namespace nw
