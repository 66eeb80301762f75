#include "report/boundary.h"

#include <algorithm>
#include <map>

#include "common/clopper_pearson.h"
#include "report/stats.h"

namespace nw::report {

namespace {

using CellKey = std::pair<int64_t, double>;

ConfigBoundary Compute(const std::string& config, const std::map<int64_t, LengthSummary>& by_len,
                       const std::map<CellKey, const HeatmapCell*>& cells,
                       const Criterion& criterion) {
  ConfigBoundary b;
  b.config = config;
  b.criterion = criterion;
  for (const auto& [len, s] : by_len) {
    b.lengths.push_back(s);
    b.trials += s.trials;
    b.passes += s.passes;
    b.errors += s.errors;
    b.pending += s.pending;
    b.failed += s.failed;
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

  // Verdicts. The families: the lengths with answers, and the cells with answers.
  int64_t answered_lengths = 0, answered_cells = 0;
  for (const LengthSummary& s : b.lengths) answered_lengths += s.trials > 0 ? 1 : 0;
  for (const auto& [k, c] : cells) answered_cells += c->trials > 0 ? 1 : 0;
  b.length_confidence = BonferroniConfidence(criterion.confidence, answered_lengths);
  b.cell_confidence = BonferroniConfidence(criterion.confidence, answered_cells);
  for (const auto& [k, c] : cells) {
    CellDecision d;
    d.length = k.first;
    d.position = k.second;
    d.passes = c->passes;
    d.trials = c->trials;
    d.verdict = Decide(c->passes, c->trials, criterion.pass_rate, b.cell_confidence);
    b.cell_verdicts.push_back(d);
  }
  for (LengthSummary& s : b.lengths) {
    s.pooled = Decide(s.passes, s.trials, criterion.pass_rate, b.length_confidence);
    s.verdict = s.pooled;
    for (const CellDecision& d : b.cell_verdicts) {
      if (d.length == s.length && d.verdict == Verdict::kLost)
        s.lost_positions.push_back(d.position);
    }
    if (!s.lost_positions.empty()) s.verdict = Verdict::kLost;
  }
  bool prefix_found = true;
  for (const LengthSummary& s : b.lengths) {
    if (s.verdict == Verdict::kFound) {
      if (prefix_found) b.found_up_to = s.length;
      if (b.lost_from) b.found_after_lost.push_back(s.length);
    } else {
      prefix_found = false;
    }
    if (s.verdict == Verdict::kLost && !b.lost_from) b.lost_from = s.length;
    if (s.verdict == Verdict::kUndecided) {
      b.undecided.push_back(s.length);
      if (!b.nearest_undecided) {
        b.nearest_undecided = s.length;
        b.decide_trials =
            TrialsToDecide(s.passes, s.trials, criterion.pass_rate, b.length_confidence);
      }
    }
  }
  b.verdicts_monotone = b.found_after_lost.empty();
  return b;
}

std::string Tokens(int64_t v) { return FormatThousands(v); }

std::string PassCi(int64_t passes, int64_t trials, double confidence) {
  const Interval ci =
      ClopperPearsonInterval(static_cast<double>(passes), static_cast<double>(trials), confidence);
  return "pass " + FormatThousands(passes) + "/" + FormatThousands(trials) + ", " +
         CiLabel(confidence) + " " + FormatFraction(ci.lo) + "-" + FormatFraction(ci.hi);
}

const LengthSummary& At(const ConfigBoundary& b, int64_t length) {
  for (const LengthSummary& s : b.lengths) {
    if (s.length == length) return s;
  }
  return b.lengths.front();
}

// "pass 45/50, 99% CI 0.80-0.97" and, for a length lost through its cells, the lost positions.
std::string LengthStats(const ConfigBoundary& b, const LengthSummary& s) {
  std::string out = PassCi(s.passes, s.trials, b.length_confidence);
  if (s.verdict == Verdict::kLost && s.pooled != Verdict::kLost) {
    for (double pos : s.lost_positions) {
      for (const CellDecision& d : b.cell_verdicts) {
        if (d.length == s.length && d.position == pos) {
          out += "; lost at position " + FormatPosition(pos) + ": " +
                 PassCi(d.passes, d.trials, b.cell_confidence);
        }
      }
    }
  }
  return out;
}

std::string NoAnswers(const ConfigBoundary& b) {
  std::string s;
  if (b.failed > 0) s += FormatThousands(b.failed) + " failed (retries used up)";
  if (b.errors > 0) {
    if (!s.empty()) s += ", ";
    s += FormatThousands(b.errors) + " without an answer";
  }
  if (b.pending > 0) {
    if (!s.empty()) s += ", ";
    s += FormatThousands(b.pending) + " pending";
  }
  return s;
}

// Consecutive lengths with the same verdict.
struct Run {
  Verdict verdict;
  size_t first, last;  // indices into b.lengths
};

std::string Range(const ConfigBoundary& b, const Run& r) {
  const int64_t lo = b.lengths[r.first].length, hi = b.lengths[r.last].length;
  return lo == hi ? Tokens(lo) : Tokens(lo) + "-" + Tokens(hi);
}

// "512 (pass 9/10, ...), 1,024 (pass 10/10, ...)"; neighbours with the same counts share them:
// "256, 512 (each pass 10/10, ...)".
std::string ListWithStats(const ConfigBoundary& b, const Run& r) {
  std::string out;
  size_t i = r.first;
  while (i <= r.last) {
    const std::string stats = LengthStats(b, b.lengths[i]);
    size_t j = i;
    while (j + 1 <= r.last && LengthStats(b, b.lengths[j + 1]) == stats) ++j;
    if (!out.empty()) out += ", ";
    for (size_t k = i; k <= j; ++k) out += (k > i ? ", " : "") + Tokens(b.lengths[k].length);
    out += std::string(j > i ? " (each " : " (") + stats + ")";
    i = j + 1;
  }
  return out;
}

}  // namespace

std::string CiLabel(double confidence) { return FormatNumber(confidence * 100.0, 2) + "% CI"; }

bool ConfigBoundary::lost_everywhere() const {
  if (lengths.empty()) return false;
  return std::all_of(lengths.begin(), lengths.end(),
                     [](const LengthSummary& l) { return l.failing(); });
}

std::vector<ConfigBoundary> ExtractBoundaries(const std::vector<HeatmapCell>& cells,
                                              const Criterion& criterion) {
  std::map<std::string, std::map<int64_t, LengthSummary>> grouped;
  std::map<std::string, std::map<CellKey, const HeatmapCell*>> by_cell;
  for (const HeatmapCell& c : cells) {
    LengthSummary& s = grouped[c.config][c.context_length];
    by_cell[c.config][{c.context_length, c.needle_position}] = &c;
    s.length = c.context_length;
    ++s.cells;
    if (c.trials > 0 && c.passes == c.trials) ++s.clean_cells;
    if (c.passes < c.trials) ++s.failing_cells;
    s.trials += c.trials;
    s.passes += c.passes;
    s.errors += c.errors;
    s.pending += c.pending;
    s.failed += c.failed;
  }
  std::vector<ConfigBoundary> out;
  for (const auto& [config, by_len] : grouped) {
    out.push_back(Compute(config, by_len, by_cell[config], criterion));
  }
  std::sort(out.begin(), out.end(), [](const ConfigBoundary& a, const ConfigBoundary& b) {
    return NaturalLess(a.config, b.config);
  });
  return out;
}

std::string DescribeMoreTrials(const ConfigBoundary& b) {
  if (!b.nearest_undecided) return "";
  const LengthSummary& s = At(b, *b.nearest_undecided);
  const double rate = static_cast<double>(s.passes) / static_cast<double>(s.trials);
  const std::string at = Tokens(s.length) + " (observed rate " + FormatNumber(rate, 3) + ")";
  if (!b.decide_trials) {
    if (rate == b.criterion.pass_rate) {
      return "more answers at " + at + " would not decide it: its rate is the threshold " +
             FormatNumber(b.criterion.pass_rate, 3);
    }
    return "more than 1,000,000 answers at " + at + " would be needed to decide it";
  }
  const int64_t more = *b.decide_trials - s.trials;
  return "about " + FormatThousands(more) + (more == 1 ? " more answer at " : " more answers at ") +
         at + " would decide it if the rate held (" + FormatThousands(*b.decide_trials) +
         " in all: the smallest n whose " + CiLabel(b.length_confidence) + " at that rate clears " +
         FormatNumber(b.criterion.pass_rate, 3) + ")";
}

std::string DescribeBoundary(const ConfigBoundary& b) {
  if (b.lengths.empty()) return "nothing tested";
  if (b.trials == 0) {
    const std::string why = NoAnswers(b);
    return "no answers yet" + (why.empty() ? std::string() : " (" + why + ")");
  }
  std::vector<Run> runs;
  for (size_t i = 0; i < b.lengths.size(); ++i) {
    const Verdict v = b.lengths[i].verdict;
    if (!runs.empty() && runs.back().verdict == v) {
      runs.back().last = i;
    } else {
      runs.push_back({v, i, i});
    }
  }
  const size_t last = b.lengths.size() - 1;
  std::vector<std::string> parts;
  bool seen_lost = false;
  for (size_t k = 0; k < runs.size(); ++k) {
    const Run& r = runs[k];
    const bool only = runs.size() == 1;
    const LengthSummary& first = b.lengths[r.first];
    const LengthSummary& end = b.lengths[r.last];
    switch (r.verdict) {
      case Verdict::kFound:
        if (only) {
          parts.push_back("found at every position at every tested length (up to " +
                          Tokens(end.length) + " tokens; " + LengthStats(b, end) + ")");
        } else if (k == 0) {
          parts.push_back("found at every position up to " + Tokens(end.length) + " tokens (" +
                          LengthStats(b, end) + ")");
        } else if (seen_lost) {
          parts.push_back("not monotone: found again at " + ListWithStats(b, r));
        } else {
          parts.push_back("found at " + ListWithStats(b, r));
        }
        break;
      case Verdict::kLost:
        if (only) {
          parts.push_back("lost at every tested length (" + Range(b, r) + " tokens; " +
                          LengthStats(b, first) + ")");
        } else if (r.last == last) {
          parts.push_back(std::string(seen_lost ? "lost again from " : "lost from ") +
                          Tokens(first.length) +
                          (r.first == 0 ? ", the shortest tested length" : "") + " (" +
                          LengthStats(b, first) + ")");
        } else {
          parts.push_back("lost at " + ListWithStats(b, r));
        }
        seen_lost = true;
        break;
      case Verdict::kUndecided:
        if (only) {
          parts.push_back("undecided at every tested length (" + Range(b, r) + " tokens; " +
                          ListWithStats(b, r) + ")");
        } else {
          parts.push_back("undecided at " + ListWithStats(b, r));
        }
        break;
      case Verdict::kNoAnswers:
        parts.push_back("no answers at " + Range(b, r));
        break;
    }
  }
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : "; ") + p;
  const std::string more = DescribeMoreTrials(b);
  if (!more.empty()) s += "; " + more;
  const std::string missing = NoAnswers(b);
  if (!missing.empty()) s += "; " + missing;
  return s;
}

}  // namespace nw::report
