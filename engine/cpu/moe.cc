#include "engine/cpu/moe.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numeric>

#include "kernels/cpu/activations.h"
#include "kernels/cpu/ops.h"

namespace nw::cpu {
namespace {

// score_func over the raw gate outputs s ([E]) in place.
void ApplyScoreFunc(const ModelConfig& cfg, std::vector<float>& s) {
  const int64_t num_experts = cfg.n_routed_experts;
  switch (cfg.score_func) {
    case ScoreFunc::kSoftmax:
      SoftmaxInPlace(s.data(), num_experts);
      break;
    case ScoreFunc::kSigmoid:
      for (float& v : s) v = Sigmoid(v);
      break;
    case ScoreFunc::kSqrtSoftplus:
      for (float& v : s) v = std::sqrt(Softplus(v));
      break;
  }
}

// Gate scores s = score_func(W_g x), [E].
std::vector<float> GateScores(const ModelConfig& cfg, const FfnWeights& w, const float* x) {
  const int64_t num_experts = cfg.n_routed_experts;
  assert(w.gate.numel() == num_experts * cfg.dim);
  std::vector<float> s(static_cast<size_t>(num_experts));
  Linear(x, 1, cfg.dim, w.gate.ptr(), num_experts, s.data());
  ApplyScoreFunc(cfg, s);
  return s;
}

// The k largest of `key`, in descending order; equal keys go to the lowest index.
std::vector<int32_t> TopK(const std::vector<float>& key, int k) {
  std::vector<int32_t> idx(key.size());
  std::iota(idx.begin(), idx.end(), 0);
  assert(k >= 0 && static_cast<size_t>(k) <= idx.size());
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&key](int32_t a, int32_t b) {
    return key[a] > key[b] || (key[a] == key[b] && a < b);
  });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

// Adds w2(weight * silu(g) * u) to out ([D]), where g = w1 x and u = w3 x, clamped when
// swiglu_limit > 0 (Expert.forward). `weight` is 1 for the shared expert.
void AddExpert(const ModelConfig& cfg, const ExpertWeights& e, const float* x, float weight,
               float swiglu_limit, float* out) {
  const int64_t dim = cfg.dim;
  const int64_t inter = cfg.moe_inter_dim;
  assert(e.w1.numel() == inter * dim && e.w3.numel() == inter * dim && e.w2.numel() == dim * inter);
  std::vector<float> gate(static_cast<size_t>(inter));
  std::vector<float> up(static_cast<size_t>(inter));
  Linear(x, 1, dim, e.w1.ptr(), inter, gate.data());
  Linear(x, 1, dim, e.w3.ptr(), inter, up.data());
  std::vector<float>& hidden = gate;  // silu(g) * u, computed in place
  for (int64_t i = 0; i < inter; ++i) {
    float g = gate[i];
    float u = up[i];
    if (swiglu_limit > 0) {
      u = std::clamp(u, -swiglu_limit, swiglu_limit);
      g = std::min(g, swiglu_limit);
    }
    hidden[i] = weight * (Silu(g) * u);
  }
  std::vector<float> y(static_cast<size_t>(dim));
  Linear(hidden.data(), 1, inter, e.w2.ptr(), dim, y.data());
  for (int64_t d = 0; d < dim; ++d) out[d] += y[d];
}

// AddExpert over `rows` inputs at once (x [rows, D], weight [rows], out [rows, D]): the same
// values per row as AddExpert, with each weight row read once for all rows.
void AddExpertRows(const ModelConfig& cfg, const ExpertWeights& e, const float* x, int64_t rows,
                   const float* weight, float swiglu_limit, float* const* out) {
  const int64_t dim = cfg.dim;
  const int64_t inter = cfg.moe_inter_dim;
  std::vector<float> gate(static_cast<size_t>(rows * inter));
  std::vector<float> up(gate.size());
  LinearRows(x, rows, dim, e.w1.ptr(), inter, gate.data());
  LinearRows(x, rows, dim, e.w3.ptr(), inter, up.data());
  std::vector<float>& hidden = gate;
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t i = t * inter; i < (t + 1) * inter; ++i) {
      float g = gate[static_cast<size_t>(i)];
      float u = up[static_cast<size_t>(i)];
      if (swiglu_limit > 0) {
        u = std::clamp(u, -swiglu_limit, swiglu_limit);
        g = std::min(g, swiglu_limit);
      }
      hidden[static_cast<size_t>(i)] = weight[t] * (Silu(g) * u);
    }
  }
  std::vector<float> y(static_cast<size_t>(rows * dim));
  LinearRows(hidden.data(), rows, inter, e.w2.ptr(), dim, y.data());
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t d = 0; d < dim; ++d) out[t][d] += y[static_cast<size_t>(t * dim + d)];
  }
}

