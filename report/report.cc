#include "report/report.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <utility>

#include "common/clopper_pearson.h"
#include "report/render_util.h"
#include "report/stats.h"

namespace nw::report {
namespace {

using render_internal::CellAt;
using render_internal::CellText;
using render_internal::Grid;
using render_internal::MakeGrid;
using render_internal::OutcomeList;
using render_internal::PositionLess;
using render_internal::ProgressLine;

using json = nlohmann::json;

size_t OutcomeIndex(Outcome o) {
  for (size_t i = 0; i < kOutcomeOrder.size(); ++i) {
    if (kOutcomeOrder[i] == o) return i;
  }
  return 0;
}

const char* CellColor(const HeatmapCell* c) {
  if (c == nullptr || c->trials == 0) return nullptr;
  if (c->passes == c->trials) return "\x1b[32m";  // green: found every time
  if (c->passes == 0) return "\x1b[31m";          // red: lost every time
  return "\x1b[33m";                              // yellow: sometimes
}

std::string PadLeft(const std::string& s, size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

std::string ProbeLine(const LayerProbeStats& s) {
  std::string line = "layer " + std::to_string(s.layer) + ": " + FormatThousands(s.in_topk_last) +
                     "/" + FormatThousands(s.answers) + " answers (" +
                     FormatPercent(s.in_topk_last, s.answers) + ")";
  if (s.median_rank) {
    line += ", median rank " + FormatNumber(*s.median_rank);
    if (s.best_rank) line += ", best " + FormatThousands(*s.best_rank);
  } else {
    line += ", needle never visible";
  }
  return line;
}

constexpr const char* kLegend =
    "cells: passes/answers, then the cell's verdict: + found, x lost, ? undecided; eN = N runs\n"
    "       without an answer (engine_error, timeout, truncated, empty: never counted as\n"
    "       misses); fN = N jobs failed (retries used up, no result); pN = N jobs pending;\n"
    "       - = no answers";

// The cell's verdict mark (docs/reports.md): + found, x lost, ? undecided, nothing without answers.
const char* Mark(Verdict v) {
  switch (v) {
    case Verdict::kFound:
      return "+";
    case Verdict::kLost:
      return "x";
    case Verdict::kUndecided:
      return "?";
    case Verdict::kNoAnswers:
      return "";
  }
  return "";
}

Verdict CellVerdict(const ConfigBoundary& b, int64_t length, double position) {
  for (const CellDecision& d : b.cell_verdicts) {
    if (d.length == length && d.position == position) return d.verdict;
  }
  return Verdict::kNoAnswers;
}

// "found", "lost (at 50%)", "undecided".
std::string LengthVerdictText(const LengthSummary& l) {
  std::string s(VerdictName(l.verdict));
  if (l.verdict == Verdict::kLost && l.pooled != Verdict::kLost) {
    s += " (at";
    for (size_t i = 0; i < l.lost_positions.size(); ++i) {
      s += (i > 0 ? ", " : " ") + FormatPosition(l.lost_positions[i]);
    }
    s += ")";
  }
  return s;
}

std::string CriterionLine(const CampaignReport& r) {
  return "criterion: " + r.criterion.ToString() +
         " (found: the exact Clopper-Pearson interval lies at or above the pass rate; lost: "
         "below it; "
         "undecided: it straddles it)";
}

std::string LevelsLine(const ConfigBoundary& b) {
  int64_t lengths = 0, cells = 0;
  for (const LengthSummary& l : b.lengths) lengths += l.trials > 0 ? 1 : 0;
  for (const CellDecision& d : b.cell_verdicts) cells += d.trials > 0 ? 1 : 0;
  return "verdict levels: lengths " + CiLabel(b.length_confidence) + ", cells " +
         CiLabel(b.cell_confidence) + " (the criterion's confidence split over " +
         std::to_string(lengths) + (lengths == 1 ? " length" : " lengths") + " and " +
         std::to_string(cells) + (cells == 1 ? " cell" : " cells") + " with answers, Bonferroni)";
}

json Opt(const std::optional<int64_t>& v) { return v ? json(*v) : json(nullptr); }

json CiJson(int64_t passes, int64_t trials) {
  const Interval ci = WilsonInterval(passes, trials);
  return json::array({ci.lo, ci.hi});
}

// The interval that decided the verdict next to it (exact, at the verdict's level).
json CiJsonAt(int64_t passes, int64_t trials, double confidence) {
  const Interval ci =
      ClopperPearsonInterval(static_cast<double>(passes), static_cast<double>(trials), confidence);
  return {{"level", confidence}, {"method", "clopper-pearson"}, {"lo", ci.lo}, {"hi", ci.hi}};
}

json FailuresJson(const std::vector<FailureReason>& failures) {
  json j = json::array();
  for (const FailureReason& f : failures) {
    j.push_back({{"kind", f.kind}, {"reason", f.reason}, {"jobs", f.jobs}});
  }
  return j;
}

json OutcomesJson(const std::array<int64_t, 6>& counts) {
  json j = json::object();
  for (size_t i = 0; i < kOutcomeOrder.size(); ++i) j[OutcomeName(kOutcomeOrder[i])] = counts[i];
  return j;
}

}  // namespace

CampaignReport BuildCampaignReport(const CampaignRecord& campaign, const CampaignProgress& progress,
                                   const std::vector<HeatmapCell>& cells,
                                   const std::vector<OutcomeCount>& outcomes,
                                   const std::vector<LayerProbeStats>& probes,
                                   const Criterion& criterion,
                                   const std::vector<FailureReason>& failures) {
  CampaignReport r;
  r.campaign = campaign;
  r.criterion = criterion;
  r.progress = progress;
  std::map<std::string, size_t> index;
  for (ConfigBoundary& b : ExtractBoundaries(cells, criterion)) {
    index[b.config] = r.configs.size();
    ConfigReport c;
    c.boundary = std::move(b);
    r.configs.push_back(std::move(c));
  }
  // Configurations with outcomes or probes but no heatmap cell cannot exist (cells come from
  // the same jobs); anything unmatched is ignored rather than invented.
  for (const HeatmapCell& cell : cells) r.configs[index.at(cell.config)].cells.push_back(cell);
  for (ConfigReport& c : r.configs) {
    std::sort(c.cells.begin(), c.cells.end(), [](const HeatmapCell& a, const HeatmapCell& b) {
      if (a.context_length != b.context_length) return a.context_length < b.context_length;
      return PositionLess(a.needle_position, b.needle_position);
    });
  }
  for (const OutcomeCount& o : outcomes) {
    r.outcomes[OutcomeIndex(o.outcome)] += o.count;
    auto it = index.find(o.config);
    if (it != index.end()) r.configs[it->second].outcomes[OutcomeIndex(o.outcome)] += o.count;
  }
  for (const LayerProbeStats& p : probes) {
    auto it = index.find(p.config);
    if (it != index.end()) r.configs[it->second].probes.push_back(p);
  }
  for (ConfigReport& c : r.configs) {
    std::sort(c.probes.begin(), c.probes.end(),
              [](const LayerProbeStats& a, const LayerProbeStats& b) { return a.layer < b.layer; });
  }
  for (const FailureReason& f : failures) {
    auto it = index.find(f.config);
    if (it != index.end()) r.configs[it->second].failures.push_back(f);
  }
  r.failures = FailuresByReason(failures);
  for (ConfigReport& c : r.configs) c.failures = FailuresByReason(c.failures);
  return r;
}

namespace {

// The coordinator names the worker in a failure ("engine error on worker embedded-0: ..."), so
// the same cause on two workers reads as two reasons. Splits the worker id out: returns the
// reason with "on worker *" in its place and the id ("" when there is none).
std::pair<std::string, std::string> SplitWorker(const std::string& reason) {
  static constexpr std::string_view kOnWorker = "on worker ";
  const size_t at = reason.find(kOnWorker);
  if (at == std::string::npos) return {reason, ""};
  const size_t id_begin = at + kOnWorker.size();
  const size_t id_end = reason.find(':', id_begin);
  if (id_end == std::string::npos || id_end == id_begin) return {reason, ""};
  return {reason.substr(0, id_begin) + "*" + reason.substr(id_end),
          reason.substr(id_begin, id_end - id_begin)};
}

}  // namespace

std::vector<FailureReason> FailuresByReason(const std::vector<FailureReason>& failures) {
  struct Sum {
    int64_t jobs = 0;
    std::set<std::string> workers;
  };
  std::map<std::pair<std::string, std::string>, Sum> sums;
  for (const FailureReason& f : failures) {
    auto [reason, worker] = SplitWorker(f.reason);
    Sum& sum = sums[{f.kind, reason}];
    sum.jobs += f.jobs;
    if (!worker.empty()) sum.workers.insert(worker);
  }
  std::vector<FailureReason> out;
  for (const auto& [key, sum] : sums) {
    std::string reason = key.second;
    // One worker: its id back in place; several: "on workers a, b, c" (at most 3 named).
    if (!sum.workers.empty()) {
      std::string names;
      size_t n = 0;
      for (const std::string& w : sum.workers) {
        if (n == 3) {
          names += " and " + std::to_string(sum.workers.size() - 3) + " more";
          break;
        }
        names += (n++ > 0 ? ", " : "") + w;
      }
      const size_t star = reason.find("on worker *");
      reason.replace(star, 11, (sum.workers.size() == 1 ? "on worker " : "on workers ") + names);
    }
    out.push_back({"", key.first, reason, sum.jobs});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const FailureReason& a, const FailureReason& b) { return a.jobs > b.jobs; });
  return out;
}

std::vector<std::string> DescribeFailures(const std::vector<FailureReason>& failures) {
  constexpr size_t kMaxReason = 300;
  std::vector<std::string> out;
  for (const FailureReason& f : failures) {
    std::string kind = f.kind == "failed" ? "failed (retries used up)" : f.kind;
    std::string reason = f.reason.empty() ? std::string("no reason recorded") : f.reason;
    if (reason.size() > kMaxReason) reason = reason.substr(0, kMaxReason) + "...";
    out.push_back(FormatThousands(f.jobs) + " " + kind + ": " + reason);
  }
  return out;
}

Result<CampaignReport> LoadCampaignReport(Store& store, const std::string& campaign_name,
                                          const Criterion& criterion) {
  CampaignReport report;
  // One snapshot: the coordinator may be committing results while the report reads.
  const Status st = store.InReadTransaction([&]() -> Status {
    NW_ASSIGN_OR_RETURN(std::optional<CampaignRecord> campaign, store.FindCampaign(campaign_name));
    if (!campaign) {
      return Status::NotFound(store.path().string() + ": no campaign named '" + campaign_name +
                              "' in table campaigns");
    }
    NW_ASSIGN_OR_RETURN(CampaignProgress progress, store.Progress(campaign->id));
    NW_ASSIGN_OR_RETURN(std::vector<HeatmapCell> cells, store.Heatmap(campaign->id));
    NW_ASSIGN_OR_RETURN(std::vector<OutcomeCount> outcomes, store.OutcomeCounts(campaign->id));
    NW_ASSIGN_OR_RETURN(std::vector<LayerProbeStats> probes, store.ProbeStats(campaign->id));
    NW_ASSIGN_OR_RETURN(std::vector<FailureReason> failures, store.FailureReasons(campaign->id));
    report = BuildCampaignReport(*campaign, progress, cells, outcomes, probes, criterion, failures);
    NW_ASSIGN_OR_RETURN(report.gpu_busy, store.CampaignGpuBusy(campaign->id));
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return report;
}

std::string GpuBusyLine(const GpuBusySummary& g) {
  return "GPU busy: " + FormatBusy(g.gpu_busy) + " while the " + FormatThousands(g.results) +
         (g.results == 1 ? " job" : " jobs") +
         " measured on a GPU ran (NVML, weighted by run time)";
}

bool ColorAllowed(bool is_terminal, const char* no_color, const char* term) {
  if (no_color != nullptr && no_color[0] != '\0') return false;
  return RedrawAllowed(is_terminal, term);
}

bool RedrawAllowed(bool is_terminal, const char* term) {
  return is_terminal && !(term != nullptr && std::strcmp(term, "dumb") == 0);
}

bool ColorAllowedOn(int fd) {
  return ColorAllowed(isatty(fd) != 0, std::getenv("NO_COLOR"), std::getenv("TERM"));
}

bool RedrawAllowedOn(int fd) { return RedrawAllowed(isatty(fd) != 0, std::getenv("TERM")); }

std::string RenderText(const CampaignReport& r, const TextOptions& options) {
  std::string out;
  out += "campaign " + r.campaign.name;
  if (!r.campaign.source_path.empty()) out += " (" + r.campaign.source_path + ")";
  out += "\n";
  out += "jobs: " + ProgressLine(r.progress) + "\n";
  out += "outcomes: " + OutcomeList(r.outcomes) + "\n";
  for (const std::string& line : DescribeFailures(r.failures)) {
    out += "without an answer: " + line + "\n";
  }
  if (r.gpu_busy) out += GpuBusyLine(*r.gpu_busy) + "\n";
  out += CriterionLine(r) + "\n";
  if (r.configs.empty()) {
    out += "\nno results yet\n";
    return out;
  }
  for (const ConfigReport& c : r.configs) {
    out += "\n";
    out += options.color ? "\x1b[1m" + c.boundary.config + "\x1b[0m" : c.boundary.config;
    out += "\n  " + DescribeBoundary(c.boundary) + "\n";
    out += "  " + LevelsLine(c.boundary) + "\n";
    out += "  outcomes: " + OutcomeList(c.outcomes) + "\n";
    for (const std::string& line : DescribeFailures(c.failures)) {
      out += "  without an answer: " + line + "\n";
    }
    out +=
        "  heatmap (passes/answers and verdict; rows: context length, columns: needle "
        "position):\n";
    const Grid g = MakeGrid(c.cells);
    auto cell_text = [&](int64_t len, double pos) {
      const HeatmapCell* cell = CellAt(g, len, pos);
      return CellText(cell) + Mark(CellVerdict(c.boundary, len, pos));
    };
    size_t len_w = std::string("length").size();
    for (int64_t len : g.lengths) len_w = std::max(len_w, FormatThousands(len).size());
    std::vector<size_t> col_w;
    for (double pos : g.positions) {
      size_t w = FormatPosition(pos).size();
      for (int64_t len : g.lengths) w = std::max(w, cell_text(len, pos).size());
      col_w.push_back(w);
    }
    out += "    " + PadLeft("length", len_w);
    for (size_t i = 0; i < g.positions.size(); ++i) {
      out += "  " + PadLeft(FormatPosition(g.positions[i]), col_w[i]);
    }
    out += "  length verdict\n";
    for (int64_t len : g.lengths) {
      out += "    " + PadLeft(FormatThousands(len), len_w);
      for (size_t i = 0; i < g.positions.size(); ++i) {
        const HeatmapCell* cell = CellAt(g, len, g.positions[i]);
        const std::string text = PadLeft(cell_text(len, g.positions[i]), col_w[i]);
        const char* color = options.color ? CellColor(cell) : nullptr;
        out += "  ";
        out += color ? std::string(color) + text + "\x1b[0m" : text;
      }
      for (const LengthSummary& l : c.boundary.lengths) {
        if (l.length == len) out += "  " + LengthVerdictText(l);
      }
      out += "\n";
    }
    if (!c.probes.empty()) {
      out +=
          "  indexer probes (needle in the top-k at the last prompt position; its rank over the "
          "question and answer positions):\n";
      for (const LayerProbeStats& p : c.probes) out += "    " + ProbeLine(p) + "\n";
    }
  }
  out += "\n";
  out += kLegend;
  out += "\n";
  return out;
}

std::string RenderMarkdown(const CampaignReport& r) {
  std::string out;
  out += "# Campaign `" + r.campaign.name + "`\n\n";
  if (!r.campaign.source_path.empty()) out += "Source: `" + r.campaign.source_path + "`. ";
  out += "Jobs: " + ProgressLine(r.progress) + ".";
  if (r.gpu_busy) out += " " + GpuBusyLine(*r.gpu_busy) + ".";
  out += "\n\n";
  out += "| pass | miss | truncated | empty | engine_error | timeout |\n";
  out += "|---:|---:|---:|---:|---:|---:|\n|";
  for (int64_t n : r.outcomes) out += " " + FormatThousands(n) + " |";
  out += "\n";
  if (!r.failures.empty()) {
    out += "\nWithout an answer:\n\n";
    for (const std::string& line : DescribeFailures(r.failures)) out += "- " + line + "\n";
  }
  out += "\n" + CriterionLine(r) + ".\n";
  if (r.configs.empty()) {
    out += "\nNo results yet.\n";
    return out;
  }
  out += "\n## Summary\n\n| configuration | boundary |\n|---|---|\n";
  for (const ConfigReport& c : r.configs) {
    out += "| `" + c.boundary.config + "` | " + DescribeBoundary(c.boundary) + " |\n";
  }
  for (const ConfigReport& c : r.configs) {
    out += "\n## `" + c.boundary.config + "`\n\n";
    out += DescribeBoundary(c.boundary) + ".\n\n";
    out += "Outcomes: " + OutcomeList(c.outcomes) + ". " + LevelsLine(c.boundary) + ".\n\n";
    if (!c.failures.empty()) {
      out += "Without an answer:\n\n";
      for (const std::string& line : DescribeFailures(c.failures)) out += "- " + line + "\n";
      out += "\n";
    }
    const Grid g = MakeGrid(c.cells);
    out += "| length \\ position |";
    for (double pos : g.positions) out += " " + FormatPosition(pos) + " |";
    out += " length verdict |\n|---:|";
    for (size_t i = 0; i < g.positions.size(); ++i) out += "---:|";
    out += "---|\n";
    for (int64_t len : g.lengths) {
      out += "| " + FormatThousands(len) + " |";
      for (double pos : g.positions) {
        out += " " + CellText(CellAt(g, len, pos)) + Mark(CellVerdict(c.boundary, len, pos)) + " |";
      }
      for (const LengthSummary& l : c.boundary.lengths) {
        if (l.length == len) out += " " + LengthVerdictText(l) + " |";
      }
      out += "\n";
    }
    if (!c.probes.empty()) {
      out +=
          "\n| indexer layer | needle in top-k at last prompt position | median rank (question and "
          "answer positions) |"
          " best rank |\n|---:|---:|---:|---:|\n";
      for (const LayerProbeStats& p : c.probes) {
        out += "| " + std::to_string(p.layer) + " | " + FormatThousands(p.in_topk_last) + "/" +
               FormatThousands(p.answers) + " (" + FormatPercent(p.in_topk_last, p.answers) +
               ") | " + (p.median_rank ? FormatNumber(*p.median_rank) : std::string("-")) + " | " +
               (p.best_rank ? FormatThousands(*p.best_rank) : std::string("-")) + " |\n";
      }
    }
  }
  out += "\n";
  out += kLegend;
  out += ".\n";
  return out;
}

json RenderJson(const CampaignReport& r) {
  json j;
  j["campaign"] = {{"id", r.campaign.id},
                   {"name", r.campaign.name},
                   {"source_path", r.campaign.source_path},
                   {"created_ms", r.campaign.created_ms},
                   {"updated_ms", r.campaign.updated_ms}};
  j["progress"] = {{"total", r.progress.total},   {"queued", r.progress.queued},
                   {"leased", r.progress.leased}, {"done", r.progress.done},
                   {"failed", r.progress.failed}, {"pass", r.progress.pass},
                   {"miss", r.progress.miss},     {"other", r.progress.other}};
  j["outcomes"] = OutcomesJson(r.outcomes);
  j["failures"] = FailuresJson(r.failures);
  j["criterion"] = {{"pass_rate", r.criterion.pass_rate}, {"confidence", r.criterion.confidence}};
  if (r.gpu_busy) {
    j["gpu_busy"] = {{"fraction", r.gpu_busy->gpu_busy},
                     {"results", r.gpu_busy->results},
                     {"run_ms", r.gpu_busy->total_ms}};
  }
  json configs = json::array();
  for (const ConfigReport& c : r.configs) {
    const ConfigBoundary& b = c.boundary;
    json cj;
    cj["config"] = b.config;
    cj["summary"] = DescribeBoundary(b);
    json fail = nullptr;
    if (b.l_fail) {
      fail = {{"length", *b.l_fail},
              {"passes", b.fail_passes},
              {"trials", b.fail_trials},
              {"ci95", CiJson(b.fail_passes, b.fail_trials)}};
    }
    json pass = nullptr;
    if (b.l_pass) {
      pass = {{"length", *b.l_pass},
              {"passes", b.pass_passes},
              {"trials", b.pass_trials},
              {"ci95", CiJson(b.pass_passes, b.pass_trials)}};
    }
    // The strict facts of v_boundary (one miss makes a length failing); the verdicts are below.
    cj["boundary"] = {{"strict", true},
                      {"l_pass", Opt(b.l_pass)},
                      {"l_fail", Opt(b.l_fail)},
                      {"first_unclean", Opt(b.first_unclean)},
                      {"max_clean", Opt(b.max_clean)},
                      {"monotone", b.monotone},
                      {"min_length", b.min_length()},
                      {"max_length", b.max_length()},
                      {"pass", pass},
                      {"fail", fail}};
    json undecided = json::array();
    for (int64_t l : b.undecided) undecided.push_back(l);
    json nearest = nullptr;
    if (b.nearest_undecided) {
      nearest = {{"length", *b.nearest_undecided},
                 {"answers_to_decide", Opt(b.decide_trials)},
                 {"sentence", DescribeMoreTrials(b)}};
    }
    cj["verdicts"] = {{"found_up_to", Opt(b.found_up_to)},
                      {"lost_from", Opt(b.lost_from)},
                      {"undecided", undecided},
                      {"found_after_lost", b.found_after_lost},
                      {"monotone", b.verdicts_monotone},
                      {"nearest_undecided", nearest},
                      {"length_confidence", b.length_confidence},
                      {"cell_confidence", b.cell_confidence}};
    cj["totals"] = {{"trials", b.trials}, {"passes", b.passes},
                    {"errors", b.errors}, {"pending", b.pending},
                    {"failed", b.failed}, {"ci95", CiJson(b.passes, b.trials)}};
    cj["outcomes"] = OutcomesJson(c.outcomes);
    cj["failures"] = FailuresJson(c.failures);
    json lengths = json::array();
    for (const LengthSummary& l : b.lengths) {
      lengths.push_back({{"length", l.length},
                         {"positions", l.cells},
                         {"clean", l.clean()},
                         {"failing", l.failing()},
                         {"trials", l.trials},
                         {"passes", l.passes},
                         {"errors", l.errors},
                         {"pending", l.pending},
                         {"failed", l.failed},
                         {"verdict", std::string(VerdictName(l.verdict))},
                         {"pooled_verdict", std::string(VerdictName(l.pooled))},
                         {"lost_positions", l.lost_positions},
                         {"ci", CiJsonAt(l.passes, l.trials, b.length_confidence)}});
    }
    cj["lengths"] = lengths;
    json cells = json::array();
    for (const HeatmapCell& cell : c.cells) {
      cells.push_back({{"length", cell.context_length},
                       {"position", cell.needle_position},
                       {"position_label", FormatPosition(cell.needle_position)},
                       {"trials", cell.trials},
                       {"passes", cell.passes},
                       {"errors", cell.errors},
                       {"pending", cell.pending},
                       {"failed", cell.failed},
                       {"pass_rate", cell.trials > 0 ? json(static_cast<double>(cell.passes) /
                                                            static_cast<double>(cell.trials))
                                                     : json(nullptr)},
                       {"ci95", CiJson(cell.passes, cell.trials)},
                       {"verdict", std::string(VerdictName(
                                       CellVerdict(b, cell.context_length, cell.needle_position)))},
                       {"ci", CiJsonAt(cell.passes, cell.trials, b.cell_confidence)}});
    }
    cj["cells"] = cells;
    json probes = json::array();
    for (const LayerProbeStats& p : c.probes) {
      probes.push_back({{"layer", p.layer},
                        {"answers", p.answers},
                        {"passes", p.passes},
                        {"in_topk_last", p.in_topk_last},
                        {"pass_in_topk_last", p.pass_in_topk_last},
                        {"visible", p.visible},
                        {"median_rank", p.median_rank ? json(*p.median_rank) : json(nullptr)},
                        {"mean_in_topk_fraction", p.mean_in_topk_fraction},
                        {"best_rank", Opt(p.best_rank)}});
    }
    cj["probes"] = probes;
    configs.push_back(std::move(cj));
  }
  j["configs"] = configs;
  return j;
}

}  // namespace nw::report
