#include "diff/compare.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace nw::diff {

namespace {

TensorDiff CompareTensor(const std::vector<float>& a, const std::vector<float>& b) {
  double dot = 0, na = 0, nb = 0, max_a = 0, max_d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = b[i];
    dot += x * y;
    na += x * x;
    nb += y * y;
    max_a = std::max(max_a, std::fabs(x));
    max_d = std::max(max_d, std::fabs(x - y));
  }
  TensorDiff d;
  d.cosine = na > 0 && nb > 0 ? dot / std::sqrt(na * nb) : (na == nb ? 1.0 : 0.0);
  if (max_d == 0) d.cosine = 1;  // bit-identical (rounding of the sums aside)
  d.max_rel_error = max_a > 0 ? max_d / max_a : (max_d > 0 ? INFINITY : 0);
  if (std::isnan(max_d)) d.max_rel_error = INFINITY;
  return d;
}

double Jaccard(const int32_t* a, const int32_t* b, int k) {
  std::set<int32_t> sa, sb;
  for (int i = 0; i < k; ++i) {
    if (a[i] >= 0) sa.insert(a[i]);
    if (b[i] >= 0) sb.insert(b[i]);
  }
  if (sa.empty() && sb.empty()) return 1;
  size_t inter = 0;
  for (int32_t x : sa) inter += sb.count(x);
  return static_cast<double>(inter) / static_cast<double>(sa.size() + sb.size() - inter);
}

int BandOf(int64_t pos, int64_t prompt_tokens) {
  if (pos >= prompt_tokens) return kBands - 1;
  return static_cast<int>(std::min<int64_t>(3, pos * 4 / std::max<int64_t>(prompt_tokens, 1)));
}

}  // namespace

Result<PromptDiff> ComparePrompt(const std::string& name, int64_t prompt_tokens,
                                 const ModelConfig& model, const DiffSide::Run& a,
                                 const DiffSide::Run& b) {
  const ForwardTrace &ta = a.trace, &tb = b.trace;
  if (ta.layers.size() != tb.layers.size() || ta.dim != tb.dim ||
      ta.stream_width != tb.stream_width || ta.tokens() != tb.tokens()) {
    return Status::FailedPrecondition(
        "prompt " + name + ": the two traces do not line up (" + std::to_string(ta.layers.size()) +
        " vs " + std::to_string(tb.layers.size()) + " layers, dim " + std::to_string(ta.dim) +
        " vs " + std::to_string(tb.dim) + ", " + std::to_string(ta.tokens()) + " vs " +
        std::to_string(tb.tokens()) + " tokens); compare models of one shape");
  }
  if (a.logits.size() != b.logits.size()) {
    return Status::FailedPrecondition("prompt " + name + ": different numbers of logits rows");
  }
  PromptDiff d;
  d.name = name;
  d.prompt_tokens = prompt_tokens;
  d.steps = static_cast<int>(a.logits.size()) - 1;
  for (size_t l = 0; l < ta.layers.size(); ++l) {
    LayerDiff ld;
    ld.layer = static_cast<int>(l);
    ld.ratio = model.ratio(static_cast<int>(l));
    ld.attn = CompareTensor(ta.layers[l].attn, tb.layers[l].attn);
    ld.hidden = CompareTensor(ta.layers[l].hidden, tb.layers[l].hidden);
    d.layers.push_back(std::move(ld));
  }
  // Indexer layers: the probes, one per ratio-4 layer, every position, top-k sets kept.
  if (a.probes.size() != b.probes.size()) {
    return Status::FailedPrecondition("prompt " + name + ": different indexer layers");
  }
  for (size_t i = 0; i < a.probes.size(); ++i) {
    const IndexerProbe &pa = a.probes[i], &pb = b.probes[i];
    if (pa.layer != pb.layer || pa.positions != pb.positions || pa.topk != pb.topk ||
        pa.layer < 0 || pa.layer >= static_cast<int>(d.layers.size())) {
      return Status::FailedPrecondition("prompt " + name + ": indexer probes do not line up");
    }
    LayerDiff& ld = d.layers[static_cast<size_t>(pa.layer)];
    ld.indexer = true;
    std::vector<double> sum(kBands, 0);
    ld.jaccard_positions.assign(kBands, 0);
    for (size_t j = 0; j < pa.positions.size(); ++j) {
      const int band = BandOf(pa.positions[j], prompt_tokens);
      const size_t off = j * static_cast<size_t>(pa.topk);
      sum[static_cast<size_t>(band)] +=
          Jaccard(pa.topk_sets.data() + off, pb.topk_sets.data() + off, pa.topk);
      ++ld.jaccard_positions[static_cast<size_t>(band)];
    }
    ld.jaccard.assign(kBands, -1);
    for (int k = 0; k < kBands; ++k) {
      const auto n = ld.jaccard_positions[static_cast<size_t>(k)];
      if (n > 0) ld.jaccard[static_cast<size_t>(k)] = sum[static_cast<size_t>(k)] / n;
    }
  }
  // Logits: cosine over every row, error per row relative to the row's largest |logit|.
  std::vector<float> all_a, all_b;
  for (size_t r = 0; r < a.logits.size(); ++r) {
    const TensorDiff row = CompareTensor(a.logits[r], b.logits[r]);
    d.logits.max_rel_error = std::max(d.logits.max_rel_error, row.max_rel_error);
    all_a.insert(all_a.end(), a.logits[r].begin(), a.logits[r].end());
    all_b.insert(all_b.end(), b.logits[r].begin(), b.logits[r].end());
    const auto argmax = [](const std::vector<float>& v) {
      return std::max_element(v.begin(), v.end()) - v.begin();
    };
    d.greedy_agree += argmax(a.logits[r]) == argmax(b.logits[r]);
    ++d.greedy_total;
  }
  d.logits.cosine = CompareTensor(all_a, all_b).cosine;
  return d;
}

