// Where retrieval breaks: the boundary of one configuration, computed from its heatmap cells.
// The same definitions as the v_boundary view (db/migrations/0002_views.sql); tests check both
// agree. Thread-safety: pure functions over values.
//
// Per configuration, over its tested context lengths in ascending order:
//   a length is CLEAN   when every needle position tested at it has answers (pass or miss) and
//                       all of them passed;
//   a length is FAILING when some position at it has a miss;
//   a length can be neither: no miss, but some position has no answers (only engine errors,
//                       timeouts, truncated or empty outputs, or jobs still pending).
//   L_pass        = the largest length L such that L and every shorter tested length are clean
//                   ("found at every position up to L_pass");
//   L_fail        = the smallest failing length ("lost from L_fail");
//   first_unclean = the smallest length that is not clean (L_pass is the length just below it);
//   max_clean     = the largest clean length anywhere; the data is NOT monotone when
//                   max_clean > L_fail (retrieval fails at L_fail, then works again longer).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "db/store.h"

namespace nw::report {

/// One context length of one configuration, summed over its needle positions.
struct LengthSummary {
  int64_t length = 0;
  int64_t cells = 0;          // positions tested at this length
  int64_t clean_cells = 0;    // positions with answers, all passing
  int64_t failing_cells = 0;  // positions with at least one miss
  int64_t trials = 0, passes = 0, errors = 0, pending = 0;
  bool clean() const { return clean_cells == cells; }
  bool failing() const { return failing_cells > 0; }
};

struct ConfigBoundary {
  std::string config;
  std::vector<LengthSummary> lengths;  // ascending
  std::optional<int64_t> l_pass;
  std::optional<int64_t> l_fail;
  std::optional<int64_t> first_unclean;
  std::optional<int64_t> max_clean;
  bool monotone = true;
  int64_t fail_trials = 0, fail_passes = 0;                 // summed over the positions at l_fail
  int64_t pass_trials = 0, pass_passes = 0;                 // summed over the positions at l_pass
  int64_t trials = 0, passes = 0, errors = 0, pending = 0;  // whole configuration

  int64_t min_length() const { return lengths.empty() ? 0 : lengths.front().length; }
  int64_t max_length() const { return lengths.empty() ? 0 : lengths.back().length; }
  /// Every tested length has a miss.
  bool lost_everywhere() const;
};

/// Groups cells by configuration (any order in; configurations out in natural order of their
/// label) and computes each boundary.
std::vector<ConfigBoundary> ExtractBoundaries(const std::vector<HeatmapCell>& cells);

/// The boundary in plain words, each length with its pass count and two-sided 95% Wilson
/// interval, e.g.
///   "found at every position up to 1,850 tokens (pass 40/40, 95% CI 0.91-1.00); lost from 4,509
///    (pass 12/40, 95% CI 0.18-0.45)"
///   "found at every position at every tested length (up to 8,000 tokens; pass 40/40, ...)"
///   "lost at every tested length (1,000-8,000 tokens; pass 3/40, 95% CI 0.03-0.20)"
/// with notes for non-monotone data and for positions without answers.
std::string DescribeBoundary(const ConfigBoundary& b);

}  // namespace nw::report
