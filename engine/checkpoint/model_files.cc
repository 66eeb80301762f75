#include "engine/checkpoint/model_files.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "common/sha256.h"
#include "engine/checkpoint/json_util.h"

namespace nw {
namespace {

Status RequireFile(const std::filesystem::path& p) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec)) {
    return Status::NotFound(p.string() + ": required model file is missing");
  }
  return Status::Ok();
}

// The shard files named by an index's weight_map, sorted and unique.
Result<std::vector<std::string>> IndexShards(const std::filesystem::path& index) {
  NW_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index));
  NW_ASSIGN_OR_RETURN(nlohmann::json j, ParseJsonStrict(text, index.string()));
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    return Status::Corruption(index.string() + ": missing or non-object 'weight_map'");
  }
  std::set<std::string> shards;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    if (!file.is_string()) {
      return Status::Corruption(index.string() + ": weight_map entry for tensor '" + tensor +
                                "' is not a file name");
    }
    const std::string& f = file.get_ref<const std::string&>();
    if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos ||
        f.find('\\') != std::string::npos) {
      return Status::Corruption(index.string() + ": tensor '" + tensor + "' maps to '" + f +
                                "', which is not a plain file name");
    }
    shards.insert(f);
  }
  if (shards.empty()) return Status::Corruption(index.string() + ": empty weight_map");
  return std::vector<std::string>(shards.begin(), shards.end());
}

}  // namespace

Result<ModelFiles> LocateModel(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::NotFound(dir.string() + ": model folder does not exist");
  }
  ModelFiles m;
  m.dir = dir;
  m.config = dir / "config.json";
  m.tokenizer = dir / "tokenizer.json";
  NW_RETURN_IF_ERROR(RequireFile(m.config));
  NW_RETURN_IF_ERROR(RequireFile(m.tokenizer));
  const std::filesystem::path single = dir / "model.safetensors";
  const std::filesystem::path index = dir / "model.safetensors.index.json";
  const bool has_single = std::filesystem::exists(single, ec);
  const bool has_index = std::filesystem::exists(index, ec);
  if (has_single && has_index) {
    return Status::FailedPrecondition(dir.string() +
                                      ": both model.safetensors and "
                                      "model.safetensors.index.json are present");
  }
  if (has_single) {
    NW_RETURN_IF_ERROR(RequireFile(single));
    m.weights.push_back(single);
  } else if (has_index) {
    NW_ASSIGN_OR_RETURN(std::vector<std::string> shards, IndexShards(index));
    for (const std::string& s : shards) {
      NW_RETURN_IF_ERROR(RequireFile(dir / s).WithContext(index.string()));
      m.weights.push_back(dir / s);
    }
  } else {
    return Status::NotFound(dir.string() +
                            ": no model.safetensors or model.safetensors.index.json");
  }
  std::sort(m.weights.begin(), m.weights.end(),
            [](const auto& a, const auto& b) { return a.filename() < b.filename(); });

  NW_ASSIGN_OR_RETURN(std::string config_sha, Sha256File(m.config));
  NW_ASSIGN_OR_RETURN(std::string tokenizer_sha, Sha256File(m.tokenizer));
  std::string manifest = "config:" + config_sha + "\ntokenizer:" + tokenizer_sha + "\n";
  for (const std::filesystem::path& w : m.weights) {
    NW_ASSIGN_OR_RETURN(std::string sha, Sha256File(w));
    manifest += "weights:" + w.filename().string() + ":" + sha + "\n";
  }
  m.digest = Sha256Hex(manifest);
  return m;
}

}  // namespace nw
