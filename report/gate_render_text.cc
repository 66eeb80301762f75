// The gate rendered for people: the terminal text and the Markdown summary (a CI job's step
// summary). CellName and SideText are shared with the JUnit renderer.
#include <cctype>
#include <string>
#include <string_view>

#include "report/gate.h"
#include "report/gate_internal.h"
#include "report/stats.h"

namespace nw::report {
namespace {

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
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

}  // namespace

namespace gate_internal {

std::string CellName(const GateCell& c) {
  if (c.position) {
    return "length " + FormatThousands(*c.length) + " position " + FormatPosition(*c.position);
  }
  if (c.length) return "length " + FormatThousands(*c.length);
  return "all lengths";
}

std::string SideText(const SideCounts& c) {
  std::string s = c.trials > 0 ? FormatRate(c.passes, c.trials) : "-";
  if (c.errors > 0) s += " e" + std::to_string(c.errors);
  if (c.failed > 0) s += " f" + std::to_string(c.failed);
  if (c.pending > 0) s += " p" + std::to_string(c.pending);
  return s;
}

}  // namespace gate_internal

using gate_internal::CellName;
using gate_internal::FormatP;
using gate_internal::SideText;
using gate_internal::Signed;

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

}  // namespace nw::report
