// The campaign's `search:` key (adaptive boundary search, docs/campaigns.md "Boundary search").
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "coordinator/campaign/campaign.h"

namespace nw {
namespace {

using ::testing::HasSubstr;

std::string Yaml(const std::string& extra) {
  return "name: t\nmodel: /models/tiny\nmatrix:\n"
         "  context_length: {geometric: {from: 256, to: 8192, factor: 2}}\n"
         "  needle_position: [0.0, 1.0]\n"
         "  topk: 16\n"
         "trials: 8\n" +
         extra;
}

std::string ParseError(const std::string& text) {
  auto c = ParseCampaignText(text, "t.yaml");
  EXPECT_FALSE(c.ok()) << "parsed, but should not have:\n" << text;
  if (c.ok()) return "";
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  return c.status().message();
}

TEST(CampaignSearchTest, AbsentMeansTheGrid) {
  auto c = ParseCampaignText(Yaml(""), "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->search.has_value());
}

TEST(CampaignSearchTest, DefaultsAndValues) {
  auto d = ParseCampaignText(Yaml("search: {boundary: {}}\n"), "t.yaml");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_TRUE(d->search.has_value());
  EXPECT_EQ(d->search->first_trials, 1);
  EXPECT_DOUBLE_EQ(d->search->confidence, 0.95);
  EXPECT_FALSE(d->search->budget.has_value());
  EXPECT_EQ(d->search->where.line, 8);

  auto c = ParseCampaignText(
      Yaml("search:\n  boundary: {first_trials: 2, confidence: 0.9, budget: 30}\n"), "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->search->first_trials, 2);
  EXPECT_DOUBLE_EQ(c->search->confidence, 0.9);
  EXPECT_EQ(c->search->budget, 30);
  // The plan is still the whole grid: the search chooses among its jobs.
  EXPECT_EQ(c->job_count(), 6 * 2 * 8);
}

TEST(CampaignSearchTest, Errors) {
  EXPECT_THAT(ParseError(Yaml("search: {boundary: {first_trials: 9}}\n")),
              HasSubstr("t.yaml:8:35: search.boundary.first_trials: first_trials 9 is more than "
                        "the campaign's 8 trials"));
  EXPECT_THAT(ParseError(Yaml("search: {boundary: {first_trials: 0}}\n")),
              HasSubstr("search.boundary.first_trials: must be >= 1"));
  EXPECT_THAT(ParseError(Yaml("search: {boundary: {confidence: 1}}\n")),
              HasSubstr("search.boundary.confidence: must be at least 0.5 and less than 1"));
  EXPECT_THAT(ParseError(Yaml("search: {boundary: {confidence: 0.3}}\n")),
              HasSubstr("must be at least 0.5"));
  EXPECT_THAT(ParseError(Yaml("search: {boundary: {budget: 0}}\n")),
              HasSubstr("search.boundary.budget: must be >= 1"));
  EXPECT_THAT(ParseError(Yaml("search: {boundary: {trials: 2}}\n")),
              HasSubstr("unknown key 'trials'"));
  EXPECT_THAT(ParseError(Yaml("search: {boundry: {}}\n")),
              HasSubstr("unknown key 'boundry'; did you mean 'boundary'?"));
  EXPECT_THAT(ParseError(Yaml("search: {}\n")), HasSubstr("search: must name a search"));
  EXPECT_THAT(ParseError(Yaml("search: boundary\n")), HasSubstr("search: must be a map"));
}

}  // namespace
}  // namespace nw

// ---- criterion: (docs/campaigns.md "Criterion") ----

namespace nw {
namespace {

TEST(CampaignCriterionTest, DefaultsValuesAndTheSearch) {
  auto d = ParseCampaignText(Yaml(""), "t.yaml");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->criterion_stated);
  EXPECT_DOUBLE_EQ(d->criterion.pass_rate, 0.9);
  EXPECT_DOUBLE_EQ(d->criterion.confidence, 0.95);

