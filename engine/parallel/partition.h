// Tensor-parallel partition plan for DeepSeek-V4 over R ranks (docs/multi-gpu.md).
//
// Rank r of R owns contiguous, equal slices (DeepSeek's convert.py split rules,
// docs/checkpoint-format.md §2.7):
//   query heads    [r H/R, (r+1) H/R)        wq_b rows (dim 0), attn_sink entries
//   wo_a groups    [r g/R, (r+1) g/R)        wo_a rows (dim 0); a group's input is its heads
//   wo_b columns   [r g R_o/R, ...)          wo_b dim 1 (row-parallel): partial outputs summed
//   index heads    [r h_I/R, (r+1) h_I/R)    indexer wq_b rows, weights_proj rows; partial index
//                                            scores summed BEFORE top-k
//   routed experts [r E/R, (r+1) E/R)        whole experts; partial MoE outputs summed
// Replicated on every rank: norms, mHC, wq_a, wkv, compressors, the gate, the shared expert
// (added after the MoE all-reduce). convert.py also splits embed and head on dim 0 (vocab);
// those splits are exact (a gather), so the simulation keeps them whole.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/checkpoint/config.h"

namespace nw::parallel {

struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Range&) const = default;
};

struct RankSlice {
  int rank = 0;
  Range heads;         // query heads
  Range groups;        // wo_a groups
  Range wo_b_columns;  // input columns of wo_b (groups * o_lora_rank)
  Range index_heads;   // indexer heads (empty range when the model has no indexer layer)
  Range experts;       // routed expert ids
};

struct PartitionPlan {
  int ranks = 0;
  std::vector<RankSlice> slices;  // one per rank, rank order
};

/// The plan for `ranks` ranks. Errors (InvalidArgument) name the dimension that `ranks` does not
/// divide: n_heads, o_groups, index_n_heads (when the model has ratio-4 layers) or
/// n_routed_experts; ranks must be >= 1.
Result<PartitionPlan> MakePartitionPlan(const ModelConfig& cfg, int ranks);

/// Checks that `plan` covers every head, group, column, index head and expert exactly once, in
/// rank order, with equal slices (the layout the simulated executor runs).
Status ValidatePartitionPlan(const ModelConfig& cfg, const PartitionPlan& plan);

}  // namespace nw::parallel
