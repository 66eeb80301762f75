// The verdicts by simulation: synthetic result sets with known true per-cell pass rates, 1,000
// seeds each, judged with ExtractBoundaries at the default criterion (0.9 / 95 %). Checks that a
// decidable headline boundary is right in >= 95 % of runs and that a length whose true rate is at
// least threshold + 0.05 is called lost in <= 5 % of runs. NW_SIM_TABLE=1 prints the table that
// docs/reports.md quotes, and the test checks that the doc quotes it exactly.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "report/boundary.h"

namespace nw::report {
namespace {

const std::vector<int64_t> kLengths = {256, 512, 1024, 2048, 4096};
const std::vector<double> kPositions = {0.0, 0.25, 0.5, 0.75, 1.0};
constexpr int kTrials = 40;  // per cell: 200 answers per length
constexpr int kSeeds = 1000;

using RateFn = std::function<double(size_t length_index, size_t position_index)>;

struct Scenario {
  std::string name;
  RateFn rate;
  // The right headline: found_up_to and lost_from from the true rates against the threshold
  // 0.9 (a length whose rate, and every cell's, is >= 0.9 should be found; one below, lost).
  std::optional<int64_t> true_found_up_to;
  std::optional<int64_t> true_lost_from;
};

struct Tally {
  int decided = 0, right = 0;  // runs with a decided headline boundary; right ones
  int false_lost_runs = 0;     // runs calling some length with true rate >= 0.95 lost
  int false_found_runs = 0;    // runs calling some length with true rate <= 0.85 found
  int nonmonotone_named = 0;   // runs whose verdicts are named not monotone
};

double LengthRate(const Scenario& s, size_t li) {
  double sum = 0;
  for (size_t p = 0; p < kPositions.size(); ++p) sum += s.rate(li, p);
  return sum / static_cast<double>(kPositions.size());
}

double MinCellRate(const Scenario& s, size_t li) {
  double m = 1;
  for (size_t p = 0; p < kPositions.size(); ++p) m = std::min(m, s.rate(li, p));
  return m;
}

Tally Simulate(const Scenario& s) {
  Tally t;
  for (int seed = 1; seed <= kSeeds; ++seed) {
    std::mt19937_64 rng(static_cast<uint64_t>(seed));
    std::uniform_real_distribution<double> u(0, 1);
    std::vector<HeatmapCell> cells;
    for (size_t li = 0; li < kLengths.size(); ++li) {
      for (size_t p = 0; p < kPositions.size(); ++p) {
        HeatmapCell c;
        c.config = "c";
        c.context_length = kLengths[li];
        c.needle_position = kPositions[p];
        c.trials = kTrials;
        for (int k = 0; k < kTrials; ++k) c.passes += u(rng) < s.rate(li, p) ? 1 : 0;
        cells.push_back(c);
      }
    }
    const ConfigBoundary b = ExtractBoundaries(cells).front();
    bool false_lost = false, false_found = false;
    for (size_t li = 0; li < kLengths.size(); ++li) {
      const Verdict v = b.lengths[li].verdict;
      if (MinCellRate(s, li) >= 0.95 && v == Verdict::kLost) false_lost = true;
      if (LengthRate(s, li) <= 0.85 && v == Verdict::kFound) false_found = true;
    }
    t.false_lost_runs += false_lost ? 1 : 0;
    t.false_found_runs += false_found ? 1 : 0;
    t.nonmonotone_named += b.verdicts_monotone ? 0 : 1;
    if (s.true_found_up_to || s.true_lost_from) {
      // Decidable: the headline names a boundary and no length in between is undecided.
      if ((b.found_up_to || b.lost_from) && b.undecided.empty()) {
        ++t.decided;
        if (b.found_up_to == s.true_found_up_to && b.lost_from == s.true_lost_from) ++t.right;
      }
    }
  }
  return t;
}

TEST(VerdictSimulation, KnownRatesThousandSeedsEach) {
  const std::vector<Scenario> scenarios = {
      {"sharp boundary (1.0 up to 1,024, 0.2 from 2,048)",
       [](size_t li, size_t) { return li <= 2 ? 1.0 : 0.2; }, 1024, 2048},
      {"gradual decline (0.99, 0.97, 0.93, 0.80, 0.50)",
       [](size_t li, size_t) {
         const double r[] = {0.99, 0.97, 0.93, 0.80, 0.50};
         return r[li];
       },
       1024, 2048},
      {"flat 0.97 everywhere", [](size_t, size_t) { return 0.97; }, 4096, std::nullopt},
      {"one bad position (0.99; 2,048 at 50%: 0.30)",
       [](size_t li, size_t p) { return li == 3 && p == 2 ? 0.30 : 0.99; }, 1024, 2048},
      {"non-monotone (0.99, 0.99, 0.20, 0.99, 0.99)",
       [](size_t li, size_t) { return li == 2 ? 0.20 : 0.99; }, 512, 1024},
  };
  const bool print = std::getenv("NW_SIM_TABLE") != nullptr;
  std::string table =
      "| scenario | decided headline runs | right of decided | runs with a false lost | runs "
      "with a false found | runs named not monotone |\n|---|---:|---:|---:|---:|---:|\n";
  std::vector<Tally> tallies;
  for (const Scenario& s : scenarios) {
    SCOPED_TRACE(s.name);
    const Tally t = Simulate(s);
    tallies.push_back(t);
    char row[512];
    std::snprintf(row, sizeof(row), "| %s | %d | %d | %d | %d | %d |\n", s.name.c_str(), t.decided,
                  t.right, t.false_lost_runs, t.false_found_runs, t.nonmonotone_named);
    table += row;
    // A length with true rate >= threshold + 0.05 is called lost in <= 5 % of runs.
    EXPECT_LE(t.false_lost_runs, kSeeds / 20);
    EXPECT_LE(t.false_found_runs, kSeeds / 20);
    if (t.decided > 0) {
      EXPECT_GE(t.right * 100, t.decided * 95);
    }
  }
  if (print) std::printf("%s", table.c_str());
  // The scenarios with a boundary must be decidable most of the time at 200 answers a length.
  EXPECT_GE(tallies[0].decided, 900);
  // The non-monotone pattern is named.
  EXPECT_GE(tallies[4].nonmonotone_named, 900);
  // docs/reports.md ("Checked by simulation") quotes exactly this table.
  std::ifstream doc(std::string(NW_SOURCE_DIR) + "/docs/reports.md");
  ASSERT_TRUE(doc.good());
  const std::string text((std::istreambuf_iterator<char>(doc)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(table), std::string::npos)
      << "docs/reports.md does not quote the simulation table; it is now:\n"
      << table;
}

}  // namespace
}  // namespace nw::report
