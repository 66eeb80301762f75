#include "diff/prompts.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/file_io.h"
#include "coordinator/campaign/campaign.h"
#include "protocol/job.h"
#include "task/job_prompt.h"
#include "task/niah.h"

namespace nw::diff {

Result<std::vector<DiffPrompt>> DesignPrompts(const Tokenizer& tokenizer, const PromptDesign& d) {
  if (d.context_length < 1) return Status::InvalidArgument("--length: must be >= 1");
  if (d.trials < 1) return Status::InvalidArgument("--trials: must be >= 1");
  // The options are checked here so that their errors name them; BuildJobPrompt parses them again.
  if (Result<NiahTask> task = ParseNiahTask(d.task); !task.ok()) {
    return task.status().WithContext("--task");
  }
  if (Result<NiahHaystack> hay = ParseNiahHaystack(d.haystack); !hay.ok()) {
    return hay.status().WithContext("--haystack");
  }
  std::vector<DiffPrompt> out;
  for (int t = 0; t < d.trials; ++t) {
    // The job a campaign would expand for this design point and trial, and its prompt as every
    // executor builds it (task/job_prompt.h).
    JobSpec job;
    job.task = d.task;
    job.haystack = d.haystack;
    job.context_length = d.context_length;
    job.needle_position = d.needle_position;
    job.seed = DeriveTrialSeed(d.seed, t);
    job.trial = t;
    Result<NiahPrompt> p = BuildJobPrompt(tokenizer, job);
    if (!p.ok()) return p.status().WithContext("prompt of trial " + std::to_string(t));
    out.push_back(DiffPrompt{"trial " + std::to_string(t), std::move(p->tokens)});
  }
  return out;
}

Result<std::vector<DiffPrompt>> FilePrompts(const std::filesystem::path& path,
                                            const Tokenizer& tokenizer, int64_t vocab) {
  const std::string f = path.string();
  Result<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return Status::NotFound(f + ": cannot open the prompts file");
    }
    return text.status();
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(f + ": not JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("prompts") || !j["prompts"].is_array()) {
    return Status::InvalidArgument(f + ": prompts: missing, or not an array of prompts");
  }
  const nlohmann::json& arr = j["prompts"];
  if (arr.empty()) return Status::InvalidArgument(f + ": prompts: empty");
  std::vector<DiffPrompt> out;
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string at = f + ": prompts[" + std::to_string(i) + "]";
    const nlohmann::json& p = arr[i];
    if (!p.is_object()) return Status::InvalidArgument(at + ": must be an object");
    for (auto it = p.begin(); it != p.end(); ++it) {
      if (it.key() != "name" && it.key() != "tokens" && it.key() != "text") {
        return Status::InvalidArgument(at + "." + it.key() +
                                       ": unknown field (fields: name, tokens, text)");
      }
    }
    DiffPrompt dp;
    dp.name = "prompt " + std::to_string(i);
    if (p.contains("name")) {
      if (!p["name"].is_string()) return Status::InvalidArgument(at + ".name: must be a string");
      dp.name = p["name"].get<std::string>();
    }
    const bool has_tokens = p.contains("tokens"), has_text = p.contains("text");
    if (has_tokens == has_text) {
      return Status::InvalidArgument(at + ": needs exactly one of tokens and text");
    }
    if (has_text) {
      if (!p["text"].is_string()) return Status::InvalidArgument(at + ".text: must be a string");
      dp.tokens = tokenizer.Encode(p["text"].get<std::string>());
    } else {
      const nlohmann::json& t = p["tokens"];
      if (!t.is_array()) return Status::InvalidArgument(at + ".tokens: must be an array of ids");
      for (size_t k = 0; k < t.size(); ++k) {
        if (!t[k].is_number_integer() || t[k].get<int64_t>() < 0 || t[k].get<int64_t>() >= vocab) {
          return Status::InvalidArgument(at + ".tokens[" + std::to_string(k) + "]: " + t[k].dump() +
                                         " is not a token id in [0, " + std::to_string(vocab) +
                                         ")");
        }
        dp.tokens.push_back(static_cast<int32_t>(t[k].get<int64_t>()));
      }
    }
    if (dp.tokens.empty()) return Status::InvalidArgument(at + ": the prompt has no tokens");
    out.push_back(std::move(dp));
  }
  return out;
}

}  // namespace nw::diff