  auto c = ParseCampaignText(
      Yaml("criterion: {pass_rate: 0.8, confidence: 0.9}\nsearch: {boundary: {}}\n"), "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->criterion_stated);
  EXPECT_DOUBLE_EQ(c->criterion.pass_rate, 0.8);
  EXPECT_DOUBLE_EQ(c->criterion.confidence, 0.9);
  EXPECT_EQ(c->criterion_where.line, 8);
  // The search decides with the campaign's criterion.
  EXPECT_DOUBLE_EQ(c->search->pass_rate, 0.8);
  EXPECT_DOUBLE_EQ(c->search->confidence, 0.9);

  // An old file's search confidence still sets the confidence when there is no criterion.
  auto old = ParseCampaignText(Yaml("search: {boundary: {confidence: 0.99}}\n"), "t.yaml");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_DOUBLE_EQ(old->criterion.confidence, 0.99);
  EXPECT_DOUBLE_EQ(old->search->pass_rate, 0.9);

  // Only the criterion, from stored text, whatever else the file holds.
  auto only =
      ParseCampaignCriterion("name: x\nfuture_key: 1\ncriterion: {pass_rate: 0.75}\n", "x.yaml");
  ASSERT_TRUE(only.ok()) << only.status().ToString();
  EXPECT_DOUBLE_EQ(only->pass_rate, 0.75);
  EXPECT_DOUBLE_EQ(only->confidence, 0.95);
  auto none = ParseCampaignCriterion("name: x\n", "x.yaml");
  ASSERT_TRUE(none.ok());
  EXPECT_DOUBLE_EQ(none->pass_rate, 0.9);
}

TEST(CampaignCriterionTest, LocatedErrors) {
  EXPECT_THAT(ParseError(Yaml("criterion: {pass_rate: 1.5}\n")),
              HasSubstr("t.yaml:8:24: criterion.pass_rate: must be greater than 0 and less than 1 "
                        "(a pass rate), got 1.5"));
  EXPECT_THAT(ParseError(Yaml("criterion: {pass_rate: 0}\n")),
              HasSubstr("criterion.pass_rate: must be greater than 0"));
  EXPECT_THAT(ParseError(Yaml("criterion: {confidence: 0.3}\n")),
              HasSubstr("t.yaml:8:25: criterion.confidence: must be at least 0.5 and less than 1, "
                        "got 0.3"));
  EXPECT_THAT(ParseError(Yaml("criterion: {pass_rat: 0.9}\n")),
              HasSubstr("criterion: unknown key 'pass_rat'"));
  EXPECT_THAT(ParseError(Yaml("criterion: {pass_rate: high}\n")), HasSubstr("criterion.pass_rate"));
  EXPECT_THAT(
      ParseError(Yaml("criterion: {confidence: 0.95}\nsearch: {boundary: {confidence: 0.9}}\n")),
      HasSubstr("search.boundary.confidence: differs from criterion.confidence (criterion at line "
                "8, column 1)"));
  EXPECT_FALSE(ParseCampaignCriterion("criterion: {pass_rate: 2}\n", "x.yaml").ok());
}

// ParseCampaignCriterion parses with the default ParseOptions, which the parser once held by
// reference to a temporary that was gone before the text was read (AddressSanitizer:
// stack-use-after-scope in LoadRoot); the default YAML guards must apply.
TEST(CampaignCriterionTest, AppliesTheDefaultYamlGuards) {
  const ParseOptions defaults;
  const std::string big = "criterion: {pass_rate: 0.75}\n# " + std::string(defaults.max_bytes, 'x');
  auto too_big = ParseCampaignCriterion(big, "x.yaml");
  ASSERT_FALSE(too_big.ok());
  EXPECT_THAT(too_big.status().ToString(),
              HasSubstr("more than the limit of " + std::to_string(defaults.max_bytes)));

  std::string deep = "criterion: {pass_rate: 0.75}\nx: ";
  for (int i = 0; i <= defaults.max_depth; ++i) deep += "[";
  for (int i = 0; i <= defaults.max_depth; ++i) deep += "]";
  auto too_deep = ParseCampaignCriterion(deep + "\n", "x.yaml");
  ASSERT_FALSE(too_deep.ok());
  EXPECT_THAT(too_deep.status().ToString(),
              HasSubstr("deeper than " + std::to_string(defaults.max_depth)));
}

}  // namespace
}  // namespace nw
