#include "report/gate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <set>
#include <tuple>
#include <utility>

#include "report/boundary.h"
#include "report/escape.h"
#include "report/render_util.h"
#include "report/significance.h"

namespace nw::report {
namespace {

using ojson = nlohmann::ordered_json;

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

double Rate(const SideCounts& c) {
  return c.trials > 0 ? static_cast<double>(c.passes) / static_cast<double>(c.trials) : 0.0;
}

// Chooses the method and computes the unadjusted p-values (verdicts come after Holm).
void Evaluate(Accum& a, const GateOptions& o) {
  GateTest& t = a.test;
  if (!a.baseline_seen || !a.candidate_seen) {
    t.method = GateMethod::kNone;
    t.verdict = GateVerdict::kInsufficient;
    t.reason = !a.baseline_seen ? "not tested by the baseline" : "not tested by the candidate";
    return;
  }
  if (t.pairs >= o.min_trials) {
    t.method = GateMethod::kMcNemar;
    t.drop = static_cast<double>(t.lost - t.gained) / static_cast<double>(t.pairs);
    t.p_regression = McNemarExactOneSided(t.lost, t.gained);
    t.p_improvement = McNemarExactOneSided(t.gained, t.lost);
    return;
  }
  if (t.baseline.trials >= o.min_trials && t.candidate.trials >= o.min_trials) {
    t.method = GateMethod::kNewcombe;
    t.drop = Rate(t.baseline) - Rate(t.candidate);
    t.p_regression = NewcombeOneSidedP(t.baseline.passes, t.baseline.trials, t.candidate.passes,
                                       t.candidate.trials);
    t.p_improvement = NewcombeOneSidedP(t.candidate.passes, t.candidate.trials, t.baseline.passes,
                                        t.baseline.trials);
    return;
  }
  t.method = GateMethod::kNone;
  t.verdict = GateVerdict::kInsufficient;
  t.reason = "too few answers: baseline " + std::to_string(t.baseline.trials) + ", candidate " +
             std::to_string(t.candidate.trials) + ", pairs " + std::to_string(t.pairs) + " (min " +
             std::to_string(o.min_trials) + ")";
}

std::string FormatP(double p) {
  if (p < 0.0001) return "<0.0001";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4f", p);
  return buf;
}

std::string FormatRate(int64_t passes, int64_t trials) {
  return std::to_string(passes) + "/" + std::to_string(trials);
}

std::string Signed(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%+.2f", v);
  return buf;
}

// The verdict of a tested GateTest after Holm.
void Decide(GateTest& t, const GateOptions& o) {
  if (t.method == GateMethod::kNone) return;
  const std::string evidence =
      t.method == GateMethod::kMcNemar
          ? "exact McNemar on " + std::to_string(t.pairs) + " pairs: " + std::to_string(t.lost) +
                " lost, " + std::to_string(t.gained) + " gained"
          : "Newcombe (Wilson) on " + FormatRate(t.baseline.passes, t.baseline.trials) + " vs " +
                FormatRate(t.candidate.passes, t.candidate.trials);
  const std::string ps = "p " + FormatP(t.p_regression) + ", Holm " + FormatP(t.p_adjusted) +
                         ", drop " + Signed(t.drop);
  if (t.p_adjusted < o.alpha && t.drop > o.tolerance) {
    t.verdict = GateVerdict::kRegression;
    t.reason = evidence + "; " + ps + " > tolerance " + FormatNumber(o.tolerance, 3);
  } else if (t.p_improvement_adjusted < o.alpha && -t.drop > o.tolerance) {
    t.verdict = GateVerdict::kImproved;
    t.reason = evidence + "; improvement p " + FormatP(t.p_improvement) + ", Holm " +
               FormatP(t.p_improvement_adjusted);
  } else {
    t.verdict = GateVerdict::kPass;
    t.reason = evidence + "; " + ps;
    if (t.p_adjusted < o.alpha) {
      t.reason += " (significant, within tolerance " + FormatNumber(o.tolerance, 3) + ")";
    }
  }
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

// The core, with candidate outcomes optionally replaced (after reruns).
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
  for (Accum& a : cell_accums) Evaluate(a, o);
  for (size_t i = 0; i < shift_accums.size(); ++i) {
    if (r.shifts[i].shifted) Evaluate(shift_accums[i], o);
  }
  std::vector<GateTest*> family;
  for (Accum& a : cell_accums) {
    if (a.test.method != GateMethod::kNone) family.push_back(&a.test);
  }
  for (Accum& a : shift_accums) {
    if (a.test.method != GateMethod::kNone) family.push_back(&a.test);
  }
  std::vector<double> pr, pi;
  for (GateTest* t : family) {
    pr.push_back(t->p_regression);
    pi.push_back(t->p_improvement);
  }
  const std::vector<double> ar = HolmAdjust(pr), ai = HolmAdjust(pi);
  for (size_t i = 0; i < family.size(); ++i) {
    family[i]->p_adjusted = ar[i];
    family[i]->p_improvement_adjusted = ai[i];
    Decide(*family[i], o);
  }
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

void Tally(GateReport& r) {
  r.regressions = r.improvements = r.insufficient = r.flaky = 0;
  auto add = [&r](const GateTest& t) {
    switch (t.verdict) {
      case GateVerdict::kRegression:
        ++r.regressions;
        break;
      case GateVerdict::kImproved:
        ++r.improvements;
        break;
      case GateVerdict::kInsufficient:
        ++r.insufficient;
        break;
      case GateVerdict::kFlaky:
        ++r.flaky;
        break;
      case GateVerdict::kPass:
        break;
    }
  };
  for (const GateCell& c : r.cells) add(c.test);
  for (const BoundaryShift& s : r.shifts) add(s.test);
  if (r.regressions > 0) {
    r.exit_code = 1;
    r.decision = "fail: regression";
  } else if (r.tests == 0) {
    r.exit_code = 2;
    r.decision = "fail: not enough evidence: no cell had enough answers to test";
  } else if (r.options.strict && r.insufficient > 0) {
    r.exit_code = 2;
    r.decision = "fail: not enough evidence: --strict and insufficient cells";
  } else {
    r.exit_code = 0;
    r.decision = "pass";
  }
}

// ---- Rendering helpers ----

std::string CellName(const GateCell& c) {
  if (c.position) {
    return "length " + FormatThousands(*c.length) + " position " + FormatPosition(*c.position);
  }
  if (c.length) return "length " + FormatThousands(*c.length);
  return "all lengths";
}

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string SideText(const SideCounts& c) {
  std::string s = c.trials > 0 ? FormatRate(c.passes, c.trials) : "-";
  if (c.errors > 0) s += " e" + std::to_string(c.errors);
  if (c.failed > 0) s += " f" + std::to_string(c.failed);
  if (c.pending > 0) s += " p" + std::to_string(c.pending);
  return s;
}

std::string PadRight(const std::string& s, size_t w) {
  return s.size() >= w ? s : s + std::string(w - s.size(), ' ');
}
std::string PadLeft(const std::string& s, size_t w) {
  return s.size() >= w ? s : std::string(w - s.size(), ' ') + s;
}

std::string Header(const GateReport& r) {
  std::string s = "gate: " + (r.baseline_source.empty() ? r.baseline_name : r.baseline_source) +
                  "  ->  candidate " + r.candidate_name + "\n";
  s += "under test: ";
  if (r.axes_under_test.empty()) {
    s += "nothing differs in the configurations (same settings on both sides)";
  } else {
    for (size_t i = 0; i < r.axes_under_test.size(); ++i) {
      const auto& v = r.axis_values.at(r.axes_under_test[i]);
      s += (i > 0 ? "; " : "") + r.axes_under_test[i] + " " + v.first + " -> " + v.second;
    }
  }
  s += "\n";
  const char* by = r.options.by == GateGranularity::kLength ? "length"
                   : r.options.by == GateGranularity::kCell ? "length x position"
                                                            : "configuration";
  s += "rule: one-sided, alpha " + FormatNumber(r.options.alpha, 3) + " (Holm over " +
       std::to_string(r.tests) + (r.tests == 1 ? " test" : " tests") + "), tolerance " +
       FormatNumber(r.options.tolerance, 3) + ", min trials " +
       std::to_string(r.options.min_trials) + ", cells by " + by +
       (r.options.strict ? ", strict" : "") +
       (r.rerun_times > 0 ? ", reruns " + std::to_string(r.rerun_times) : "") + "\n";
  s += "boundary verdicts: " + r.options.criterion.ToString() + "\n";
  return s;
}

std::string Footer(const GateReport& r) {
  std::string s = "result: " + Upper(r.decision.substr(0, r.decision.find(':'))) +
                  (r.decision.find(':') != std::string::npos
                       ? " (" + r.decision.substr(r.decision.find(':') + 2) + ")"
                       : "") +
                  ": " + std::to_string(r.regressions) + " regressed, " +
                  std::to_string(r.improvements) + " improved, " + std::to_string(r.insufficient) +
                  " insufficient, " + std::to_string(r.flaky) + " flaky; exit " +
                  std::to_string(r.exit_code) + "\n";
  return s;
}

ojson SideJson(const SideCounts& c) {
  return {{"trials", c.trials},
          {"passes", c.passes},
          {"errors", c.errors},
          {"pending", c.pending},
          {"failed", c.failed}};
}

ojson TestJson(const GateTest& t) {
  ojson j;
  j["verdict"] = std::string(GateVerdictName(t.verdict));
  j["method"] = std::string(GateMethodName(t.method));
  j["baseline"] = SideJson(t.baseline);
  j["candidate"] = SideJson(t.candidate);
  j["pairs"] = t.pairs;
  j["same_prompt_pairs"] = t.same_prompt_pairs;
  j["lost"] = t.lost;
  j["gained"] = t.gained;
  j["drop"] = t.drop;
  j["p_regression"] = t.p_regression;
  j["p_adjusted"] = t.p_adjusted;
  j["p_improvement"] = t.p_improvement;
  j["p_improvement_adjusted"] = t.p_improvement_adjusted;
  j["reason"] = t.reason;
  j["rerun_jobs"] = t.rerun_jobs;
  j["flaky_jobs"] = t.flaky_jobs;
  return j;
}

ojson OptJson(const std::optional<int64_t>& v) { return v ? ojson(*v) : ojson(nullptr); }

}  // namespace

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
  NW_ASSIGN_OR_RETURN(GateReport r, Compute(baseline, candidate, options, {}, nullptr));
  Tally(r);
  return r;
}

Result<GateReport> RunGateWithReruns(const std::vector<CampaignSample>& baseline,
                                     const std::vector<CampaignSample>& candidate,
                                     const GateOptions& options, int times, Rerunner& rerunner,
                                     Store& store, const std::string& gate_label, int64_t now_ms) {
  std::vector<std::vector<std::string>> disagreeing;
  NW_ASSIGN_OR_RETURN(GateReport first, Compute(baseline, candidate, options, {}, &disagreeing));
  Tally(first);
  if (times <= 0 || first.regressions == 0) return first;

  // The tests that regressed, in Compute's order (cells, then shifts), and their jobs.
  std::vector<bool> regressed;
  for (const GateCell& c : first.cells)
    regressed.push_back(c.test.verdict == GateVerdict::kRegression);
  for (const BoundaryShift& s : first.shifts) {
    regressed.push_back(s.test.verdict == GateVerdict::kRegression);
  }
  std::map<std::string, const CampaignSample*> by_key;
  for (const CampaignSample& s : candidate) by_key[s.job.key] = &s;
  std::vector<std::string> keys;
  std::set<std::string> seen;
  for (size_t i = 0; i < regressed.size(); ++i) {
    if (!regressed[i]) continue;
    for (const std::string& k : disagreeing[i]) {
      if (seen.insert(k).second) keys.push_back(k);
    }
  }
  std::vector<JobSpec> specs;
  for (const std::string& k : keys) specs.push_back(by_key.at(k)->job.spec);

  // Outcomes per job: the original result, then each rerun.
  std::map<std::string, std::vector<std::pair<int64_t, Outcome>>> runs;
  for (const std::string& k : keys) {
    const CampaignSample& s = *by_key.at(k);
    runs[k].emplace_back(s.result_id, s.result->outcome);
  }
  for (int t = 0; t < times; ++t) {
    NW_ASSIGN_OR_RETURN(auto fresh, rerunner.RunOnce(specs));
    for (const std::string& k : keys) {
      auto it = fresh.find(k);
      if (it != fresh.end()) runs[k].emplace_back(it->second.first, it->second.second.outcome);
    }
  }
  std::vector<FlakyVerdict> verdicts;
  std::map<std::string, Outcome> overrides;
  std::set<std::string> flaky;
  for (const std::string& k : keys) {
    FlakyVerdict v;
    v.job_key = k;
    v.gate = gate_label;
    v.decided_ms = now_ms;
    for (const auto& [id, outcome] : runs[k]) {
      ++v.runs;
      v.result_ids.push_back(id);
      if (outcome == Outcome::kPass) {
        ++v.passes;
      } else if (outcome == Outcome::kMiss) {
        ++v.misses;
      } else {
        ++v.errors;
      }
    }
    if (v.passes > 0 && v.misses > 0) {
      v.verdict = "flaky";
      flaky.insert(k);
    } else if (v.passes > 0) {
      v.verdict = "stable_pass";
    } else if (v.misses > 0) {
      v.verdict = "stable_miss";
    } else {
      v.verdict = "no_answer";
    }
    if (v.passes + v.misses > 0) {
      overrides[k] = v.passes > v.misses ? Outcome::kPass : Outcome::kMiss;
    }
    verdicts.push_back(std::move(v));
  }
  NW_RETURN_IF_ERROR(store.RecordFlakyVerdicts(verdicts));

  NW_ASSIGN_OR_RETURN(GateReport second, Compute(baseline, candidate, options, overrides, nullptr));
  second.rerun_times = times;
  auto annotate = [&](GateTest& t, size_t i) {
    if (!regressed[i]) return;
    t.rerun_jobs = disagreeing[i];
    for (const std::string& k : disagreeing[i]) {
      if (flaky.count(k)) t.flaky_jobs.push_back(k);
    }
    if (t.verdict != GateVerdict::kRegression) {
      t.verdict = GateVerdict::kFlaky;
      t.reason = "regressed before " + std::to_string(times) + " reruns of " +
                 std::to_string(t.rerun_jobs.size()) + " jobs (" +
                 std::to_string(t.flaky_jobs.size()) + " flaky); now: " + t.reason;
    } else {
      t.reason += "; still regressed after " + std::to_string(times) + " reruns of " +
                  std::to_string(t.rerun_jobs.size()) + " jobs (" +
                  std::to_string(t.flaky_jobs.size()) + " flaky)";
    }
  };
  size_t i = 0;
  for (GateCell& c : second.cells) annotate(c.test, i++);
  for (BoundaryShift& s : second.shifts) annotate(s.test, i++);
  Tally(second);
  return second;
}

std::string RenderGateText(const GateReport& r) {
  std::string s = Header(r);
  for (size_t p = 0; p < r.pairs.size(); ++p) {
    s += "\n" + r.pairs[p].baseline_config + "\n  -> " + r.pairs[p].candidate_config + "\n";
    const BoundaryShift& sh = r.shifts[p];
    s += "  boundary: baseline found up to " +
         (sh.baseline_l_pass ? FormatThousands(*sh.baseline_l_pass) : std::string("-")) +
         ", lost from " +
         (sh.baseline_l_fail ? FormatThousands(*sh.baseline_l_fail) : std::string("-")) +
         "; candidate found up to " +
         (sh.candidate_l_pass ? FormatThousands(*sh.candidate_l_pass) : std::string("-")) +
         ", lost from " +
         (sh.candidate_l_fail ? FormatThousands(*sh.candidate_l_fail) : std::string("-")) + "\n";
    s += "  boundary shift: " + Upper(GateVerdictName(sh.test.verdict)) + ": " +
         (sh.shifted ? sh.summary + "; " + sh.test.reason : sh.summary) + "\n";
    s += "    " + PadRight("cell", 26) + PadLeft("baseline", 12) + PadLeft("candidate", 12) +
         PadLeft("pairs", 7) + PadLeft("lost", 6) + PadLeft("gained", 8) + PadLeft("drop", 7) +
         PadLeft("p(Holm)", 9) + "  verdict\n";
    for (const GateCell& c : r.cells) {
      if (c.pair != p) continue;
      const GateTest& t = c.test;
      const bool tested = t.method != GateMethod::kNone;
      s += "    " + PadRight(CellName(c), 26) + PadLeft(SideText(t.baseline), 12) +
           PadLeft(SideText(t.candidate), 12) + PadLeft(std::to_string(t.pairs), 7) +
           PadLeft(std::to_string(t.lost), 6) + PadLeft(std::to_string(t.gained), 8) +
           PadLeft(tested ? Signed(t.drop) : "-", 7) +
           PadLeft(tested ? FormatP(t.p_adjusted) : "-", 9) + "  " +
           Upper(GateVerdictName(t.verdict));
      if (t.verdict != GateVerdict::kPass) s += ": " + t.reason;
      s += "\n";
    }
  }
  for (const std::string& c : r.unmatched_baseline) {
    s += "\nnot in the candidate: " + c + "\n";
  }
  for (const std::string& c : r.unmatched_candidate) {
    s += "\nnot in the baseline: " + c + "\n";
  }
  s += "\n" + Footer(r);
  return s;
}

std::string RenderGateMarkdown(const GateReport& r) {
  std::string s = "# Gate: `" + r.candidate_name + "` against `" + r.baseline_name + "`\n\n";
  s += "**Result: " + r.decision + "** (exit " + std::to_string(r.exit_code) +
       "): " + std::to_string(r.regressions) + " regressed, " + std::to_string(r.improvements) +
       " improved, " + std::to_string(r.insufficient) + " insufficient, " +
       std::to_string(r.flaky) + " flaky.\n\n";
  std::string header = Header(r);
  // The header as a list.
  size_t start = 0;
  while (start < header.size()) {
    const size_t end = header.find('\n', start);
    s += "- " + header.substr(start, end - start) + "\n";
    start = end + 1;
  }
  for (size_t p = 0; p < r.pairs.size(); ++p) {
    const BoundaryShift& sh = r.shifts[p];
    s += "\n## `" + r.pairs[p].candidate_config + "`\n\nagainst `" + r.pairs[p].baseline_config +
         "`\n\n";
    s += "Boundary shift: **" + std::string(GateVerdictName(sh.test.verdict)) +
         "**: " + (sh.shifted ? sh.summary + "; " + sh.test.reason : sh.summary) + ".\n\n";
    s += "| cell | baseline | candidate | pairs | lost | gained | drop | p (Holm) | verdict |\n"
         "|---|---:|---:|---:|---:|---:|---:|---:|---|\n";
    for (const GateCell& c : r.cells) {
      if (c.pair != p) continue;
      const GateTest& t = c.test;
      const bool tested = t.method != GateMethod::kNone;
      s += "| " + CellName(c) + " | " + SideText(t.baseline) + " | " + SideText(t.candidate) +
           " | " + std::to_string(t.pairs) + " | " + std::to_string(t.lost) + " | " +
           std::to_string(t.gained) + " | " + (tested ? Signed(t.drop) : "-") + " | " +
           (tested ? FormatP(t.p_adjusted) : "-") + " | " +
           (t.verdict == GateVerdict::kRegression ? "**regression**"
                                                  : std::string(GateVerdictName(t.verdict))) +
           (t.verdict == GateVerdict::kPass ? "" : ": " + t.reason) + " |\n";
    }
  }
  if (!r.unmatched_baseline.empty() || !r.unmatched_candidate.empty()) {
    s += "\n## Not compared\n\n";
    for (const std::string& c : r.unmatched_baseline) s += "- only in the baseline: `" + c + "`\n";
    for (const std::string& c : r.unmatched_candidate) {
      s += "- only in the candidate: `" + c + "`\n";
    }
  }
  s += "\nCells: passes/answers; eN = runs without an answer (never misses), fN = failed "
       "(retries used up), pN = pending.\n";
  return s;
}

ojson RenderGateJson(const GateReport& r) {
  ojson j;
  j["baseline"] = r.baseline_name;
  j["baseline_source"] = r.baseline_source;
  j["candidate"] = r.candidate_name;
  j["decision"] = r.decision;
  j["exit_code"] = r.exit_code;
  j["options"] = {{"tolerance", r.options.tolerance},
                  {"alpha", r.options.alpha},
                  {"min_trials", r.options.min_trials},
                  {"by", r.options.by == GateGranularity::kLength ? "length"
                         : r.options.by == GateGranularity::kCell ? "cell"
                                                                  : "config"},
                  {"strict", r.options.strict},
                  {"pass_rate", r.options.criterion.pass_rate},
                  {"confidence", r.options.criterion.confidence},
                  {"reruns", r.rerun_times}};
  ojson axes = ojson::array();
  for (const std::string& a : r.axes_under_test) {
    axes.push_back({{"axis", a},
                    {"baseline", r.axis_values.at(a).first},
                    {"candidate", r.axis_values.at(a).second}});
  }
  j["under_test"] = axes;
  j["counts"] = {{"tests", r.tests},
                 {"regressions", r.regressions},
                 {"improvements", r.improvements},
                 {"insufficient", r.insufficient},
                 {"flaky", r.flaky}};
  ojson pairs = ojson::array();
  for (size_t p = 0; p < r.pairs.size(); ++p) {
    const BoundaryShift& sh = r.shifts[p];
    ojson pj;
    pj["baseline_config"] = r.pairs[p].baseline_config;
    pj["candidate_config"] = r.pairs[p].candidate_config;
    ojson shift = TestJson(sh.test);
    shift["shifted"] = sh.shifted;
    shift["baseline_l_pass"] = OptJson(sh.baseline_l_pass);
    shift["baseline_l_fail"] = OptJson(sh.baseline_l_fail);
    shift["candidate_l_pass"] = OptJson(sh.candidate_l_pass);
    shift["candidate_l_fail"] = OptJson(sh.candidate_l_fail);
    shift["reference_length"] = OptJson(sh.reference_length);
    shift["summary"] = sh.summary;
    pj["boundary_shift"] = shift;
    ojson cells = ojson::array();
    for (const GateCell& c : r.cells) {
      if (c.pair != p) continue;
      ojson cj = TestJson(c.test);
      cj["length"] = OptJson(c.length);
      cj["position"] = c.position ? ojson(*c.position) : ojson(nullptr);
      cells.push_back(std::move(cj));
    }
    pj["cells"] = cells;
    pairs.push_back(std::move(pj));
  }
  j["pairs"] = pairs;
  j["unmatched_baseline"] = r.unmatched_baseline;
  j["unmatched_candidate"] = r.unmatched_candidate;
  return j;
}

std::string RenderGateJUnit(const GateReport& r) {
  auto testcase = [&r](const std::string& suite, const std::string& name, const GateTest& t) {
    std::string s = "    <testcase classname=\"" + EscapeMarkup(suite, Markup::kXml) +
                    "\" name=\"" + EscapeMarkup(name, Markup::kXml) + "\">";
    const std::string msg = std::string(GateVerdictName(t.verdict)) + ": " + t.reason;
    if (t.verdict == GateVerdict::kRegression ||
        (t.verdict == GateVerdict::kInsufficient && r.options.strict)) {
      s += "<failure message=\"" + EscapeMarkup(msg, Markup::kXml) + "\" type=\"" +
           std::string(GateVerdictName(t.verdict)) + "\">baseline " + SideText(t.baseline) +
           ", candidate " + SideText(t.candidate) + "</failure>";
    } else if (t.verdict == GateVerdict::kInsufficient) {
      s += "<skipped message=\"" + EscapeMarkup(msg, Markup::kXml) + "\"/>";
    } else if (!t.reason.empty()) {
      s += "<system-out>" + EscapeMarkup(msg, Markup::kXml) + "</system-out>";
    }
    return s + "</testcase>\n";
  };
  auto failing = [&r](const GateTest& t) {
    return t.verdict == GateVerdict::kRegression ||
           (t.verdict == GateVerdict::kInsufficient && r.options.strict);
  };
  auto skipped = [&r](const GateTest& t) {
    return t.verdict == GateVerdict::kInsufficient && !r.options.strict;
  };
  int64_t total = 0, failures = 0, skips = 0;
  std::string suites;
  for (size_t p = 0; p < r.pairs.size(); ++p) {
    const std::string suite = r.pairs[p].candidate_config;
    int64_t n = 0, f = 0, k = 0;
    std::string cases;
    for (const GateCell& c : r.cells) {
      if (c.pair != p) continue;
      ++n;
      f += failing(c.test) ? 1 : 0;
      k += skipped(c.test) ? 1 : 0;
      cases += testcase(suite, CellName(c), c.test);
    }
    ++n;
    f += failing(r.shifts[p].test) ? 1 : 0;
    k += skipped(r.shifts[p].test) ? 1 : 0;
    cases += testcase(suite, "boundary shift", r.shifts[p].test);
    total += n;
    failures += f;
    skips += k;
    suites += "  <testsuite name=\"" + EscapeMarkup(suite, Markup::kXml) + "\" tests=\"" +
              std::to_string(n) + "\" failures=\"" + std::to_string(f) +
              "\" errors=\"0\" skipped=\"" + std::to_string(k) + "\">\n" + cases +
              "  </testsuite>\n";
  }
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"" +
         EscapeMarkup("nw gate " + r.baseline_name + " -> " + r.candidate_name, Markup::kXml) +
         "\" tests=\"" + std::to_string(total) + "\" failures=\"" + std::to_string(failures) +
         "\" errors=\"0\" skipped=\"" + std::to_string(skips) + "\">\n" + suites +
         "</testsuites>\n";
}

}  // namespace nw::report
