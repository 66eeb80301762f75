// `nw diff` through the binary (docs/diff.md): exit 0 for a configuration against itself, 1 for a
// fault (naming the first diverging layer and component), 2 for bad input naming the field; every
// output format.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/shell.h"

namespace nw {
namespace {

using test_support::CommandResult;

CommandResult Nw(const std::string& args) {
  return test_support::Sh(std::string(NW_BIN) + " diff --model " + NW_SOURCE_DIR +
                          "/models/tiny-v4 --length 200 --steps 4 --topk 16 " + args);
}

TEST(DiffCliTest, SameConfigurationExitsZero) {
  const CommandResult r = Nw("--a backend=cpu --b backend=cpu-paged");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("first divergence: no divergence within the thresholds"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("verdict: SAME (exit 0)"), std::string::npos) << r.out;
}

TEST(DiffCliTest, AFaultExitsOneNamingWhereTheyPart) {
  const CommandResult r = Nw("--b fault=compressed-kv-no-rope --format json");
  ASSERT_EQ(r.exit_code, 1) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["verdict"], "different");
  EXPECT_EQ(j["first_divergence"]["layer"], 1);
  EXPECT_EQ(j["first_divergence"]["component"], "attn");
  EXPECT_EQ(j["b"]["fault"], "compressed-kv-no-rope");
  EXPECT_EQ(j["layers"].size(), 4u);

  const CommandResult md = Nw("--b fault=indexer-rope-layout --format markdown");
  EXPECT_EQ(md.exit_code, 1) << md.out;
  EXPECT_NE(md.out.find("| layer | ratio |"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("first divergence: layer 1 indexer"), std::string::npos) << md.out;
}

TEST(DiffCliTest, BadInputExitsTwoNamingTheField) {
  CommandResult r = Nw("--b fault=pd-handoff-loses-state");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("B: fault"), std::string::npos) << r.out;
  r = Nw("--b precision=fp7");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("B: precision"), std::string::npos) << r.out;
  r = Nw("--format yaml");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--format"), std::string::npos) << r.out;
  r = Nw("--prompts /nonexistent/prompts.json");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("/nonexistent/prompts.json"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace nw
