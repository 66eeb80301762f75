// Batch scripts for Slurm, and their submission with `sbatch --parsable`.
//
// `nw slurm submit-workers` describes a job array of workers (WorkerArraySpec): one array element
// per worker, each one task with its CPUs and, for GPU workers, one GPU (--gpus-per-task=1, or a
// GRES string). RenderWorkerArrayScript writes the script: every scheduling choice is an #SBATCH
// line (so the script can be read, kept and resubmitted by hand), and the worker is `exec`ed so
// it is the batch step's process itself: the SIGTERM Slurm sends at scancel, preemption and
// `--signal=B:TERM@S` before the time limit reaches the worker, which drains (worker/worker.h).
// SubmitBatchScript runs `sbatch --parsable SCRIPT` and returns the job id it prints.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace nw {

struct WorkerArraySpec {
  int workers = 1;      // array elements 0..workers-1, one worker each
  int max_running = 0;  // > 0: at most this many at once (--array=0-N%M)
  std::string job_name = "nw-worker";
  int cpus_per_worker = 1;
  int gpus_per_worker = 0;  // 0: CPU workers; 1: --gpus-per-task=1 (one engine per GPU)
  std::string gres;         // instead of --gpus-per-task: --gres=VALUE, e.g. gpu:a100:1
  std::string mem;          // --mem, e.g. 16G; empty: the partition's default
  std::string partition, account, qos, time_limit;
  bool requeue = true;  // --requeue (a preempted or requeued worker starts again) or --no-requeue
  int signal_grace_s = 0;  // > 0: --signal=B:TERM@S (SIGTERM S seconds before the time limit)
  std::vector<std::string> extra;    // more sbatch options, one argument each ("--constraint=h100")
  std::string log_dir;               // absolute; output goes to LOG_DIR/%x-%A_%a.out (appended)
  std::vector<std::string> command;  // the worker's argv (absolute nw path first)
};

/// The script, or InvalidArgument naming the offending field (flag names as in
/// `nw slurm submit-workers`): values that would not survive an #SBATCH line (whitespace,
/// control characters, quotes), counts out of range, options not starting with '-'.
Result<std::string> RenderWorkerArrayScript(const WorkerArraySpec& spec);

/// Quotes one argument for a POSIX shell.
std::string ShellQuote(const std::string& arg);

/// Runs `SBATCH --parsable SCRIPT` (SBATCH found on PATH when it has no '/') and returns the job
/// id it printed (the part before ';', as --parsable defines). Unavailable when sbatch cannot be
/// run; FailedPrecondition with sbatch's own message when it refuses the job.
Result<std::string> SubmitBatchScript(const std::string& sbatch, const std::string& script_path);

}  // namespace nw
