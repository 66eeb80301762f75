// The HTML report: a constructed campaign read back through a read-only Store and rendered to
// one page. Checks the structure (balanced tags, one SVG heatmap per configuration, tooltips with
// counts and Wilson intervals, boundary markers, probe tables only where probes exist), that
// nothing is fetched from anywhere, that names are escaped, and, where Debian's chromium is
// installed, that headless Chromium renders it to a non-trivial PNG. Set NW_HTML_SCREENSHOT=FILE
// to keep the screenshot.
#include "report/html.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "tests/db/campaign_fixture.h"

namespace nw::report {
namespace {

using testing_db::CampaignBuilder;
using testing_db::ConfigLabel;
using testing_db::MakeProbe;
using testing_db::Repeat;
using testing_db::TempDir;

constexpr Outcome P = Outcome::kPass;
constexpr Outcome M = Outcome::kMiss;
constexpr const char* kName = "nightly <b>\"fp8\" & 'friends'</b>";

size_t Count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

// Every non-void element is closed, in order. Returns "" or the first problem.
std::string CheckBalanced(const std::string& html) {
  static const std::vector<std::string> kVoid = {"meta", "br", "hr", "img", "input", "link"};
  std::vector<std::string> stack;
  size_t i = 0;
  while ((i = html.find('<', i)) != std::string::npos) {
    const size_t end = html.find('>', i);
    if (end == std::string::npos) return "unterminated tag at " + std::to_string(i);
    std::string tag = html.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.empty()) return "empty tag";
    if (tag[0] == '!') continue;  // <!DOCTYPE html>
    const bool closing = tag[0] == '/';
    const bool self_closing = tag.back() == '/';
    std::string name = tag.substr(closing ? 1 : 0);
    name = name.substr(0, name.find_first_of(" /\n"));
    if (closing) {
      if (stack.empty() || stack.back() != name) {
        return "</" + name + "> closes <" +
               (stack.empty() ? std::string("nothing") : stack.back()) + ">";
      }
      stack.pop_back();
    } else if (!self_closing && std::find(kVoid.begin(), kVoid.end(), name) == kVoid.end()) {
      stack.push_back(name);
      if (name == "style") {  // raw text up to </style>
        const size_t close = html.find("</style>", i);
        if (close == std::string::npos) return "unclosed <style>";
        i = close;
      }
    }
  }
  if (!stack.empty()) return "<" + stack.back() + "> never closed";
  return "";
}

class HtmlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto file = dir_.File("nw.db");
    {
      auto s = Store::Open(file);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      CampaignBuilder b(**s, kName);
      // topk=16: found up to 2,048 at every position, lost from 4,096; probes; an engine error
      // and a pending job at 8,192.
      for (int64_t len : {1024, 2048}) {
        for (double pos : {0.0, 0.25, 0.5, 1.0}) b.Cell(len, pos, Repeat(P, 2));
      }
      b.Cell(4096, 0.0, {P, M})
          .WithProbes({MakeProbe(0, false, 12), MakeProbe(1, false, -1, -1)})
          .Cell(4096, 0.25, {P, P})
          .Cell(4096, 0.5, {M, M})
          .WithProbes({MakeProbe(0, false, 30), MakeProbe(1, true, 3)})
          .Cell(4096, 1.0, {P, P})
          .WithProbes({MakeProbe(0, true, 1), MakeProbe(1, true, 2)});
      b.Cell(8192, 0.0, {M, M})
          .Cell(8192, 0.25, {M, Outcome::kEngineError})
          .Cell(8192, 0.5, {M, M})
          .Cell(8192, 1.0, {P, M})
          .Pending(8192, 1.0, 2);
      // topk=64: found everywhere.
      for (int64_t len : {1024, 2048, 4096, 8192}) {
        for (double pos : {0.0, 0.5, 1.0}) b.Cell(len, pos, Repeat(P, 2), 64);
      }
      b.Commit();
    }
    auto ro = Store::Open(file, Store::Mode::kReadOnly);
    ASSERT_TRUE(ro.ok()) << ro.status().ToString();
    // A permissive criterion (pass rate 0.55 at 50 % confidence) so that these few answers give
    // every kind of verdict: topk=16 found up to 2,048, undecided at 4,096, lost at 8,192;
    // topk=64 found everywhere. At the default 0.9 / 95 % they are all undecided. (At 0.5, 1/7
    // would sit on the threshold: its exact upper bound at 87.5 % is 0.5, P(X <= 1) = 8/128.)
    auto r = LoadCampaignReport(**ro, kName, Criterion{0.55, 0.5});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    report_ = std::move(r).value();
    html_ = RenderHtml(report_);
  }

  TempDir dir_;
  CampaignReport report_;
  std::string html_;
};

