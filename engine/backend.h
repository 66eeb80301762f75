// The engine's backend seam (in the spirit of ggml's ggml_backend_i, at the granularity of one
// request's sequence). A backend is described by a BackendInfo in one catalog (backend_catalog.h:
// the names every campaign, worker and server check against), bound to one loaded model on one
// device as a Backend, and runs each request as a BackendSequence (its KV caches on that device).
// Backend-agnostic request checks and greedy decoding (engine/generate.h) run over these
// interfaces, so Engine, the worker and `nw serve` share them on every backend.
//
// Thread-safety: a Backend and its sequences are used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/backend_catalog.h"
#include "engine/checkpoint/config.h"
#include "engine/checkpoint/weights.h"
#include "engine/precision.h"
#include "engine/types.h"

namespace nw {

/// What one sequence is created with (already checked by engine/generate.h's request checks).
struct SequenceSpec {
  int64_t max_tokens = 0;  // positions the sequence may reach (prompt + new tokens)
  // CPU backends: host memory the sequence may use (engine/cpu/memory_check.h); 0 = the
  // machine's physical memory and the process's limits.
  int64_t memory_limit_bytes = 0;
  int index_topk = 0;  // 0 = the model's index_topk
  PrecisionProfile precision;
  std::optional<ProbeRequest> probe;
  Fault fault = Fault::kNone;  // engine/fault.h; checked against the backend's BackendInfo::faults
  ForwardTrace* trace = nullptr;  // optional per-layer trace sink (types.h), not owned
};

/// One request's state on a backend's device: KV caches, compressor states, probes.
class BackendSequence {
 public:
  virtual ~BackendSequence() = default;
  /// Tokens processed so far (the position of the next token).
  virtual int64_t position() const = 0;
  /// The effective top-k of the indexer.
  virtual int index_topk() const = 0;
  /// Runs prompt tokens the way the backend chunks them (its BackendInfo::prefill_chunk);
  /// `logits` (optional) gets the last token's [V] logits. May be called more than once
  /// (a server feeds a long prompt in pieces); the results do not depend on the pieces.
  virtual Status Prefill(std::span<const int32_t> tokens, std::vector<float>* logits) = 0;
  /// Runs one token; `logits` gets its [V] logits.
  virtual Status Decode(int32_t token, std::vector<float>* logits) = 0;
  /// Runs decode tokens as one chunk; `all_logits` gets every token's logits ([n, V]). Equal bit
  /// for bit to Decode() of each token in turn, probes included (the greedy draft check of
  /// engine/generate.h relies on it; tests/engine/draft_test.cc and the GPU engine test check
  /// it). The default decodes them one by one; backends whose multi-token chunk computes each
  /// row as a single-token step does override it with one forward.
  virtual Status Extend(std::span<const int32_t> tokens, std::vector<float>* all_logits);
  /// Marks the current position so that Rewind() can return the sequence to it (state and
  /// probes) after tokens were run past it; one mark at a time, a new one replaces the old.
  /// Unsupported by default (the greedy draft check then runs a diverged request again instead).
  virtual Status Checkpoint() { return Status::Unsupported("this sequence cannot rewind"); }
  /// Back to the last Checkpoint(): afterwards the sequence is bit for bit what it was there.
  virtual Status Rewind() { return Status::Unsupported("this sequence cannot rewind"); }
  /// Probe rows captured so far, one IndexerProbe per ratio-4 layer (layer order).
  virtual const std::vector<IndexerProbe>& probes() const = 0;
  /// Bytes of KV / index / compressor state this sequence holds on its device now.
  virtual int64_t state_bytes() const = 0;
};

/// A backend bound to one loaded model on one device.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual const BackendInfo& info() const = 0;
  /// The model config this backend was created with (its sequences run it).
  virtual const ModelConfig& config() const = 0;
  /// Device description for result rows ("cpu", "NVIDIA H200").
  virtual std::string device() const = 0;
  /// A fresh sequence for one request. The weights are the request's precision.weights format
  /// (made on first use and cached by the backend).
  virtual Result<std::unique_ptr<BackendSequence>> NewSequence(const SequenceSpec& spec) = 0;
  /// One decode step for several sequences of this backend: tokens[i] runs through seqs[i] and
  /// row i of `logits` ([B, V]) gets its logits. Results equal Decode() of each alone. The
  /// default runs them one by one; backends that batch override it. On an error no sequence
  /// has advanced where the backend can promise it (the CPU backends check everything first).
  virtual Status DecodeBatch(std::span<BackendSequence* const> seqs,
                             std::span<const int32_t> tokens, std::vector<float>* logits);
  /// Bytes of KV / index state one token adds to a sequence at this model's shape (the
  /// compressed stores counted per token: 1/ratio of an entry), for capacity planning and
  /// docs; 0 where not known.
  virtual int64_t state_bytes_per_token(const PrecisionProfile& precision) const = 0;
  /// Runs a whole request when the backend is not a single sequence (cpu-pd: a prefill
  /// instance, a transfer, a decode instance). Empty (nullopt) for the plain backends, which
  /// engine/generate.h drives through NewSequence.
  virtual std::optional<Result<GenerateResult>> GenerateWhole(const GenerateRequest& request) {
    (void)request;
    return std::nullopt;
  }
};

/// Creates backend `name` for a model (config validated, weights checked against it).
/// Unsupported naming the backends this build and machine can run when `name` is not one of them
/// (e.g. a cuda* backend without a GPU); InvalidArgument for an unknown name.
Result<std::unique_ptr<Backend>> CreateBackend(const std::string& name, const ModelConfig& config,
                                               std::shared_ptr<const ModelWeights> weights);

}  // namespace nw
