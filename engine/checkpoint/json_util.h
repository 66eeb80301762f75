// Strict JSON parsing for checkpoint metadata (config.json, safetensors headers, index files).
//
// nlohmann::json silently keeps the last of duplicate keys; the checkpoint formats forbid them,
// so ParseJsonStrict rejects a duplicate key at any nesting depth. Exceptions never escape.
// Thread-safety: pure functions.
#pragma once

#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "common/file_io.h"  // ReadFileToString, used with these helpers
#include "common/status.h"

namespace nw {

/// Parses `text` as JSON. Malformed JSON, invalid UTF-8 and duplicate object keys are
/// Corruption errors whose message starts with `source`.
Result<nlohmann::json> ParseJsonStrict(std::string_view text, const std::string& source);

/// A short, non-recursive rendering of a JSON value for error messages: scalars (strings cut at
/// 64 characters) and flat lists/objects of at most 8 scalars; anything else as "[...]"/"{...}".
/// Safe on hostile, deeply nested input.
std::string JsonSnippet(const nlohmann::json& v);

/// Writes `contents` to `path` through a temporary file in the same folder and a rename, so a
/// reader never sees a half-written file.
Status WriteFileAtomically(const std::filesystem::path& path, std::string_view contents);

}  // namespace nw
