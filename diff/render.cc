#include "diff/render.h"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace nw::diff {

namespace {

std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}
std::string Cos(double v) { return Fmt("%.6f", v); }
std::string Err(double v) { return v == 0 ? "0" : Fmt("%.2e", v); }
std::string Jac(double v) { return v < 0 ? "-" : Fmt("%.3f", v); }

std::string Side(const DiffConfig& c, const std::string& digest) {
  return c.Label() + " model=" + c.model_dir.string() + " (" + digest.substr(0, 12) + ")";
}

std::string Where(const Divergence& d) {
  std::string s =
      d.layer >= 0 ? "layer " + std::to_string(d.layer) + " " + d.component : d.component;
  if (!d.band.empty()) s += " (band " + d.band + ")";
  return s;
}

std::string DivergenceLine(const DiffReport& r) {
  if (!r.first) return "no divergence within the thresholds";
  const Divergence& d = *r.first;
  const bool below = d.component == "indexer" || d.component == "greedy";
  return Where(d) + ": " + d.metric + " " +
         (d.component == "indexer" || d.component == "greedy" ? Fmt("%.3f", d.value)
                                                              : Err(d.value)) +
         (below ? " < " : " > ") + (below ? Fmt("%.3f", d.threshold) : Err(d.threshold)) +
         ", prompt " + d.prompt;
}

std::string Thresholds(const DiffThresholds& t) {
  return "max relative error " + Err(t.max_rel_error) + ", min top-k Jaccard " +
         Fmt("%.3f", t.min_jaccard) + ", min greedy agreement " + Fmt("%.3f", t.min_greedy);
}

std::string Bands(const LayerDiff& l, const char* sep) {
  std::string s;
  for (int k = 0; k < kBands; ++k) {
    s += (k ? sep : "") + (l.indexer ? Jac(l.jaccard[static_cast<size_t>(k)]) : std::string("-"));
  }
  return s;
}

}  // namespace

std::string RenderText(const DiffReport& r) {
  std::string o;
  o += "nw diff\n";
  o += "  A: " + Side(r.a, r.a_digest) + "\n";
  o += "  B: " + Side(r.b, r.b_digest) + "\n";
  o += "  prompts: " + r.prompts_source + "; " + std::to_string(r.steps) +
       " decode steps, B fed A's greedy tokens\n";
  o += "  thresholds: " + Thresholds(r.thresholds) + "\n\n";
  char line[256];
  std::snprintf(line, sizeof(line), "%-5s %-5s %-9s %-9s %-9s %-9s  %s\n", "layer", "ratio",
                "attn cos", "attn err", "hid cos", "hid err",
                "top-k Jaccard 0-25% 25-50% 50-75% 75-100% decode");
  o += line;
  for (const LayerDiff& l : r.layers) {
    std::snprintf(line, sizeof(line), "%-5d %-5d %-9s %-9s %-9s %-9s  %s\n", l.layer, l.ratio,
                  Cos(l.attn.cosine).c_str(), Err(l.attn.max_rel_error).c_str(),
                  Cos(l.hidden.cosine).c_str(), Err(l.hidden.max_rel_error).c_str(),
                  Bands(l, " ").c_str());
    o += line;
  }
  o += "\nlogits: cosine " + Cos(r.logits.cosine) + ", max relative error " +
       Err(r.logits.max_rel_error) + " (per row, relative to A's largest |logit|)\n";
  o += "greedy agreement: " + std::to_string(r.greedy_agree) + "/" +
       std::to_string(r.greedy_total) + "\n";
  o += "first divergence: " + DivergenceLine(r) + "\n";
  o += std::string("verdict: ") + (r.first ? "DIFFERENT (exit 1)" : "SAME (exit 0)") + "\n";
  return o;
}

