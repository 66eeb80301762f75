// The gate rendered for machines: JSON (every number a number) and JUnit XML (one testsuite per
// configuration pair) for CI systems.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "report/escape.h"
#include "report/gate.h"
#include "report/gate_internal.h"
#include "report/stats.h"

namespace nw::report {
namespace {

using ojson = nlohmann::ordered_json;
using gate_internal::CellName;
using gate_internal::SideText;

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
