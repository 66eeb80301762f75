// task/job_prompt.h: a JobSpec's task fields become the NiahSpec every executor builds its prompt
// from (task, haystack, length, position, the design point's haystack seed); the prompt is the
// builder's for that spec, token for token; jobs that differ only in what a campaign compares
// read the same prompt; a bad task or haystack is refused with the parser's error.
#include "task/job_prompt.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace nw {
namespace {

JobSpec Job() {
  JobSpec j;
  j.task = "niah-multikey";
  j.haystack = "essay";
  j.context_length = 1301;
  j.needle_position = 0.25;
  j.seed = 11;
  j.trial = 3;
  j.topk = 16;
  j.backend = "cpu";
  return j;
}

Tokenizer TinyTokenizer() {
  Result<Tokenizer> t =
      Tokenizer::Load(std::filesystem::path(NW_TEST_DATA_DIR) / "tokenizer" / "gpt2_tiny.json");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : Tokenizer();
}

TEST(JobPromptTest, TheJobsTaskFieldsAndHaystackSeed) {
  const JobSpec j = Job();
  Result<NiahSpec> ns = NiahSpecForJob(j);
  ASSERT_TRUE(ns.ok()) << ns.status().ToString();
  EXPECT_EQ(ns->task, NiahTask::kMultikey);
  EXPECT_EQ(ns->haystack, NiahHaystack::kEssay);
  EXPECT_EQ(ns->context_length, 1301);
  EXPECT_EQ(ns->needle_position, 0.25);
  EXPECT_EQ(ns->seed, j.HaystackSeed());
  const NiahSpec defaults;
  EXPECT_EQ(ns->repeats, defaults.repeats);
  EXPECT_EQ(ns->distractors, defaults.distractors);
  EXPECT_EQ(ns->value_digits, defaults.value_digits);
}

TEST(JobPromptTest, ThePromptIsTheBuildersAndIgnoresWhatCampaignsCompare) {
  const Tokenizer tok = TinyTokenizer();
  const JobSpec j = Job();
  Result<NiahPrompt> p = BuildJobPrompt(tok, j);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Result<NiahPrompt> direct = BuildNiahPrompt(tok, NiahSpecForJob(j).value());
  ASSERT_TRUE(direct.ok()) << direct.status().ToString();
  EXPECT_EQ(p->tokens, direct->tokens);
  EXPECT_EQ(p->prompt_hash, direct->prompt_hash);
  EXPECT_EQ(p->expected, direct->expected);
  EXPECT_EQ(static_cast<int64_t>(p->tokens.size()), j.context_length);

  JobSpec other = j;  // another engine configuration at the same design point
  other.topk = 64;
  other.backend = "cpu-paged";
  other.max_new_tokens = 32;
  EXPECT_EQ(BuildJobPrompt(tok, other).value().prompt_hash, p->prompt_hash);
  JobSpec next = j;  // the next trial: another haystack
  next.trial = 4;
  EXPECT_NE(BuildJobPrompt(tok, next).value().prompt_hash, p->prompt_hash);
}

TEST(JobPromptTest, UnknownTaskOrHaystackIsRefused) {
  JobSpec j = Job();
  j.task = "niah-everything";
  Result<NiahSpec> t = NiahSpecForJob(j);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), ParseNiahTask("niah-everything").status().message());
  j = Job();
  j.haystack = "lava";
  Result<NiahPrompt> h = BuildJobPrompt(TinyTokenizer(), j);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().message(), ParseNiahHaystack("lava").status().message());
}

}  // namespace
}  // namespace nw