// The shared expert's clamp: swiglu_limit when the config clamps it (the current definition),
// else none (the first release).
float SharedLimit(const ModelConfig& cfg) {
  return cfg.swiglu_clamp_shared_expert ? static_cast<float>(cfg.swiglu_limit) : 0.0f;
}

}  // namespace

namespace {

// MoeRoute from the gate scores s = score_func(W_g x).
MoeRouting RouteFromScores(const ModelConfig& cfg, const FfnWeights& w, int layer_id,
                           const std::vector<float>& scores, int32_t token_id) {
  const int k = cfg.n_activated_experts;

  MoeRouting r;
  if (cfg.is_hash_layer(layer_id)) {
    const auto row = static_cast<size_t>(token_id) * static_cast<size_t>(k);
    for (int s = 0; s < k; ++s) r.experts.push_back(w.tid2eid.at(row + static_cast<size_t>(s)));
  } else {
    std::vector<float> biased = scores;
    if (!w.gate_bias.empty()) {
      assert(w.gate_bias.numel() == cfg.n_routed_experts);
      for (size_t e = 0; e < biased.size(); ++e) biased[e] += w.gate_bias.data[e];
    }
    r.experts = TopK(biased, k);
  }

  for (int32_t e : r.experts) r.weights.push_back(scores.at(static_cast<size_t>(e)));
  if (cfg.score_func != ScoreFunc::kSoftmax) {
    float sum = 0.0f;
    for (float v : r.weights) sum += v;
    for (float& v : r.weights) v /= sum;
  }
  const auto route_scale = static_cast<float>(cfg.route_scale);
  for (float& v : r.weights) v *= route_scale;
  return r;
}

}  // namespace

MoeRouting MoeRoute(const ModelConfig& cfg, const FfnWeights& w, int layer_id, const float* x,
                    int32_t token_id) {
  return RouteFromScores(cfg, w, layer_id, GateScores(cfg, w, x), token_id);
}

void MoeForward(const ModelConfig& cfg, const FfnWeights& w, int layer_id, const float* x,
                int32_t token_id, float* out) {
  const MoeRouting r = MoeRoute(cfg, w, layer_id, x, token_id);
  // The reference accumulates the routed experts in ascending expert id, then adds the shared one.
  std::vector<size_t> order(r.experts.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&r](size_t a, size_t b) { return r.experts[a] < r.experts[b]; });

  std::fill(out, out + cfg.dim, 0.0f);
  const auto limit = static_cast<float>(cfg.swiglu_limit);
  for (size_t s : order) {
    const ExpertWeights& e = w.experts.at(static_cast<size_t>(r.experts[s]));
    AddExpert(cfg, e, x, r.weights[s], limit, out);
  }
  AddExpert(cfg, w.shared, x, 1.0f, SharedLimit(cfg), out);
}

