#include "slurm/slurm_env.h"

#include <cstddef>
#include <nlohmann/json.hpp>

namespace nw {
namespace {

using json = nlohmann::json;

// Slurm ids, counts and node names: short, from a small alphabet. Anything else is dropped.
constexpr size_t kMaxField = 64;

bool Plain(const std::string& s) {
  if (s.empty() || s.size() > kMaxField) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string Field(const json& facts, const char* key) {
  if (!facts.is_object()) return "";
  auto it = facts.find(key);
  if (it == facts.end() || !it->is_string()) return "";
  const std::string& v = it->get_ref<const std::string&>();
  return Plain(v) ? v : "";
}

}  // namespace

std::optional<json> SlurmFactsFromEnv(const EnvLookup& env) {
  const char* job = env("SLURM_JOB_ID");
  if (job == nullptr || *job == '\0') return std::nullopt;
  json facts = json::object();
  const std::pair<const char*, const char*> vars[] = {
      {"job_id", "SLURM_JOB_ID"},
      {"array_job_id", "SLURM_ARRAY_JOB_ID"},
      {"array_task_id", "SLURM_ARRAY_TASK_ID"},
      {"node", "SLURMD_NODENAME"},
      {"restart_count", "SLURM_RESTART_COUNT"},
      {"partition", "SLURM_JOB_PARTITION"},
  };
  for (const auto& [key, var] : vars) {
    const char* v = env(var);
    if (v != nullptr && Plain(v)) facts[key] = std::string(v);
  }
  return facts;
}

std::string SlurmJobLabel(const json& facts) {
  const std::string job = Field(facts, "job_id");
  if (job.empty()) return "";
  const std::string array_job = Field(facts, "array_job_id");
  const std::string task = Field(facts, "array_task_id");
  std::string label = !array_job.empty() && !task.empty() ? array_job + "_" + task : job;
  const std::string restarts = Field(facts, "restart_count");
  if (!restarts.empty() && restarts != "0") label += ".r" + restarts;
  return label;
}

void SlurmPlacement(const json& capabilities, std::string* job, std::string* node) {
  job->clear();
  node->clear();
  if (!capabilities.is_object()) return;
  auto it = capabilities.find("slurm");
  if (it == capabilities.end() || !it->is_object()) return;
  *job = SlurmJobLabel(*it);
  *node = Field(*it, "node");
}

}  // namespace nw
