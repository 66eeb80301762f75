// One job's parameters checked against the limits a campaign file is held to. `nw validate`,
// `nw run` and `nw submit` reach it through ExpandCampaign (every job a campaign expands to
// passes it), and the `nw coordinator` daemon runs it on every job a client submits, so a
// client that skips the YAML cannot hand the daemon a job `nw validate` would refuse.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/status.h"
#include "protocol/job.h"

namespace nw {

/// Limits of a campaign's values (docs/campaigns.md, "Limits").
inline constexpr int64_t kMaxTopk = 1 << 20;
inline constexpr int64_t kMaxContextLength = int64_t{1} << 30;
inline constexpr int64_t kMaxNewTokens = 4096;
inline constexpr int64_t kMaxTrials = 10'000;
inline constexpr int64_t kMaxHttpConcurrency = 256;
inline constexpr int64_t kMaxHttpMs = 24LL * 3600 * 1000;
inline constexpr int64_t kMaxHttpRetries = 100;
inline constexpr size_t kMaxJobPathBytes = 4096;
inline constexpr size_t kMaxHttpHeaders = 64;

struct JobCheckOptions {
  /// Backend names a job may use (besides "http" when allow_http).
  std::vector<std::string> backends;
  bool allow_http = true;
  /// Non-empty: a job's model_dir (and an http job's tokenizer) must lie inside one of these
  /// folders (compared lexically after normalization; `..` is refused anyway).
  std::vector<std::filesystem::path> model_roots;
};

/// The default options: every backend of the catalog, http allowed, no model roots.
JobCheckOptions DefaultJobCheckOptions();

/// InvalidArgument naming the field ("job.topk: 0 is outside 1..1048576") when the job is
/// outside what a campaign file may ask for: task and haystack names, backend, top-k, context
/// length, needle position, max_new_tokens, trial, model path (absolute, no `..`, inside the
/// roots), model digest, engine version, precision profile and http settings.
Status CheckJobSpec(const JobSpec& spec, const JobCheckOptions& options);

}  // namespace nw