TEST_F(HtmlTest, IsOneWellFormedPage) {
  EXPECT_EQ(html_.rfind("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">", 0),
            0u);
  EXPECT_EQ(html_.substr(html_.size() - 16), "</body>\n</html>\n");
  EXPECT_EQ(CheckBalanced(html_), "");
  EXPECT_EQ(Count(html_, "<style>"), 1u);
  EXPECT_EQ(Count(html_, "<svg class=\"heatmap\""), 2u);  // one per configuration
  EXPECT_EQ(Count(html_, "<section class=\"config\""), 2u);
  EXPECT_EQ(Count(html_, "<svg class=\"outcome-bar\""), 3u);  // campaign + each configuration
  EXPECT_EQ(Count(html_, "<table class=\"probes\">"), 1u);    // only topk=16 has probes
  // 4 lengths x 4 positions for topk=16 (the pending job shares a cell), 4 x 3 for topk=64.
  EXPECT_EQ(Count(html_, "<g class=\"cell\">"), 16u + 12u);
}

TEST_F(HtmlTest, NeedsNoNetwork) {
  for (const char* bad : {"http:", "https:", "//", "<script", "<link", "<img", "src=", "@import",
                          "url(", "<iframe"}) {
    if (std::string(bad) == "//") {
      // "//" may appear only inside CSS comments; there are none.
      EXPECT_EQ(html_.find("//"), std::string::npos);
      continue;
    }
    EXPECT_EQ(html_.find(bad), std::string::npos) << bad;
  }
}

TEST_F(HtmlTest, EscapesNames) {
  EXPECT_EQ(html_.find("<b>"), std::string::npos);
  EXPECT_NE(html_.find("<h1>Campaign <code>nightly &lt;b&gt;&quot;fp8&quot; &amp; &#39;friends&#39;"
                       "&lt;/b&gt;</code></h1>"),
            std::string::npos);
  EXPECT_EQ(HtmlEscape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
}

TEST_F(HtmlTest, BoundariesWithIntervals) {
  // Lengths at 1 - 0.5/4 = 87.5 % (exact): 2,048 is 8/8 (lower 0.0625^(1/8) = 0.71 >= 0.55,
  // found); 4,096 is 5/8 (0.31-0.88, undecided); 8,192 is 1/7 (upper 0.50 < 0.55, lost).
  EXPECT_NE(html_.find("<p class=\"boundary lost\">found at every position up to 2,048 tokens "
                       "(pass 8/8, 87.5% CI 0.71-1.00); undecided at 4,096 (pass 5/8, 87.5% CI "
                       "0.31-0.88); lost from 8,192 (pass 1/7, 87.5% CI 0.01-0.50)"),
            std::string::npos)
      << html_;
  EXPECT_NE(html_.find("<p class=\"boundary found\">found at every position at every tested "
                       "length (up to 8,192 tokens; pass 6/6, 87.5% CI 0.63-1.00).</p>"),
            std::string::npos);
  EXPECT_EQ(Count(html_, "\u2190 found at every position up to here"), 2u);
  EXPECT_EQ(Count(html_, "\u2190 undecided"), 1u);
  EXPECT_EQ(Count(html_, "\u2190 lost from here"), 1u);
  EXPECT_EQ(Count(html_, "class=\"boundary-line\""), 1u);
  // The summary table carries the verdict lengths with their counts and intervals.
  EXPECT_NE(html_.find("<td class=\"num\">2,048 <small>(8/8, 87.5% CI 0.71-1.00)</small></td>"
                       "<td class=\"num\">8,192 <small>(1/7, 87.5% CI 0.01-0.50)</small></td>"
                       "<td class=\"num\">4,096</td>"),
            std::string::npos);
}

TEST_F(HtmlTest, CellsCarryCountsAndIntervals) {
  // 0/2 at 4,096 / 50%: red, white text; its tooltip has the counts, the verdict and the exact
  // interval that decided it at the cell level 1 - 0.5/16 (0/2: upper 1 - sqrt(0.03125/2)).
  EXPECT_NE(html_.find("<g class=\"cell\"><title>4,096 tokens, needle at 50%: 0/2 passed (0%); "
                       "verdict: undecided (96.88% CI 0.00-0.88)</title><rect x=\"245\" "
                       "y=\"109\" width=\"74\" "
                       "height=\"30\" rx=\"3\" fill=\"#d73027\"/><text x=\"282\" y=\"128\" "
                       "text-anchor=\"middle\" font-size=\"12\" fill=\"#ffffff\">0/2?</text></g>"),
            std::string::npos)
      << html_;
  // 1/2 at 8,192 / 100% with a pending job: amber, and the tooltip says so.
  EXPECT_NE(html_.find("<title>8,192 tokens, needle at 100%: 1/2 passed (50%); 1 pending; "
                       "verdict: undecided (96.88% CI 0.01-0.99)</title>"),
            std::string::npos);
  EXPECT_NE(html_.find("<title>8,192 tokens, needle at 25%: 0/1 passed (0%); 1 without an "
                       "answer (engine_error, timeout, truncated or empty; not misses); verdict: "
                       "undecided (96.88% CI 0.00-0.98)</title>"),
            std::string::npos);
  EXPECT_NE(html_.find(">0/1 e1?</text>"), std::string::npos);
  EXPECT_NE(html_.find(">1/2 p1?</text>"), std::string::npos);
}

TEST_F(HtmlTest, OutcomesAndProbes) {
  // Campaign: 46 passes, 9 misses, 1 engine error (1/56 = 2%); topk=16 alone: 22, 9, 1 (3%).
  EXPECT_NE(html_.find("<title>engine_error: 1 (2%)</title>"), std::string::npos);
  EXPECT_NE(html_.find("<title>engine_error: 1 (3%)</title>"), std::string::npos);
  EXPECT_NE(html_.find("<title>pass: 22 (69%)</title>"), std::string::npos);
  EXPECT_NE(html_.find("<title>pass: 24 (100%)</title>"), std::string::npos);
  EXPECT_NE(html_.find("<tr><td class=\"num\">0</td><td class=\"num\">1/3 (33%)</td>"
                       "<td class=\"num\">12</td><td class=\"num\">1</td>"
                       "<td class=\"num\">3/3</td></tr>"),
            std::string::npos)
      << html_;
  EXPECT_NE(html_.find("<tr><td class=\"num\">1</td><td class=\"num\">2/3 (67%)</td>"
                       "<td class=\"num\">2.5</td><td class=\"num\">2</td>"
                       "<td class=\"num\">2/3</td></tr>"),
            std::string::npos);
}

TEST(HtmlColors, RedAmberGreen) {
  EXPECT_EQ(PassRateColor(0.0), "#d73027");
  EXPECT_EQ(PassRateColor(0.5), "#fee08b");
  EXPECT_EQ(PassRateColor(1.0), "#1a9850");
  EXPECT_EQ(PassRateColor(0.25), "#eb8859");  // halfway red -> amber: (235, 136, 89)
  EXPECT_EQ(PassRateColor(-3), "#d73027");
  EXPECT_EQ(PassRateColor(7), "#1a9850");
}

TEST(HtmlEmpty, ACampaignWithoutResults) {
  CampaignRecord c;
  c.name = "empty";
  const std::string html = RenderHtml(BuildCampaignReport(c, CampaignProgress{}, {}, {}, {}));
  EXPECT_EQ(CheckBalanced(html), "");
  EXPECT_NE(html.find("<p>No results yet.</p>"), std::string::npos);
  EXPECT_EQ(html.find("<svg class=\"heatmap\""), std::string::npos);
}

// Debian's chromium, headless: the page renders to a PNG of the window size with real content.
TEST_F(HtmlTest, RendersInHeadlessChromium) {
  const std::string chromium = "/usr/bin/chromium";
  if (!std::filesystem::exists(chromium)) GTEST_SKIP() << chromium << " is not installed";
  const auto page = dir_.File("report.html");
  const auto png = dir_.File("report.png");
  {
    std::ofstream out(page);
    out << html_;
  }
  const std::string cmd = "timeout 120 " + chromium +
                          " --headless --no-sandbox --disable-gpu --disable-background-networking"
                          " --disable-component-update --disable-sync --no-first-run"
                          " --disable-dev-shm-usage --hide-scrollbars --window-size=1280,1800"
                          " --user-data-dir=" +
                          dir_.File("profile").string() + " --screenshot=" + png.string() +
                          " file://" + page.string() + " > " + dir_.File("chromium.log").string() +
                          " 2>&1";
  const int rc = std::system(cmd.c_str());
  const std::string log = test_support::ReadFileText(dir_.File("chromium.log"));
  ASSERT_EQ(rc, 0) << cmd << "\n" << log;
  ASSERT_TRUE(std::filesystem::exists(png)) << log;
  const std::string bytes = test_support::ReadFileText(png);
  ASSERT_GT(bytes.size(), 24u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  auto be32 = [&](size_t at) {
    return (static_cast<uint32_t>(static_cast<unsigned char>(bytes[at])) << 24) |
           (static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + 1])) << 16) |
           (static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + 2])) << 8) |
           static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + 3]));
  };
  EXPECT_EQ(bytes.substr(12, 4), "IHDR");
  EXPECT_EQ(be32(16), 1280u);  // width
  EXPECT_EQ(be32(20), 1800u);  // height
  // A blank 1280x1800 page compresses to a few kilobytes; text and coloured heatmaps do not.
  EXPECT_GT(bytes.size(), 40'000u) << "the screenshot looks empty";
  if (const char* keep = std::getenv("NW_HTML_SCREENSHOT")) {
    std::filesystem::copy_file(png, keep, std::filesystem::copy_options::overwrite_existing);
  }
}

}  // namespace
}  // namespace nw::report
