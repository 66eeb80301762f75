// Locating a model folder and fingerprinting its files.
//
// A model folder holds config.json, tokenizer.json and either model.safetensors or
// model.safetensors.index.json plus the shards it names (not both). The digest identifies the
// exact files: sha256 of
//   "config:<sha256 of config.json>\n"
//   "tokenizer:<sha256 of tokenizer.json>\n"
//   "weights:<file name>:<sha256 of the file>\n"   for each weight file, sorted by name
// (the index itself is not hashed: the archive reader checks it against the shards).
// Thread-safety: pure functions (they read files).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "common/status.h"

namespace nw {

struct ModelFiles {
  std::filesystem::path dir, config, tokenizer;
  std::vector<std::filesystem::path> weights;  // safetensors files, sorted by file name
  std::string digest;                          // 64 lowercase hex characters
};

/// NotFound naming the missing file; FailedPrecondition when both weight layouts are present;
/// Corruption for an unreadable index.
Result<ModelFiles> LocateModel(const std::filesystem::path& dir);

}  // namespace nw
