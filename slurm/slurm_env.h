// What a process learns from the environment Slurm gives a job, and how a worker reports it.
//
// A worker started by Slurm (sbatch) finds SLURM_JOB_ID, SLURM_ARRAY_JOB_ID,
// SLURM_ARRAY_TASK_ID, SLURMD_NODENAME and SLURM_RESTART_COUNT in its environment. It sends them
// in READY's capabilities as {"slurm": {"job_id", "array_job_id", "array_task_id", "node",
// "restart_count"}} (docs/protocol.md: capabilities beyond the matched keys are stored and shown,
// never matched), and `nw status` shows the job ("1234_3" for array element 3 of job 1234) and
// the node. Values come from peers: SlurmPlacement keeps only short [A-Za-z0-9._-] strings.
#pragma once

#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

namespace nw {

/// Reads one environment variable (nullptr when unset); std::getenv in production.
using EnvLookup = std::function<const char*(const char*)>;

/// The "slurm" capability object for a process in a Slurm job, or nullopt outside Slurm (no
/// SLURM_JOB_ID).
std::optional<nlohmann::json> SlurmFactsFromEnv(const EnvLookup& env);

/// A short label for the job: "ARRAYJOB_TASK" for an array element, else "JOBID", plus
/// ".rN" when Slurm has requeued it N times. Empty outside Slurm.
std::string SlurmJobLabel(const nlohmann::json& facts);

/// The job label and node from READY capabilities ({"slurm": {...}}); both empty when absent or
/// malformed. Safe on any JSON from a peer.
void SlurmPlacement(const nlohmann::json& capabilities, std::string* job, std::string* node);

}  // namespace nw
