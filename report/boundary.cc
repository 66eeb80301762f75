#include "report/boundary.h"

#include <algorithm>
#include <map>

#include "report/stats.h"

namespace nw::report {

bool ConfigBoundary::lost_everywhere() const {
  if (lengths.empty()) return false;
  return std::all_of(lengths.begin(), lengths.end(),
                     [](const LengthSummary& l) { return l.failing(); });
}

namespace {

ConfigBoundary Compute(const std::string& config, const std::map<int64_t, LengthSummary>& by_len) {
  ConfigBoundary b;
  b.config = config;
  for (const auto& [len, s] : by_len) {
    b.lengths.push_back(s);
    b.trials += s.trials;
    b.passes += s.passes;
    b.errors += s.errors;
    b.pending += s.pending;
  }
  bool prefix_clean = true;
  for (const LengthSummary& s : b.lengths) {
    if (s.clean()) {
      b.max_clean = s.length;
      if (prefix_clean) {
        b.l_pass = s.length;
        b.pass_trials = s.trials;
        b.pass_passes = s.passes;
      }
    } else {
      if (!b.first_unclean) b.first_unclean = s.length;
      prefix_clean = false;
    }
    if (s.failing() && !b.l_fail) {
      b.l_fail = s.length;
      b.fail_trials = s.trials;
      b.fail_passes = s.passes;
    }
  }
  b.monotone = !(b.l_fail && b.max_clean && *b.max_clean > *b.l_fail);
  return b;
}

std::string Tokens(int64_t v) { return FormatThousands(v); }

std::string PassCi(int64_t passes, int64_t trials) {
  const Interval ci = WilsonInterval(passes, trials);
  return "pass " + FormatThousands(passes) + "/" + FormatThousands(trials) + ", 95% CI " +
         FormatFraction(ci.lo) + "-" + FormatFraction(ci.hi);
}

// "found at every position up to 1,850 tokens (pass 40/40, 95% CI 0.91-1.00)".
std::string FoundUpTo(const ConfigBoundary& b) {
  return "found at every position up to " + Tokens(*b.l_pass) + " tokens (" +
         PassCi(b.pass_passes, b.pass_trials) + ")";
}

std::string NoAnswers(const ConfigBoundary& b) {
  std::string s;
  if (b.errors > 0) s += FormatThousands(b.errors) + " without an answer";
  if (b.pending > 0) {
    if (!s.empty()) s += ", ";
    s += FormatThousands(b.pending) + " pending";
  }
  return s;
}

}  // namespace

std::vector<ConfigBoundary> ExtractBoundaries(const std::vector<HeatmapCell>& cells) {
  std::map<std::string, std::map<int64_t, LengthSummary>> grouped;
  for (const HeatmapCell& c : cells) {
    LengthSummary& s = grouped[c.config][c.context_length];
    s.length = c.context_length;
    ++s.cells;
    if (c.trials > 0 && c.passes == c.trials) ++s.clean_cells;
    if (c.passes < c.trials) ++s.failing_cells;
    s.trials += c.trials;
    s.passes += c.passes;
    s.errors += c.errors;
    s.pending += c.pending;
  }
  std::vector<ConfigBoundary> out;
  for (const auto& [config, by_len] : grouped) out.push_back(Compute(config, by_len));
  std::sort(out.begin(), out.end(), [](const ConfigBoundary& a, const ConfigBoundary& b) {
    return NaturalLess(a.config, b.config);
  });
  return out;
}

std::string DescribeBoundary(const ConfigBoundary& b) {
  if (b.lengths.empty()) return "nothing tested";
  if (b.trials == 0) {
    const std::string why = NoAnswers(b);
    return "no answers yet" + (why.empty() ? std::string() : " (" + why + ")");
  }
  std::string s;
  if (!b.l_fail) {
    if (!b.first_unclean) {
      return "found at every position at every tested length (up to " + Tokens(b.max_length()) +
             " tokens; " + PassCi(b.passes, b.trials) + ")";
    }
    s = b.l_pass ? FoundUpTo(b) + "; no misses" : "no misses";
    return s + ", but some positions have no answers from " + Tokens(*b.first_unclean) + " (" +
           NoAnswers(b) + ")";
  }
  if (b.lost_everywhere()) {
    s = "lost at every tested length (";
    s += b.min_length() == b.max_length() ? Tokens(b.min_length())
                                          : Tokens(b.min_length()) + "-" + Tokens(b.max_length());
    return s + " tokens; " + PassCi(b.passes, b.trials) + ")";
  }
  if (b.l_pass) {
    s = FoundUpTo(b) + "; lost from " + Tokens(*b.l_fail);
  } else if (*b.l_fail == b.min_length()) {
    s = "lost from " + Tokens(*b.l_fail) + ", the shortest tested length";
  } else {
    s = "lost from " + Tokens(*b.l_fail);
  }
  s += " (" + PassCi(b.fail_passes, b.fail_trials) + ")";
  if (b.first_unclean && *b.first_unclean < *b.l_fail) {
    s += "; some positions have no answers from " + Tokens(*b.first_unclean);
  }
  if (!b.monotone) {
    s += "; not monotone: found at every position again at " + Tokens(*b.max_clean);
  }
  return s;
}

}  // namespace nw::report
