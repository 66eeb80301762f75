// Engine value types shared by the façade (engine.h), the backend seam (backend.h) and every
// backend: what a request asks for, what it returns, and what the indexer probes capture.
// Backends include this header, never engine.h, so the façade can include backends without a
// cycle. Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/fault.h"
#include "engine/precision.h"

namespace nw {

enum class KvLayout {
  kContiguous,  // one buffer per layer per request
  kPaged,       // pages of 64 entries addressed through a block table
};

/// What to capture from the indexer for one request.
struct ProbeRequest {
  int64_t needle_begin = 0;  // token range of the needle in the prompt, [begin, end)
  int64_t needle_end = 0;
  int64_t query_begin = 0;      // probe every query position t in [query_begin, prompt_len) and
                                // every decode step
  bool keep_topk_sets = false;  // also return the selected entry ids per position
};

/// Probe output for one indexer layer (a ratio-4 layer). Entry i of a ratio-4 layer pools
/// tokens 4(i-1) .. 4i+3 and is visible to query t iff i < (t+1)/4; it "covers the needle" when
/// that token range overlaps [needle_begin, needle_end). Ranks order the visible entries by
/// indexer score, higher first, ties to the lower entry id (the order top-k selects in).
struct IndexerProbe {
  int layer = 0;                     // layer id
  std::vector<int64_t> positions;    // query positions probed (prompt positions, then the
                                     // position of each decode step)
  std::vector<int32_t> needle_rank;  // per position: best (0-based) rank among the visible
                                     // compressed entries that cover the needle; -1 if none
                                     // is visible yet
  std::vector<uint8_t> in_topk;      // per position: 1 if any needle entry was selected
  std::vector<int32_t> num_visible;  // per position: visible compressed entries
  std::vector<float> needle_score;   // per position: indexer score of the best-ranked needle
                                     // entry (NaN if none is visible)
  std::vector<float> kth_score;      // per position: score of the k-th selected entry, the bar
                                     // a needle entry must clear (NaN if fewer than k visible)
  std::vector<float> next_score;     // per position: score of the best entry left out (the
                                     // (k+1)-th in rank order; NaN if every visible entry is
                                     // selected). kth - next is the selection's margin: a near-
                                     // tie there is where fp32 rounding can swap an entry.
  std::vector<int32_t> topk_sets;    // positions.size() * topk entry ids in rank order (-1
                                     // padded), if asked
  int topk = 0;                      // the request's effective top-k
};

/// One layer of a ForwardTrace: rows appended per processed token, in position order (the prompt,
/// then each decode step).
struct LayerTrace {
  std::vector<float> attn;    // [tokens, dim]: the attention sub-layer's output (after wo_b)
  std::vector<float> hidden;  // [tokens, hc_mult * dim]: the residual streams after the block
};

/// A per-layer trace of one request's forward pass (`nw diff`, docs/diff.md). A request records
/// one only when it carries a sink (GenerateRequest::trace, SequenceSpec::trace); without one
/// nothing is copied. Backends whose BackendInfo::traces is false refuse a sink.
struct ForwardTrace {
  int64_t dim = 0;           // the model's hidden size
  int64_t stream_width = 0;  // hc_mult * dim
  std::vector<LayerTrace> layers;
  int64_t tokens() const {
    return dim > 0 && !layers.empty() ? static_cast<int64_t>(layers[0].attn.size()) / dim : 0;
  }
};

struct GenerateRequest {
  std::vector<int32_t> prompt;
  int max_new_tokens = 16;
  std::vector<int32_t> stop_tokens;  // generation ends after emitting one of these
  int index_topk = 0;                // 0 = the model's index_topk
  PrecisionProfile precision;
  std::optional<ProbeRequest> probe;
  Fault fault = Fault::kNone;      // known-bug replay (engine/fault.h); the backend must replay it
  ForwardTrace* trace = nullptr;   // optional per-layer trace sink, not owned (must outlive the
                                   // request); only backends with BackendInfo::traces take one
  int64_t memory_limit_bytes = 0;  // CPU backends: host memory the sequence may use; 0 = the
                                   // machine's physical memory and the process's RLIMIT_AS /
                                   // RLIMIT_DATA (engine/cpu/memory_check.h)
  // The tokens greedy decoding is expected to produce (a needle's answer): checked in one
  // multi-token step instead of one step per token. A speed hint only: the result is the same
  // with or without it (engine/generate.h, "Greedy drafts").
  std::vector<int32_t> draft;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated tokens (the stop token included if hit)
  bool stopped = false;         // ended on a stop token (else: max_new_tokens reached)
  double prefill_ms = 0;
  double decode_ms = 0;
  std::vector<IndexerProbe> probes;
};

}  // namespace nw