void MoeForwardRows(const ModelConfig& cfg, const FfnWeights& w, int layer_id, const float* x,
                    const int32_t* token_ids, int64_t rows, float* out) {
  const int64_t D = cfg.dim, E = cfg.n_routed_experts;
  // Routing of every row (MoeRoute's steps, with the gate over all rows at once).
  std::vector<float> raw(static_cast<size_t>(rows * E));
  LinearRows(x, rows, D, w.gate.ptr(), E, raw.data());
  // (row, weight) pairs per expert; a row's pairs are added in ascending expert id (ties in
  // selection order), as MoeForward adds them.
  std::vector<std::vector<std::pair<int64_t, float>>> by_expert(static_cast<size_t>(E));
  for (int64_t t = 0; t < rows; ++t) {
    std::vector<float> scores(raw.begin() + t * E, raw.begin() + (t + 1) * E);
    ApplyScoreFunc(cfg, scores);
    const MoeRouting r = RouteFromScores(cfg, w, layer_id, scores, token_ids[t]);
    std::vector<size_t> order(r.experts.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&r](size_t a, size_t b) { return r.experts[a] < r.experts[b]; });
    for (size_t s : order) {
      by_expert.at(static_cast<size_t>(r.experts[s])).emplace_back(t, r.weights[s]);
    }
  }
  std::fill(out, out + rows * D, 0.0f);
  const auto limit = static_cast<float>(cfg.swiglu_limit);
  std::vector<float> xs, ws;
  std::vector<float*> dst;
  // Rows routed to an expert, in row order; a row routed twice to one expert (hash layers may
  // repeat an id) appears twice, and its two terms are added in selection order as in MoeForward.
  for (int64_t e = 0; e < E; ++e) {
    const auto& routed = by_expert[static_cast<size_t>(e)];
    if (routed.empty()) continue;
    xs.resize(routed.size() * static_cast<size_t>(D));
    ws.clear();
    dst.clear();
    for (size_t i = 0; i < routed.size(); ++i) {
      std::copy_n(x + routed[i].first * D, D, xs.data() + static_cast<int64_t>(i) * D);
      ws.push_back(routed[i].second);
      dst.push_back(out + routed[i].first * D);
    }
    AddExpertRows(cfg, w.experts.at(static_cast<size_t>(e)), xs.data(),
                  static_cast<int64_t>(routed.size()), ws.data(), limit, dst.data());
  }
  std::vector<float> ones(static_cast<size_t>(rows), 1.0f);
  dst.clear();
  for (int64_t t = 0; t < rows; ++t) dst.push_back(out + t * D);
  AddExpertRows(cfg, w.shared, x, rows, ones.data(), SharedLimit(cfg), dst.data());
}

void MoeForwardRanks(const ModelConfig& cfg, const FfnWeights& w, int layer_id, const float* x,
                     int32_t token_id, int ranks, float* out) {
  if (ranks <= 1) {
    MoeForward(cfg, w, layer_id, x, token_id, out);
    return;
  }
  assert(cfg.n_routed_experts % ranks == 0);
  const MoeRouting r = MoeRoute(cfg, w, layer_id, x, token_id);
  std::vector<size_t> order(r.experts.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&r](size_t a, size_t b) { return r.experts[a] < r.experts[b]; });
  const auto limit = static_cast<float>(cfg.swiglu_limit);
  const int64_t per_rank = cfg.n_routed_experts / ranks;
  std::vector<float> partial(static_cast<size_t>(cfg.dim));
  std::fill(out, out + cfg.dim, 0.0f);
  for (int rank = 0; rank < ranks; ++rank) {
    std::fill(partial.begin(), partial.end(), 0.0f);
    for (size_t s : order) {
      const int32_t e = r.experts[s];
      if (e / per_rank != rank) continue;
      AddExpert(cfg, w.experts.at(static_cast<size_t>(e)), x, r.weights[s], limit, partial.data());
    }
    for (int64_t d = 0; d < cfg.dim; ++d) out[d] += partial[static_cast<size_t>(d)];
  }
  // The shared expert is replicated and added after the all-reduce (DeepSeek's MoE.forward).
  AddExpert(cfg, w.shared, x, 1.0f, SharedLimit(cfg), out);
}

}  // namespace nw::cpu
