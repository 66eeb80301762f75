// The release gate: configurations paired, samples accumulated into cells and the boundary
// shift, and the tests handed to gate_stats.cc to decide (report/gate.h describes the rules).
#include "report/gate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <utility>

#include "report/boundary.h"
#include "report/gate_internal.h"
#include "report/render_util.h"

namespace nw::report {
namespace {

// The axes of a configuration, in display order. fault is in the v_job_config label when it is
// not none; the last three are not in the label and are appended to labels when they matter.
constexpr size_t kAxisCount = 9;
constexpr std::array<const char*, kAxisCount> kAxisNames = {
    "task",  "haystack", "topk",   "precision",     "backend",
    "fault", "model",    "engine", "max_new_tokens"};
constexpr size_t kFirstHiddenAxis = 6;
using AxisTuple = std::array<std::string, kAxisCount>;

// Identity (exact) and display values of each axis of a job.
struct Axes {
  AxisTuple ident, display;
};

Axes AxesOf(const JobSpec& s) {
  Axes a;
  const std::string backend_ident = s.http ? s.backend + " " + s.http->KeyJson().dump() : s.backend;
  a.ident = {s.task,
             s.haystack,
             std::to_string(s.topk),
             s.precision.ToJson().dump(),
             backend_ident,
             s.fault,
             s.model_digest,
             s.engine_version,
             std::to_string(s.max_new_tokens)};
  a.display = a.ident;
  a.display[3] = s.precision.name;
  a.display[4] = BackendLabel(s);
  a.display[6] = s.model_digest.substr(0, 12);
  return a;
}

// One configuration of one side: its samples.
struct Group {
  Axes axes;
  std::string label;  // v_job_config's label (+ hidden axes when they matter)
  std::vector<const CampaignSample*> samples;
};

using GroupMap = std::map<AxisTuple, Group>;

GroupMap GroupSamples(const std::vector<CampaignSample>& samples) {
  GroupMap out;
  for (const CampaignSample& s : samples) {
    Axes a = AxesOf(s.job.spec);
    Group& g = out[a.ident];
    if (g.samples.empty()) {
      g.axes = std::move(a);
      g.label = s.config;
    }
    g.samples.push_back(&s);
  }
  return out;
}

std::optional<Outcome> AnswerOf(const CampaignSample& s) {
  if (!s.result || !IsAnswerOutcome(s.result->outcome)) return std::nullopt;
  return s.result->outcome;
}

void Count(SideCounts& c, const CampaignSample& s) {
  if (!s.result) {
    ++(s.job.state == JobState::kFailed ? c.failed : c.pending);
  } else if (!IsAnswerOutcome(s.result->outcome)) {
    ++c.errors;
  } else {
    ++c.trials;
    if (s.result->outcome == Outcome::kPass) ++c.passes;
  }
}

using DesignKey = std::tuple<int64_t, double, int>;  // length, position, trial
DesignKey KeyOf(const CampaignSample& s) {
  return {s.job.spec.context_length, s.job.spec.needle_position, s.job.spec.trial};
}

// A test being accumulated, with the candidate jobs that disagree.
struct Accum {
  GateTest test;
  bool baseline_seen = false, candidate_seen = false;
  std::vector<std::string> lost_keys;  // candidate keys of the lost pairs
  std::vector<std::string> miss_keys;  // candidate keys of every candidate miss
};

void AddPairOrSide(Accum& a, const CampaignSample* base, const CampaignSample* cand) {
  if (base != nullptr) {
    a.baseline_seen = true;
    Count(a.test.baseline, *base);
  }
  if (cand != nullptr) {
    a.candidate_seen = true;
    Count(a.test.candidate, *cand);
    const auto ca = AnswerOf(*cand);
    if (ca == Outcome::kMiss) a.miss_keys.push_back(cand->job.key);
  }
}

// Counts a pair (both must be non-null and already counted by AddPairOrSide).
void AddPairing(Accum& a, const CampaignSample& base, const CampaignSample& cand) {
  const auto ba = AnswerOf(base), ca = AnswerOf(cand);
  if (!ba || !ca) return;
  ++a.test.pairs;
  if (!base.result->prompt_hash.empty() && base.result->prompt_hash == cand.result->prompt_hash) {
    ++a.test.same_prompt_pairs;
  }
  if (*ba == Outcome::kPass && *ca == Outcome::kMiss) {
    ++a.test.lost;
    a.lost_keys.push_back(cand.job.key);
  }
  if (*ba == Outcome::kMiss && *ca == Outcome::kPass) ++a.test.gained;
}

// Heatmap cells of one group (for the boundary of each side).
std::vector<HeatmapCell> CellsOf(const Group& g) {
  std::map<std::pair<int64_t, double>, HeatmapCell> cells;
  for (const CampaignSample* s : g.samples) {
    HeatmapCell& c = cells[{s->job.spec.context_length, s->job.spec.needle_position}];
    c.config = "c";
    c.context_length = s->job.spec.context_length;
    c.needle_position = s->job.spec.needle_position;
    SideCounts sc;
    Count(sc, *s);
    c.trials += sc.trials;
    c.passes += sc.passes;
    c.errors += sc.errors;
    c.pending += sc.pending;
    c.failed += sc.failed;
  }
  std::vector<HeatmapCell> out;
  for (auto& [k, c] : cells) out.push_back(c);
  return out;
}

ConfigBoundary BoundaryOf(const Group& g, const Criterion& criterion) {
  auto b = ExtractBoundaries(CellsOf(g), criterion);
  return b.empty() ? ConfigBoundary{} : b.front();
}

struct Pairing {
  const Group* base;
  const Group* cand;
};

}  // namespace

namespace gate_internal {

Result<GateReport> Compute(const std::vector<CampaignSample>& baseline,
                           const std::vector<CampaignSample>& candidate_in, const GateOptions& o,
                           const std::map<std::string, Outcome>& overrides,
                           std::vector<std::vector<std::string>>* disagreeing) {
  NW_RETURN_IF_ERROR(o.Validate());
  if (baseline.empty()) return Status::InvalidArgument("the baseline has no jobs");
  if (candidate_in.empty()) return Status::InvalidArgument("the candidate has no jobs");
  std::vector<CampaignSample> candidate = candidate_in;
  for (CampaignSample& s : candidate) {
    auto it = overrides.find(s.job.key);
    if (it != overrides.end() && s.result) s.result->outcome = it->second;
  }
  const GroupMap base_groups = GroupSamples(baseline);
  const GroupMap cand_groups = GroupSamples(candidate);

  GateReport r;
  r.options = o;
  // Axes under test: value sets that differ.
  std::array<std::set<std::string>, kAxisCount> base_vals, cand_vals;
  std::array<std::set<std::string>, kAxisCount> base_disp, cand_disp;
  for (const auto& [k, g] : base_groups) {
    for (size_t i = 0; i < kAxisCount; ++i) {
      base_vals[i].insert(g.axes.ident[i]);
      base_disp[i].insert(g.axes.display[i]);
    }
  }
  for (const auto& [k, g] : cand_groups) {
    for (size_t i = 0; i < kAxisCount; ++i) {
      cand_vals[i].insert(g.axes.ident[i]);
      cand_disp[i].insert(g.axes.display[i]);
    }
  }
  std::array<bool, kAxisCount> under_test{};
  auto join = [](const std::set<std::string>& s) {
    std::string out;
    for (const std::string& v : s) out += (out.empty() ? "" : ",") + v;
    return out;
  };
  for (size_t i = 0; i < kAxisCount; ++i) {
    under_test[i] = base_vals[i] != cand_vals[i];
    if (under_test[i]) {
      r.axes_under_test.push_back(kAxisNames[i]);
      r.axis_values[kAxisNames[i]] = {join(base_disp[i]), join(cand_disp[i])};
    }
  }
  // Labels: hidden axes are appended when they are under test or vary.
  auto label = [&](const Group& g) {
    std::string l = g.label;
    for (size_t i = kFirstHiddenAxis; i < kAxisCount; ++i) {
      std::set<std::string> all = base_vals[i];
      all.insert(cand_vals[i].begin(), cand_vals[i].end());
      if (under_test[i] || all.size() > 1) {
        l += std::string(" ") + kAxisNames[i] + "=" + g.axes.display[i];
      }
    }
    return l;
  };

  // Pair the configurations.
  std::vector<Pairing> pairings;
  std::set<const Group*> used_base;
  for (const auto& [ck, cg] : cand_groups) {
    std::vector<const Group*> matches, exact;
    for (const auto& [bk, bg] : base_groups) {
      bool agree = true;
      for (size_t i = 0; i < kAxisCount && agree; ++i) {
        if (!under_test[i] && bk[i] != ck[i]) agree = false;
      }
      if (agree) matches.push_back(&bg);
      if (bk == ck) exact.push_back(&bg);
    }
    if (matches.empty()) {
      r.unmatched_candidate.push_back(label(cg));
      continue;
    }
    const Group* chosen = nullptr;
    if (matches.size() == 1) {
      chosen = matches.front();
    } else if (exact.size() == 1) {
      chosen = exact.front();
    } else {
      std::string names;
      for (const Group* m : matches) names += "\n  " + label(*m);
      return Status::InvalidArgument(
          "candidate configuration '" + label(cg) + "' matches " + std::to_string(matches.size()) +
          " baseline configurations (axes under test: " +
          join(std::set<std::string>(r.axes_under_test.begin(), r.axes_under_test.end())) +
          "):" + names +
          "\ngate campaigns that differ in one thing, or gate each configuration separately");
    }
    used_base.insert(chosen);
    pairings.push_back({chosen, &cg});
    r.pairs.push_back({label(*chosen), label(cg)});
  }
  for (const auto& [bk, bg] : base_groups) {
    if (!used_base.count(&bg)) r.unmatched_baseline.push_back(label(bg));
  }
  if (pairings.empty()) {
    return Status::InvalidArgument(
        "no candidate configuration matches a baseline configuration (axes that differ: " +
        (r.axes_under_test.empty()
             ? std::string("none")
             : join(std::set<std::string>(r.axes_under_test.begin(), r.axes_under_test.end()))) +
        ")");
  }

  // Cells.
  std::vector<Accum> cell_accums;
  std::vector<Accum> shift_accums;
  for (size_t p = 0; p < pairings.size(); ++p) {
    const Group& bg = *pairings[p].base;
    const Group& cg = *pairings[p].cand;
    std::map<DesignKey, const CampaignSample*> base_by_key;
    for (const CampaignSample* s : bg.samples) base_by_key.emplace(KeyOf(*s), s);
    std::map<std::tuple<int64_t, double>, size_t> index;
    auto cell_of = [&](const CampaignSample& s) -> Accum& {
      int64_t len = 0;
      double pos = 0;
      if (o.by != GateGranularity::kConfig) len = s.job.spec.context_length;
      if (o.by == GateGranularity::kCell) pos = s.job.spec.needle_position;
      auto [it, inserted] = index.emplace(std::make_tuple(len, pos), cell_accums.size());
      if (inserted) {
        cell_accums.emplace_back();
        GateCell c;
        c.pair = p;
        if (o.by != GateGranularity::kConfig) c.length = len;
        if (o.by == GateGranularity::kCell) c.position = pos;
        r.cells.push_back(c);
      }
      return cell_accums[it->second];
    };
    for (const CampaignSample* s : bg.samples) AddPairOrSide(cell_of(*s), s, nullptr);
    for (const CampaignSample* s : cg.samples) {
      Accum& a = cell_of(*s);
      AddPairOrSide(a, nullptr, s);
      // Each baseline job pairs at most once (a side may hold two jobs of one design point,
      // e.g. with and without probes).
      auto partner = base_by_key.find(KeyOf(*s));
      if (partner != base_by_key.end()) {
        AddPairing(a, *partner->second, *s);
        base_by_key.erase(partner);
      }
    }

    // Boundary shift.
    const ConfigBoundary bb = BoundaryOf(bg, o.criterion), cb = BoundaryOf(cg, o.criterion);
    BoundaryShift shift;
    shift.pair = p;
    shift.baseline_l_pass = bb.found_up_to;
    shift.baseline_l_fail = bb.lost_from;
    shift.candidate_l_pass = cb.found_up_to;
    shift.candidate_l_fail = cb.lost_from;
    Accum sa;
    // The candidate's first undecided length below the baseline's found_up_to, if it comes
    // before any decided loss: what keeps a shift from being claimed or ruled out.
    std::optional<int64_t> cand_undecided;
    if (bb.found_up_to) {
      for (const LengthSummary& l : cb.lengths) {
        if (l.length >= *bb.found_up_to || l.verdict == Verdict::kLost) break;
        if (l.verdict == Verdict::kUndecided) {
          cand_undecided = l.length;
          break;
        }
      }
    }
    if (!bb.found_up_to) {
      shift.summary =
          "the baseline is not decided found at every position at any length; no shift test";
      sa.test.verdict = GateVerdict::kPass;
      sa.test.reason = shift.summary;
    } else if (cand_undecided) {
      shift.summary = "the candidate is undecided at " + FormatThousands(*cand_undecided) +
                      ", below the baseline's found-up-to " + FormatThousands(*bb.found_up_to) +
                      ": not a shift until decided";
      if (cb.nearest_undecided == cand_undecided)
        shift.summary += " (" + DescribeMoreTrials(cb) + ")";
      sa.test.verdict = GateVerdict::kInsufficient;
      sa.test.reason = shift.summary;
    } else if (!cb.lost_from) {
      shift.summary = "the candidate is decided lost at no tested length";
      sa.test.verdict = GateVerdict::kPass;
      sa.test.reason = shift.summary;
    } else if (*cb.lost_from >= *bb.found_up_to) {
      shift.summary = "candidate lost from " + FormatThousands(*cb.lost_from) +
                      ", not below the baseline's found-up-to " + FormatThousands(*bb.found_up_to);
      sa.test.verdict = GateVerdict::kPass;
      sa.test.reason = shift.summary;
    } else {
      shift.shifted = true;
      const int64_t lf = *cb.lost_from;
      bool base_tested_lf = false;
      for (const LengthSummary& l : bb.lengths) base_tested_lf |= l.length == lf;
      shift.reference_length = base_tested_lf ? lf : *bb.found_up_to;
      std::map<DesignKey, const CampaignSample*> ref_by_key;
      for (const CampaignSample* s : bg.samples) {
        if (s->job.spec.context_length != *shift.reference_length) continue;
        AddPairOrSide(sa, s, nullptr);
        ref_by_key.emplace(KeyOf(*s), s);
      }
      for (const CampaignSample* s : cg.samples) {
        if (s->job.spec.context_length != lf) continue;
        AddPairOrSide(sa, nullptr, s);
        auto partner = ref_by_key.find(KeyOf(*s));
        if (partner != ref_by_key.end()) {
          AddPairing(sa, *partner->second, *s);
          ref_by_key.erase(partner);
        }
      }
      shift.summary = "candidate lost from " + FormatThousands(lf) +
                      ", below the baseline's found-up-to " + FormatThousands(*bb.found_up_to);
    }
    r.shifts.push_back(shift);
    shift_accums.push_back(std::move(sa));
  }

  // Cells in order: pair, then length, then position.
  {
    std::vector<size_t> order(r.cells.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&r](size_t x, size_t y) {
      const GateCell& a = r.cells[x];
      const GateCell& b = r.cells[y];
      if (a.pair != b.pair) return a.pair < b.pair;
      if (a.length != b.length) return a.length < b.length;
      if (a.position && b.position && *a.position != *b.position) {
        return render_internal::PositionLess(*a.position, *b.position);
      }
      return false;
    });
    std::vector<GateCell> cells;
    std::vector<Accum> accums;
    for (size_t i : order) {
      cells.push_back(std::move(r.cells[i]));
      accums.push_back(std::move(cell_accums[i]));
    }
    r.cells = std::move(cells);
    cell_accums = std::move(accums);
  }

