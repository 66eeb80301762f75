// JobSpec and JobResult: what the coordinator sends a worker and what comes back.
//
// A JobSpec is the full, canonical description of one evaluation; its key is SHA-256 over the
// canonical JSON (sorted keys) plus the model digest and engine version, so identical jobs from
// different campaigns share one key and one result. Thread-safety: values.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/precision.h"

namespace nw {

/// Versions the meaning of JobSpec fields and the NIAH generator; part of every job key.
inline constexpr int kJobSchemaVersion = 1;

struct JobSpec {
  std::string model_dir;        // absolute path of the model folder on the worker
  std::string model_digest;     // sha256 over config, weights and tokenizer files
  std::string engine_version;   // kEngineVersion of the build that expanded the campaign
  std::string task;             // niah-single | niah-multikey | niah-repeat
  std::string haystack;         // noise | essay | needles
  int64_t context_length = 0;
  double needle_position = 0;   // fraction 0..1, or negative token offset from the end
  int topk = 0;                 // index top-k used by the engine
  PrecisionProfile precision;
  std::string backend;          // cpu | cpu-paged | cuda | cuda-paged
  int64_t seed = 0;             // campaign seed
  int trial = 0;                // trial index within the cell
  int max_new_tokens = 16;
  bool probe = false;           // capture indexer probes

  /// Canonical JSON: sorted keys, no whitespace, stable number formatting.
  nlohmann::json ToJson() const;
  static Result<JobSpec> FromJson(const nlohmann::json& j);
  /// 64 hex chars: sha256 of {"v":kJobSchemaVersion, "job":ToJson()} without model_dir (the key
  /// identifies content, not where the files live).
  std::string Key() const;
  /// Seed for the job's haystack generator, derived from the key so no two cells share text.
  uint64_t HaystackSeed() const;
};

enum class Outcome { kPass, kMiss, kTruncated, kEmpty, kEngineError, kTimeout };
std::string_view OutcomeName(Outcome o);  // pass, miss, truncated, empty, engine_error, timeout
Result<Outcome> ParseOutcome(std::string_view name);
/// pass and miss are answers from the model; the rest are not retrieval results.
inline bool IsAnswerOutcome(Outcome o) { return o == Outcome::kPass || o == Outcome::kMiss; }

struct ProbeSummary {
  int layer = 0;
  int positions = 0;              // query positions probed
  int needle_rank_min = -1;       // best rank over positions (-1: never visible)
  double needle_rank_median = -1; // median rank over positions where visible
  double in_topk_fraction = 0;    // fraction of positions where a needle entry was selected
  bool in_topk_last = false;      // selected at the last prompt position (the one that answers)
  int topk = 0;
  std::vector<int32_t> ranks;     // per position (-1 = not visible)
  std::vector<int32_t> topk_last; // the selected entry ids at the last prompt position
};

struct JobResult {
  std::string job_key;
  int attempt = 0;
  Outcome outcome = Outcome::kEngineError;
  std::string generated_text;
  std::string expected;
  int64_t needle_token_offset = -1;
  std::string prompt_hash;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double prefill_ms = 0;
  double decode_ms = 0;
  double total_ms = 0;
  std::string worker_id;
  std::string device;
  std::string engine_version;
  std::string error_code;     // StatusCodeName when outcome is engine_error / timeout
  std::string error_message;
  bool retryable = false;     // an engine_error that may succeed elsewhere (OOM, I/O)
  std::vector<ProbeSummary> probes;

  nlohmann::json ToJson() const;
  static Result<JobResult> FromJson(const nlohmann::json& j);
};

}  // namespace nw
