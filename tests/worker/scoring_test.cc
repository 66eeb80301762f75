#include "task/scoring.h"

#include <gtest/gtest.h>

namespace nw {
namespace {

Outcome Score(std::string_view gen, std::string_view expected, bool stopped) {
  return ScoreAnswer({gen, expected, stopped});
}

TEST(ScoringTest, PassWhenTheValueAppearsOnTheAnswerLine) {
  EXPECT_EQ(Score(" 7391024.", "7391024", true), Outcome::kPass);
  EXPECT_EQ(Score("\n7391024\nmore", "7391024", true), Outcome::kPass);
  EXPECT_EQ(Score("is 7391024 indeed", "7391024", false), Outcome::kPass);
}

TEST(ScoringTest, ValueOnALaterLineDoesNotCount) {
  EXPECT_EQ(Score("I do not know\n7391024", "7391024", true), Outcome::kMiss);
}

TEST(ScoringTest, EmptyAnswers) {
  EXPECT_EQ(Score("", "7391024", true), Outcome::kEmpty);
  EXPECT_EQ(Score("  \n\n  ", "7391024", true), Outcome::kEmpty);
}

TEST(ScoringTest, TruncatedOnlyWhenTokensRanOutMidValue) {
  EXPECT_EQ(Score(" 73910", "7391024", false), Outcome::kTruncated);
  // The same text ended by a stop token is a wrong answer, not a truncation.
  EXPECT_EQ(Score(" 73910", "7391024", true), Outcome::kMiss);
  // A wrong value that ran out of tokens is still a miss.
  EXPECT_EQ(Score(" 12345", "7391024", false), Outcome::kMiss);
}

TEST(ScoringTest, NearMissesAreMisses) {
  EXPECT_EQ(Score("7391025", "7391024", true), Outcome::kMiss);
  EXPECT_EQ(Score("739102", "7391024", true), Outcome::kMiss);
}

TEST(ScoringTest, AnswerSpanTrims) {
  EXPECT_EQ(AnswerSpan("\n  42 \nx"), "42");
  EXPECT_EQ(AnswerSpan(""), "");
}

}  // namespace
}  // namespace nw
