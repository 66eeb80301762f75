// One side of `nw diff`: an engine configuration (model folder, backend, precision, fault) and the
// run of one prompt through it with a per-layer trace (engine/types.h ForwardTrace), the
// indexer's top-k sets at every position and the logits of the last prompt token and of every
// decode step. Side A decodes greedily; side B is fed A's tokens (teacher forcing), so both
// process the same tokens and their traces compare row by row.
// Thread-safety: a DiffSide is used by one thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/checkpoint/config.h"
#include "engine/fault.h"
#include "engine/precision.h"
#include "engine/text/tokenizer.h"
#include "engine/types.h"

namespace nw::diff {

/// What a side runs. Parsed from "backend=cpu,precision=fp32,fault=none,model=DIR".
struct DiffConfig {
  std::filesystem::path model_dir;
  std::string backend = "cpu";
  std::string precision = "fp32";  // a built-in profile name (engine/precision.h)
  Fault fault = Fault::kNone;

  /// "backend=cpu precision=fp32 fault=none".
  std::string Label() const;
};

/// Parses `spec` (comma-separated key=value; keys backend, precision, fault, model) over
/// `defaults`. Errors name `what` ("--b") and the key.
Result<DiffConfig> ParseDiffConfig(const std::string& spec, const DiffConfig& defaults,
                                   const std::string& what);

/// A configuration bound to its loaded model and backend.
class DiffSide {
 public:
  /// Loads the model folder and creates the backend; checks that the backend records traces,
  /// replays the fault and knows the precision. Errors name the side (`what`).
  static Result<std::unique_ptr<DiffSide>> Create(const DiffConfig& config,
                                                  const std::string& what);

  const DiffConfig& config() const { return config_; }
  const ModelConfig& model() const { return backend_->config(); }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const std::string& model_digest() const { return digest_; }

  struct Run {
    ForwardTrace trace;
    std::vector<IndexerProbe> probes;        // every position, top-k sets kept
    std::vector<std::vector<float>> logits;  // last prompt token, then each decode step
    std::vector<int32_t> fed;                // the decode tokens fed (steps of them)
  };
  /// Prefills `prompt` and runs `steps` decode steps: greedy when `forced` is empty, else
  /// feeding forced[0 .. steps).
  Result<Run> Go(const std::vector<int32_t>& prompt, int steps, int topk,
                 const std::vector<int32_t>& forced);

 private:
  DiffSide() = default;
  DiffConfig config_;
  PrecisionProfile profile_;
  Tokenizer tokenizer_;
  std::string digest_;
  std::unique_ptr<Backend> backend_;
};

}  // namespace nw::diff
