// The documentation against the real `nw` binary (issue 14): the README names every subcommand
// and every doc and says what needs a GPU; every subcommand's --help lists the global options;
// the README's sample campaign validates and expands as it says; and a curated list of the
// commands written in README.md and docs/ that run on the CPU in reasonable time are run as
// written (each must still appear verbatim in its doc), with the exit codes and output the docs
// claim. Commands run in a scratch directory whose experiments/ and models/ link to the source
// tree, against a scratch database, so nothing is written into the checkout.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/support/shell.h"
#include "tests/support/temp_dir.h"

namespace nw {
namespace {

namespace fs = std::filesystem;

using test_support::CommandResult;
using test_support::Sh;

const fs::path kSource = NW_SOURCE_DIR;

// The subcommands `nw --help` lists (CLI11's "Subcommands:" section).
std::vector<std::string> Subcommands(const std::string& help) {
  std::vector<std::string> out;
  const size_t at = help.find("Subcommands:\n");
  if (at == std::string::npos) return out;
  const std::regex line(R"(^  ([a-z][a-z0-9-]*)\s)");
  size_t pos = at + 13;
  while (pos < help.size()) {
    const size_t end = help.find('\n', pos);
    const std::string l =
        help.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    std::smatch m;
    if (!std::regex_search(l, m, line)) break;
    out.push_back(m[1]);
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return out;
}

TEST(DocsTest, ReadmeNamesEverySubcommandEveryDocAndWhatNeedsAGpu) {
  const std::string readme = test_support::ReadFileText(kSource / "README.md");
  ASSERT_FALSE(readme.empty());
  CommandResult help = Sh(std::string(NW_BIN) + " --help");
  ASSERT_EQ(help.exit_code, 0) << help.out;
  const std::vector<std::string> subs = Subcommands(help.out);
  ASSERT_GE(subs.size(), 20u) << help.out;
  for (const std::string& sub : subs) {
    EXPECT_NE(readme.find("`nw " + sub), std::string::npos) << "README.md does not name nw " << sub;
  }
  for (const std::string nested :
       {"baseline set", "baseline list", "baseline rm", "model init", "data niah"}) {
    EXPECT_NE(readme.find("nw " + nested), std::string::npos) << nested;
  }
  for (const auto& entry : fs::directory_iterator(kSource / "docs")) {
    if (entry.path().extension() != ".md") continue;
    const std::string link = "(docs/" + entry.path().filename().string() + ")";
    EXPECT_NE(readme.find(link), std::string::npos) << "README.md does not link " << link;
  }
  EXPECT_NE(readme.find("## What needs a GPU"), std::string::npos);
}

TEST(DocsTest, EverySubcommandHelpListsTheGlobalOptions) {
  CommandResult help = Sh(std::string(NW_BIN) + " --help");
  ASSERT_EQ(help.exit_code, 0);
  std::vector<std::string> subs = Subcommands(help.out);
  for (const std::string nested :
       {"baseline set", "baseline list", "baseline rm", "model init", "data niah"}) {
    subs.push_back(nested);
  }
  for (const std::string& sub : subs) {
    CommandResult r = Sh(std::string(NW_BIN) + " " + sub + " --help");
    EXPECT_EQ(r.exit_code, 0) << sub << ": " << r.out;
    EXPECT_NE(r.out.find("Global options"), std::string::npos) << sub << ": " << r.out;
    EXPECT_NE(r.out.find("--db FILE"), std::string::npos) << sub;
    EXPECT_NE(r.out.find("-q,--quiet"), std::string::npos) << sub;
    EXPECT_NE(r.out.find("NO_COLOR"), std::string::npos) << sub;
  }
}

// The scratch directory: experiments/ and models/ link to the checkout, so relative paths in
// the docs resolve as they do from its root.
class DocCommandsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("nw-docs-" + std::to_string(getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    fs::create_directory_symlink(kSource / "experiments", *dir_ / "experiments");
    fs::create_directory_symlink(kSource / "models", *dir_ / "models");
    fs::create_directories(*dir_ / "experiments-qs");
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
  }

  // Runs a documented command line: `build/cli/nw` and a leading `nw` become this build's
  // binary with the scratch database, /tmp/ paths move into the scratch directory, and
  // `sqlite3 needlework.db` reads the scratch database.
  static CommandResult RunDocumented(std::string line) {
    const std::string nw = std::string(NW_BIN) + " --db " + (*dir_ / "needlework.db").string();
    auto replace_all = [&line](const std::string& from, const std::string& to) {
      for (size_t p = line.find(from); p != std::string::npos; p = line.find(from, p + to.size())) {
        line.replace(p, from.size(), to);
      }
    };
    replace_all(" /tmp/", " " + dir_->string() + "/tmp-");  // first: the scratch dir is in /tmp
    replace_all("build/cli/nw ", nw + " ");
    if (line.rfind("nw ", 0) == 0) line = nw + line.substr(2);
    replace_all("sqlite3 needlework.db", "sqlite3 " + (*dir_ / "needlework.db").string());
    return Sh("cd " + dir_->string() + " && " + line);
  }

  static inline fs::path* dir_ = nullptr;
};

struct DocCommand {
  const char* doc;     // where the command is written (relative to the source tree)
  const char* line;    // as written there (before any trailing # comment)
  int exit_code;       // what the docs say it exits with
  const char* expect;  // a piece of its output the docs promise ("" for none)
};

// In order: later commands read what earlier ones wrote.
const DocCommand kCommands[] = {
    {"README.md", "build/cli/nw validate experiments/needle-sweep.yaml", 0,
     "ok: campaign 'needle-sweep'"},
    {"README.md", "build/cli/nw plan experiments/needle-sweep.yaml", 0, "to run: "},
    {"README.md", "build/cli/nw model init --config models/configs/tiny-a.json --seed 1 /tmp/tiny",
     0, ""},
    {"README.md",
     "build/cli/nw data niah --tokenizer models/tiny-v4/tokenizer.json --out /tmp/data --count "
     "1000",
     0, ""},
    {"README.md", "build/cli/nw run experiments/quickstart.yaml", 0, "campaign quickstart"},
    {"README.md", "build/cli/nw status", 0, "quickstart"},
    {"README.md", "build/cli/nw report quickstart --format markdown", 0, "# Campaign `quickstart`"},
    {"docs/reports.md", "nw report quickstart --format html > quickstart.html", 0, ""},
    {"docs/reports.md", "nw export quickstart --format jsonl --out quickstart.jsonl", 0, ""},
    {"docs/gating.md", "nw baseline set release-1 quickstart --note \"v1.0 tag\"", 0,
     "baseline 'release-1' = campaign 'quickstart': 50 jobs, 50 with results"},
    {"docs/gating.md", "nw baseline list", 0, "release-1"},
    {"docs/gating.md", "nw baseline set release-1 quickstart", 2, "needs --replace"},
    {"docs/gating.md", "nw baseline set release-1 quickstart --replace", 0, "release-1"},
    {"docs/gating.md", "nw baseline set quickstart quickstart", 2, "a campaign's name"},
    {"docs/gating.md", "nw baseline rm release-1", 0, "removed"},
};

TEST_F(DocCommandsTest, DocumentedCommandsRunAsDocumented) {
  for (const DocCommand& c : kCommands) {
    SCOPED_TRACE(std::string(c.doc) + ": " + c.line);
    const std::string doc = test_support::ReadFileText(kSource / c.doc);
    ASSERT_NE(doc.find(c.line), std::string::npos) << "no longer written in " << c.doc;
    CommandResult r = RunDocumented(c.line);
    EXPECT_EQ(r.exit_code, c.exit_code) << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << r.out;
  }
  // What the redirected and --out commands wrote.
  EXPECT_EQ(test_support::ReadFileText(*dir_ / "quickstart.html").rfind("<!DOCTYPE html>", 0), 0u);
  std::ifstream jsonl(*dir_ / "quickstart.jsonl");
  int lines = 0;
  for (std::string l; std::getline(jsonl, l);) {
    EXPECT_TRUE(nlohmann::json::accept(l)) << l;
    ++lines;
  }
  EXPECT_EQ(lines, 50);
  // Every result is plain SQL (README), where the sqlite3 shell is installed.
  if (Sh("command -v sqlite3").exit_code == 0) {
    const char* line = "sqlite3 needlework.db 'SELECT * FROM v_boundary'";
    ASSERT_NE(test_support::ReadFileText(kSource / "README.md").find(line), std::string::npos);
    CommandResult r = RunDocumented(line);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("topk=64 precision=fp32 backend=cpu"), std::string::npos) << r.out;
  }
}

// The README's sample campaign: it validates (with its model path resolved as in experiments/)
// and expands to what docs/campaigns.md says of the same grid (4 lengths x 5 positions = 20
// cells, 40 jobs at 2 trials).
TEST_F(DocCommandsTest, TheReadmeSampleCampaignValidatesAndExpandsAsDescribed) {
  const std::string readme = test_support::ReadFileText(kSource / "README.md");
  const size_t start = readme.find("```yaml\nname: quickstart\n");
  ASSERT_NE(start, std::string::npos);
  const size_t body = start + 8;
  const size_t end = readme.find("```", body);
  ASSERT_NE(end, std::string::npos);
  const fs::path file = *dir_ / "experiments-sample.yaml";
  // model: ../models/tiny-v4 is relative to experiments/; from the scratch root it is
  // models/tiny-v4.
  std::string yaml = readme.substr(body, end - body);
  const size_t m = yaml.find("../models/tiny-v4");
  ASSERT_NE(m, std::string::npos);
  yaml.replace(m, 3, "");
  std::ofstream(file) << yaml;
  CommandResult v = Sh(std::string(NW_BIN) + " validate " + file.string());
  EXPECT_EQ(v.exit_code, 0) << v.out;
  CommandResult p = Sh(std::string(NW_BIN) + " --db " + (*dir_ / "sample.db").string() + " plan " +
                       file.string());
  EXPECT_EQ(p.exit_code, 0) << p.out;
  EXPECT_NE(p.out.find("40 jobs = 20 cells x 2 trials"), std::string::npos) << p.out;
}

// docs/http.md's example of an http campaign that sweeps topk without engine_params: refused
// with exit 2 and exactly the message the doc shows.
TEST_F(DocCommandsTest, TheHttpSweepRefusalIsAsDocumented) {
  const std::string doc = test_support::ReadFileText(kSource / "docs/http.md");
  const size_t start = doc.find("```yaml\nname: sweep\n");
  ASSERT_NE(start, std::string::npos);
  const size_t body = start + 8;
  const size_t end = doc.find("```", body);
  ASSERT_NE(end, std::string::npos);
  std::string yaml = doc.substr(body, end - body);
  const size_t m = yaml.find("../models/tiny-v4");
  ASSERT_NE(m, std::string::npos);
  yaml.replace(m, 3, "");  // from the scratch root, as from experiments/
  std::ofstream(*dir_ / "sweep.yaml") << yaml;
  CommandResult r = RunDocumented("nw validate sweep.yaml");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  ASSERT_FALSE(r.out.empty());
  std::string message = r.out;
  while (!message.empty() && message.back() == '\n') message.pop_back();
  EXPECT_NE(doc.find("```\n" + message + "\n```"), std::string::npos) << message;
}

// docs/gating.md section 9, the gate's worked example: three quickstart runs (top-k 64, 8, 1)
// and the gates with the exit codes the doc states, plus the answer counts it quotes. About seven
// minutes of CPU, so it runs only when NW_SLOW_DOCS is set (`NW_SLOW_DOCS=1 ctest -R
// GatesWorkedExample`).
TEST_F(DocCommandsTest, GatesWorkedExample) {
  if (std::getenv("NW_SLOW_DOCS") == nullptr) GTEST_SKIP() << "set NW_SLOW_DOCS=1 to run";
  const std::string doc = test_support::ReadFileText(kSource / "docs/gating.md");
  const std::string quickstart =
      test_support::ReadFileText(kSource / "experiments/quickstart.yaml");
  for (const std::string topk : {"64", "8", "1"}) {
    std::string yaml = quickstart;
    const std::string name = "name: quickstart", k = "  topk: 64";
    yaml.replace(yaml.find(name), name.size(), "name: qs-topk" + topk);
    yaml.replace(yaml.find(k), k.size(), "  topk: " + topk);
    std::ofstream(*dir_ / "experiments-qs" / ("qs-topk" + topk + ".yaml")) << yaml;
  }
  // The campaigns' model path, ../models/tiny-v4, from experiments-qs/.
  ASSERT_TRUE(fs::exists(*dir_ / "experiments-qs" / "qs-topk64.yaml"));
  const std::string run = "nw run qs-topk64.yaml && nw run qs-topk8.yaml && nw run qs-topk1.yaml";
  ASSERT_NE(doc.find(run), std::string::npos);
  const std::string nw = std::string(NW_BIN) + " --db " + (*dir_ / "gate.db").string();
  for (const std::string topk : {"64", "8", "1"}) {
    CommandResult r = Sh("cd " + (*dir_ / "experiments-qs").string() + " && " + nw +
                         " run qs-topk" + topk + ".yaml");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    const std::string counts = topk == "64"  ? "outcomes: pass 50, miss 0,"
                               : topk == "8" ? "outcomes: pass 50, miss 0,"
                                             : "outcomes: pass 48, miss 2,";
    EXPECT_NE(r.out.find(counts), std::string::npos) << r.out;
  }
  const std::vector<std::pair<std::string, int>> gates = {
      {"nw baseline set release-1 qs-topk64", 0},
      {"nw gate --baseline release-1 --candidate qs-topk8            # exit 0", 0},
      {"nw gate --baseline release-1 --candidate qs-topk1            # exit 0", 0},
      {"nw gate --baseline release-1 --candidate qs-topk1 --by config            # exit 0", 0},
      {"nw gate --baseline release-1 --candidate qs-topk1 --by config --rerun 2  # exit 0", 0},
  };
  for (const auto& [line, code] : gates) {
    SCOPED_TRACE(line);
    ASSERT_NE(doc.find(line), std::string::npos);
    CommandResult r =
        Sh(nw + line.substr(2, line.find('#') == std::string::npos ? std::string::npos
                                                                   : line.find('#') - 2));
    EXPECT_EQ(r.exit_code, code) << r.out;
  }
}

}  // namespace
}  // namespace nw