  // Tests, Holm over every tested one, verdicts.
  for (Accum& a : cell_accums) ChooseTest(a.test, a.baseline_seen, a.candidate_seen, o);
  for (size_t i = 0; i < shift_accums.size(); ++i) {
    Accum& a = shift_accums[i];
    if (r.shifts[i].shifted) ChooseTest(a.test, a.baseline_seen, a.candidate_seen, o);
  }
  std::vector<GateTest*> family;
  for (Accum& a : cell_accums) {
    if (a.test.method != GateMethod::kNone) family.push_back(&a.test);
  }
  for (Accum& a : shift_accums) {
    if (a.test.method != GateMethod::kNone) family.push_back(&a.test);
  }
  DecideTests(family, o);
  r.tests = static_cast<int64_t>(family.size());
  if (disagreeing != nullptr) disagreeing->clear();
  auto disagree = [](const Accum& a) {
    return a.test.method == GateMethod::kMcNemar ? a.lost_keys : a.miss_keys;
  };
  for (size_t i = 0; i < cell_accums.size(); ++i) {
    if (disagreeing != nullptr) disagreeing->push_back(disagree(cell_accums[i]));
    r.cells[i].test = std::move(cell_accums[i].test);
  }
  for (size_t i = 0; i < shift_accums.size(); ++i) {
    if (disagreeing != nullptr) disagreeing->push_back(disagree(shift_accums[i]));
    r.shifts[i].test = std::move(shift_accums[i].test);
  }
  return r;
}

}  // namespace gate_internal