void Summarize(DiffReport& r) {
  r.layers.clear();
  r.logits = TensorDiff{};
  r.greedy_agree = r.greedy_total = 0;
  r.first.reset();
  if (r.prompts.empty()) return;
  const size_t L = r.prompts.front().layers.size();
  std::vector<std::vector<double>> jsum(L, std::vector<double>(kBands, 0));
  for (size_t l = 0; l < L; ++l) {
    LayerDiff agg = r.prompts.front().layers[l];
    agg.jaccard_positions.assign(kBands, 0);
    r.layers.push_back(agg);
  }
  for (const PromptDiff& p : r.prompts) {
    for (size_t l = 0; l < L; ++l) {
      const LayerDiff& ld = p.layers[l];
      LayerDiff& agg = r.layers[l];
      agg.attn.cosine = std::min(agg.attn.cosine, ld.attn.cosine);
      agg.attn.max_rel_error = std::max(agg.attn.max_rel_error, ld.attn.max_rel_error);
      agg.hidden.cosine = std::min(agg.hidden.cosine, ld.hidden.cosine);
      agg.hidden.max_rel_error = std::max(agg.hidden.max_rel_error, ld.hidden.max_rel_error);
      for (int k = 0; k < kBands && ld.indexer; ++k) {
        const auto n = ld.jaccard_positions[static_cast<size_t>(k)];
        if (n == 0) continue;
        jsum[l][static_cast<size_t>(k)] += ld.jaccard[static_cast<size_t>(k)] * n;
        agg.jaccard_positions[static_cast<size_t>(k)] += n;
      }
    }
    r.logits.cosine = std::min(r.logits.cosine, p.logits.cosine);
    r.logits.max_rel_error = std::max(r.logits.max_rel_error, p.logits.max_rel_error);
    r.greedy_agree += p.greedy_agree;
    r.greedy_total += p.greedy_total;
  }
  for (size_t l = 0; l < L; ++l) {
    LayerDiff& agg = r.layers[l];
    if (!agg.indexer) continue;
    agg.jaccard.assign(kBands, -1);
    for (int k = 0; k < kBands; ++k) {
      const auto n = agg.jaccard_positions[static_cast<size_t>(k)];
      if (n > 0) agg.jaccard[static_cast<size_t>(k)] = jsum[l][static_cast<size_t>(k)] / n;
    }
  }

  // The first component, in forward order, where some prompt parts.
  const DiffThresholds& th = r.thresholds;
  auto parted = [&](const std::string& component, int layer, const std::string& metric,
                    double value, double threshold, const std::string& prompt,
                    const std::string& band = "") {
    Divergence d;
    d.layer = layer;
    d.component = component;
    d.metric = metric;
    d.value = value;
    d.threshold = threshold;
    d.prompt = prompt;
    d.band = band;
    r.first = d;
  };
  for (size_t l = 0; l < L && !r.first; ++l) {
    for (const PromptDiff& p : r.prompts) {  // indexer first: it selects before the attention
      const LayerDiff& ld = p.layers[l];
      for (int k = 0; k < kBands && ld.indexer; ++k) {
        const double j = ld.jaccard[static_cast<size_t>(k)];
        if (j >= 0 && j < th.min_jaccard) {
          parted("indexer", static_cast<int>(l), "top-k Jaccard", j, th.min_jaccard, p.name,
                 kBandNames[k]);
          break;
        }
      }
      if (r.first) break;
    }
    for (const PromptDiff& p : r.prompts) {
      if (r.first) break;
      const double e = p.layers[l].attn.max_rel_error;
      if (!(e <= th.max_rel_error)) {
        parted("attn", static_cast<int>(l), "max relative error", e, th.max_rel_error, p.name);
      }
    }
    for (const PromptDiff& p : r.prompts) {
      if (r.first) break;
      const double e = p.layers[l].hidden.max_rel_error;
      if (!(e <= th.max_rel_error)) {
        parted("hidden", static_cast<int>(l), "max relative error", e, th.max_rel_error, p.name);
      }
    }
  }
  for (const PromptDiff& p : r.prompts) {
    if (r.first) break;
    if (!(p.logits.max_rel_error <= th.max_rel_error)) {
      parted("logits", -1, "max relative error", p.logits.max_rel_error, th.max_rel_error, p.name);
    }
  }
  for (const PromptDiff& p : r.prompts) {
    if (r.first) break;
    const double g = p.greedy_total > 0 ? double(p.greedy_agree) / p.greedy_total : 1.0;
    if (g < th.min_greedy) parted("greedy", -1, "greedy agreement", g, th.min_greedy, p.name);
  }
}

}  // namespace nw::diff
