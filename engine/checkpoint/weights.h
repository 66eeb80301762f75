// ModelWeights: every tensor of a DeepSeek-V4 checkpoint, dequantized to fp32, grouped the way the
// forward pass uses them. Names in comments are the on-disk names (docs/checkpoint-format.md §2)
// with P = layers.{i}. MTP blocks are checked at load and dropped. Thread-safety: values.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/checkpoint/tensor.h"

namespace nw {

struct CompressorWeights {
  int ratio = 0;  // 4 (overlapping, coff 2) or 128 (coff 1)
  int dim = 0;    // d: head_dim for the main KV compressor, index_head_dim for the indexer
  Tensor wkv;     // [coff*d, D]   compressor.wkv.weight
  Tensor wgate;   // [coff*d, D]   compressor.wgate.weight
  Tensor ape;     // [ratio, coff*d] compressor.ape
  Tensor norm;    // [d]           compressor.norm.weight
};

struct IndexerWeights {
  Tensor wq_b;                   // [h_I*c_I, q]  attn.indexer.wq_b(.weight)
  Tensor weights_proj;           // [h_I, D]      attn.indexer.weights_proj.weight
  CompressorWeights compressor;  // attn.indexer.compressor.* (ratio 4, d = c_I)
};

struct AttentionWeights {
  Tensor attn_sink;                             // [H]
  Tensor wq_a;                                  // [q, D]
  Tensor q_norm;                                // [q]
  Tensor wq_b;                                  // [H*d, q]
  Tensor wkv;                                   // [d, D]
  Tensor kv_norm;                               // [d]
  Tensor wo_a;                                  // [g*R, H*d/g]
  Tensor wo_b;                                  // [D, g*R]
  std::optional<CompressorWeights> compressor;  // ratio > 0
  std::optional<IndexerWeights> indexer;        // ratio == 4
};

struct ExpertWeights {
  Tensor w1;  // [I, D] gate
  Tensor w3;  // [I, D] up
  Tensor w2;  // [D, I] down
};

struct FfnWeights {
  Tensor gate;                         // [E, D]  ffn.gate.weight
  Tensor gate_bias;                    // [E]     ffn.gate.bias (empty on hash layers)
  std::vector<int32_t> tid2eid;        // [V * k] ffn.gate.tid2eid (hash layers only), row-major
  std::vector<ExpertWeights> experts;  // E routed experts
  ExpertWeights shared;                // ffn.shared_experts
};

struct HcWeights {
  Tensor fn;     // [(2+n)n, n*D] (blocks) or [n, n*D] (head)
  Tensor base;   // [(2+n)n] or [n]
  Tensor scale;  // [3] or [1]
};

struct BlockWeights {
  HcWeights hc_attn;
  HcWeights hc_ffn;
  Tensor attn_norm;  // [D]
  Tensor ffn_norm;   // [D]
  AttentionWeights attn;
  FfnWeights ffn;
};

struct ModelWeights {
  Tensor embed;  // [V, D]
  Tensor norm;   // [D]
  Tensor head;   // [V, D]
  HcWeights hc_head;
  std::vector<BlockWeights> layers;
};

}  // namespace nw