std::string RenderMarkdown(const DiffReport& r) {
  std::string o;
  o += "## nw diff\n\n";
  o += "- A: `" + Side(r.a, r.a_digest) + "`\n";
  o += "- B: `" + Side(r.b, r.b_digest) + "`\n";
  o += "- prompts: " + r.prompts_source + "; " + std::to_string(r.steps) +
       " decode steps, B fed A's greedy tokens\n";
  o += "- thresholds: " + Thresholds(r.thresholds) + "\n\n";
  o += "| layer | ratio | attn cos | attn err | hidden cos | hidden err | Jaccard 0-25% | 25-50% "
       "| 50-75% | 75-100% | decode |\n";
  o += "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const LayerDiff& l : r.layers) {
    o += "| " + std::to_string(l.layer) + " | " + std::to_string(l.ratio) + " | " +
         Cos(l.attn.cosine) + " | " + Err(l.attn.max_rel_error) + " | " + Cos(l.hidden.cosine) +
         " | " + Err(l.hidden.max_rel_error) + " | " + Bands(l, " | ") + " |\n";
  }
  o += "\n- logits: cosine " + Cos(r.logits.cosine) + ", max relative error " +
       Err(r.logits.max_rel_error) + "\n";
  o += "- greedy agreement: " + std::to_string(r.greedy_agree) + "/" +
       std::to_string(r.greedy_total) + "\n";
  o += "- first divergence: " + DivergenceLine(r) + "\n";
  o += std::string("- **verdict: ") + (r.first ? "DIFFERENT" : "SAME") + "** (exit " +
       std::to_string(r.exit_code()) + ")\n";
  return o;
}

std::string RenderJson(const DiffReport& r) {
  using ojson = nlohmann::ordered_json;
  auto num = [](double v) -> ojson { return std::isfinite(v) ? ojson(v) : ojson(nullptr); };
  auto tensor = [&](const TensorDiff& t) {
    return ojson{{"cosine", num(t.cosine)}, {"max_rel_error", num(t.max_rel_error)}};
  };
  auto layer = [&](const LayerDiff& l) {
    ojson j{{"layer", l.layer},
            {"ratio", l.ratio},
            {"attn", tensor(l.attn)},
            {"hidden", tensor(l.hidden)}};
    if (l.indexer) {
      ojson bands = ojson::object();
      for (int k = 0; k < kBands; ++k) {
        const double v = l.jaccard[static_cast<size_t>(k)];
        bands[kBandNames[k]] = ojson{{"jaccard", v < 0 ? ojson(nullptr) : ojson(v)},
                                     {"positions", l.jaccard_positions[static_cast<size_t>(k)]}};
      }
      j["topk_jaccard"] = bands;
    }
    return j;
  };
  auto side = [](const DiffConfig& c, const std::string& digest) {
    return ojson{{"backend", c.backend},
                 {"precision", c.precision},
                 {"fault", std::string(FaultName(c.fault))},
                 {"model", c.model_dir.string()},
                 {"model_digest", digest}};
  };
  ojson j;
  j["a"] = side(r.a, r.a_digest);
  j["b"] = side(r.b, r.b_digest);
  j["prompts_source"] = r.prompts_source;
  j["steps"] = r.steps;
  j["topk"] = r.topk;
  j["thresholds"] = ojson{{"max_rel_error", r.thresholds.max_rel_error},
                          {"min_jaccard", r.thresholds.min_jaccard},
                          {"min_greedy", r.thresholds.min_greedy}};
  ojson layers = ojson::array();
  for (const LayerDiff& l : r.layers) layers.push_back(layer(l));
  j["layers"] = layers;
  j["logits"] = tensor(r.logits);
  j["greedy"] = ojson{{"agree", r.greedy_agree}, {"total", r.greedy_total}};
  ojson prompts = ojson::array();
  for (const PromptDiff& p : r.prompts) {
    ojson pl = ojson::array();
    for (const LayerDiff& l : p.layers) pl.push_back(layer(l));
    prompts.push_back(
        ojson{{"name", p.name},
              {"prompt_tokens", p.prompt_tokens},
              {"steps", p.steps},
              {"layers", pl},
              {"logits", tensor(p.logits)},
              {"greedy", ojson{{"agree", p.greedy_agree}, {"total", p.greedy_total}}}});
  }
  j["prompts"] = prompts;
  if (r.first) {
    const Divergence& d = *r.first;
    j["first_divergence"] = ojson{{"layer", d.layer >= 0 ? ojson(d.layer) : ojson(nullptr)},
                                  {"component", d.component},
                                  {"band", d.band.empty() ? ojson(nullptr) : ojson(d.band)},
                                  {"metric", d.metric},
                                  {"value", num(d.value)},
                                  {"threshold", d.threshold},
                                  {"prompt", d.prompt}};
  } else {
    j["first_divergence"] = nullptr;
  }
  j["verdict"] = r.first ? "different" : "same";
  j["exit_code"] = r.exit_code();
  return j.dump(2) + "\n";
}

}  // namespace nw::diff