Result<GateGranularity> ParseGateGranularity(const std::string& name) {
  if (name == "length") return GateGranularity::kLength;
  if (name == "cell") return GateGranularity::kCell;
  if (name == "config") return GateGranularity::kConfig;
  return Status::InvalidArgument("--by must be length, cell or config, not '" + name + "'");
}

Status GateOptions::Validate() const {
  if (!(tolerance >= 0.0 && tolerance < 1.0)) {
    return Status::InvalidArgument("--tolerance must be in [0, 1), not " +
                                   FormatNumber(tolerance, 4));
  }
  if (!(alpha > 0.0 && alpha < 1.0)) {
    return Status::InvalidArgument("--alpha must be in (0, 1), not " + FormatNumber(alpha, 4));
  }
  if (min_trials < 1) {
    return Status::InvalidArgument("--min-trials must be at least 1, not " +
                                   std::to_string(min_trials));
  }
  if (Status st = criterion.Validate(); !st.ok()) {
    return Status::InvalidArgument("criterion: " + st.message());
  }
  return Status::Ok();
}

std::string_view GateVerdictName(GateVerdict v) {
  switch (v) {
    case GateVerdict::kPass:
      return "pass";
    case GateVerdict::kRegression:
      return "regression";
    case GateVerdict::kImproved:
      return "improved";
    case GateVerdict::kInsufficient:
      return "insufficient";
    case GateVerdict::kFlaky:
      return "flaky";
  }
  return "pass";
}

std::string_view GateMethodName(GateMethod m) {
  switch (m) {
    case GateMethod::kNone:
      return "none";
    case GateMethod::kMcNemar:
      return "mcnemar";
    case GateMethod::kNewcombe:
      return "newcombe";
  }
  return "none";
}

Result<GateReport> RunGate(const std::vector<CampaignSample>& baseline,
                           const std::vector<CampaignSample>& candidate,
                           const GateOptions& options) {
  NW_ASSIGN_OR_RETURN(GateReport r,
                      gate_internal::Compute(baseline, candidate, options, {}, nullptr));
  gate_internal::Tally(r);
  return r;
}

}  // namespace nw::report
