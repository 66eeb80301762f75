// nw slurm submit-workers: start needlework workers as a Slurm job array. Writes a batch script
// (slurm/sbatch.h: one worker per array element, each one task with its CPUs and, with --gpu,
// one GPU) into --dir, submits it with `sbatch --parsable` and prints the job id. The workers
// reach the coordinator given by --coordinator or --coordinator-file (the file
// `nw coordinator --endpoint-file` writes), with CURVE keys from files, leave when they have had
// nothing to do for --idle-exit-s, and drain on SIGTERM (scancel, preemption, and
// --signal-grace-s before the time limit). docs/slurm.md has the whole story.
//
// Exit codes: 0 submitted (or printed, --dry-run); 1 sbatch failed or refused; 2 bad arguments.
#include <unistd.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "coordinator/curve.h"
#include "slurm/sbatch.h"

namespace nw::cli {
namespace {

namespace fs = std::filesystem;

struct SubmitWorkersArgs {
  int workers = 0;
  int max_running = 0;
  std::string coordinator;
  std::string coordinator_file;
  std::string server_key;
  std::string curve_key;
  bool gpu = false;
  std::string gres;
  int cpus_per_worker = 0;  // 0: one per slot
  int slots = 1;
  int prefetch = -1;
  std::string mem, partition, account, qos, time_limit;
  std::string job_name = "nw-worker";
  std::vector<std::string> sbatch_args;
  bool no_requeue = false;
  int signal_grace_s = 120;
  int64_t drain_s = 25;  // below Slurm's default KillWait (30 s): SIGKILL comes then
  int64_t idle_exit_s = 300;
  int64_t coordinator_wait_s = 600;
  std::vector<std::string> models;
  std::string dir = "nw-slurm";
  std::string nw;
  std::string sbatch = "sbatch";
  bool dry_run = false;
};

std::string Absolute(const std::string& p) {
  std::error_code ec;
  fs::path abs = fs::absolute(p, ec);
  return ec ? p : abs.lexically_normal().string();
}

Result<std::string> SelfExecutable() {
  std::array<char, 4096> buf{};
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return Status::Internal("cannot find my own executable; give --nw PATH");
  return std::string(buf.data(), static_cast<size_t>(n));
}

// The worker's command line inside the batch script: absolute paths, as the job may start in
// another directory.
Result<std::vector<std::string>> WorkerCommand(const SubmitWorkersArgs& a) {
  std::string nw = a.nw;
  if (nw.empty()) {
    NW_ASSIGN_OR_RETURN(nw, SelfExecutable());
  }
  std::vector<std::string> cmd = {Absolute(nw), "worker"};
  if (!a.coordinator.empty()) {
    cmd.insert(cmd.end(), {"--coordinator", a.coordinator});
  } else {
    cmd.insert(cmd.end(), {"--coordinator-file", Absolute(a.coordinator_file),
                           "--coordinator-wait-s", std::to_string(a.coordinator_wait_s)});
  }
  if (!a.server_key.empty()) {
    // Z85 given inline stays as it is; a file becomes absolute and must be readable now.
    NW_RETURN_IF_ERROR(ReadCurvePublicKey(a.server_key).status());
    const bool is_file = fs::exists(a.server_key);
    cmd.insert(cmd.end(), {"--server-key", is_file ? Absolute(a.server_key) : a.server_key});
    NW_RETURN_IF_ERROR(ReadCurveSecretKeyFile(a.curve_key).status());
    cmd.insert(cmd.end(), {"--curve-key", Absolute(a.curve_key)});
  }
  if (a.gpu) cmd.push_back("--gpu-visible");
  cmd.insert(cmd.end(), {"--slots", std::to_string(a.slots)});
  if (a.prefetch >= 0) cmd.insert(cmd.end(), {"--prefetch", std::to_string(a.prefetch)});
  cmd.insert(cmd.end(), {"--idle-exit-s", std::to_string(a.idle_exit_s), "--drain-s",
                         std::to_string(a.drain_s)});
  for (const std::string& m : a.models) cmd.insert(cmd.end(), {"--model", Absolute(m)});
  return cmd;
}

int SubmitWorkers(const SubmitWorkersArgs& a) {
  if (a.coordinator.empty() == a.coordinator_file.empty()) {
    std::cerr << "nw slurm submit-workers: give one of --coordinator EP and --coordinator-file "
                 "FILE\n";
    return 2;
  }
  if (a.server_key.empty() != a.curve_key.empty()) {
    std::cerr << "nw slurm submit-workers: CURVE needs both --server-key (the coordinator's "
                 "public key) and --curve-key (the workers' key pair)\n";
    return 2;
  }
  if (a.slots < 1 || a.drain_s < 0 || a.idle_exit_s < 0 || a.coordinator_wait_s < 0) {
    std::cerr << "nw slurm submit-workers: --slots must be >= 1; --drain-s, --idle-exit-s and "
                 "--coordinator-wait-s >= 0\n";
    return 2;
  }
  if (a.signal_grace_s > 0 && a.signal_grace_s <= a.drain_s) {
    std::cerr << "nw slurm submit-workers: --signal-grace-s (" << a.signal_grace_s
              << ") must exceed --drain-s (" << a.drain_s
              << "): the warning before the time limit must leave the drain its time\n";
    return 2;
  }
  auto command = WorkerCommand(a);
  if (!command.ok()) {
    std::cerr << "nw slurm submit-workers: " << command.status().ToString() << "\n";
    return 2;
  }
  WorkerArraySpec spec;
  spec.workers = a.workers;
  spec.max_running = a.max_running;
  spec.job_name = a.job_name;
  spec.cpus_per_worker = a.cpus_per_worker > 0 ? a.cpus_per_worker : a.slots;
  spec.gpus_per_worker = a.gpu ? 1 : 0;
  spec.gres = a.gres;
  spec.mem = a.mem;
  spec.partition = a.partition;
  spec.account = a.account;
  spec.qos = a.qos;
  spec.time_limit = a.time_limit;
  spec.requeue = !a.no_requeue;
  spec.signal_grace_s = a.signal_grace_s;
  spec.extra = a.sbatch_args;
  spec.log_dir = Absolute(a.dir);
  spec.command = *command;
  auto script = RenderWorkerArrayScript(spec);
  if (!script.ok()) {
    std::cerr << "nw slurm submit-workers: " << script.status().message() << "\n";
    return 2;
  }
  if (a.dry_run) {
    std::cout << *script;
    return 0;
  }
  std::error_code ec;
  fs::create_directories(spec.log_dir, ec);
  if (ec) {
    std::cerr << "nw slurm submit-workers: --dir " << spec.log_dir << ": " << ec.message() << "\n";
    return 1;
  }
  const auto stamp = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  const std::string path =
      spec.log_dir + "/" + a.job_name + "-" + std::to_string(stamp) + ".sbatch";
  {
    std::ofstream out(path);
    out << *script;
    out.close();
    if (!out) {
      std::cerr << "nw slurm submit-workers: cannot write " << path << "\n";
      return 1;
    }
  }
  auto id = SubmitBatchScript(a.sbatch, path);
  if (!id.ok()) {
    std::cerr << "nw slurm submit-workers: " << id.status().message() << "\n";
    return 1;
  }
  std::cout << *id << "\n";
  std::cerr << "submitted " << a.workers << " workers as Slurm job array " << *id << " (script "
            << path << ", logs " << spec.log_dir << "/" << a.job_name << "-" << *id << "_N.out)\n";
  return 0;
}

}  // namespace

void RegisterSlurm(CLI::App& app, Globals& g) {
  auto* slurm = app.add_subcommand("slurm", "Run needlework workers as Slurm jobs");
  slurm->require_subcommand(1);
  auto* cmd = slurm->add_subcommand(
      "submit-workers",
      "Submit a Slurm job array of `nw worker`s (one per array element) with sbatch; prints the "
      "job id");
  auto a = std::make_shared<SubmitWorkersArgs>();
  cmd->add_option("--workers", a->workers, "Number of workers (array elements)")->required();
  cmd->add_option("--coordinator", a->coordinator, "The coordinator's endpoint (tcp://HOST:PORT)")
      ->envname("NW_COORDINATOR");
  cmd->add_option("--coordinator-file", a->coordinator_file,
                  "Or: the file `nw coordinator --endpoint-file` writes (on a shared file system)");
  cmd->add_option("--server-key", a->server_key, "The coordinator's public key (NAME.pub)");
  cmd->add_option("--curve-key", a->curve_key, "The workers' key pair (NAME.key)");
  cmd->add_flag("--gpu", a->gpu,
                "GPU workers: one GPU per worker (--gpus-per-task=1), the engine on the GPU Slurm "
                "gives it");
  cmd->add_option("--gres", a->gres, "With --gpu: request the GPU as --gres=VALUE (e.g. gpu:1)");
  cmd->add_option("--cpus-per-worker", a->cpus_per_worker,
                  "CPUs per worker (--cpus-per-task; default: one per slot)");
  cmd->add_option("--slots", a->slots, "Jobs each worker runs at once")->capture_default_str();
  cmd->add_option("--prefetch", a->prefetch, "Jobs each worker queues locally beyond its slots");
  cmd->add_option("--mem", a->mem, "Memory per worker (--mem, e.g. 16G)");
  cmd->add_option("--partition,-p", a->partition, "Slurm partition");
  cmd->add_option("--account,-A", a->account, "Slurm account");
  cmd->add_option("--qos", a->qos, "Slurm QoS");
  cmd->add_option("--time,-t", a->time_limit, "Time limit per worker (e.g. 4:00:00)");
  cmd->add_option("--job-name", a->job_name, "Slurm job name")->capture_default_str();
  cmd->add_option("--max-running", a->max_running,
                  "At most this many workers at once (--array=...%N; 0: no limit)");
  cmd->add_option("--sbatch-arg", a->sbatch_args,
                  "Another sbatch option, as --name=value (repeatable), e.g. "
                  "--sbatch-arg=--constraint=h100");
  cmd->add_flag("--no-requeue", a->no_requeue,
                "Do not let Slurm requeue a preempted or failed worker (default: --requeue)");
  cmd->add_option("--signal-grace-s", a->signal_grace_s,
                  "SIGTERM this many seconds before the time limit (--signal=B:TERM@S), so the "
                  "worker drains in time (0: none)")
      ->capture_default_str();
  cmd->add_option("--drain-s", a->drain_s,
                  "On SIGTERM, how long running jobs may take to finish before they are handed "
                  "back")
      ->capture_default_str();
  cmd->add_option("--idle-exit-s", a->idle_exit_s,
                  "A worker with nothing to do for this long leaves, giving its node back (0: "
                  "never)")
      ->capture_default_str();
  cmd->add_option("--coordinator-wait-s", a->coordinator_wait_s,
                  "With --coordinator-file: how long a worker waits for the file")
      ->capture_default_str();
  cmd->add_option("--model", a->models, "Only jobs of this model folder (repeatable)");
  cmd->add_option("--dir", a->dir, "Where the batch script and the workers' logs go")
      ->capture_default_str();
  cmd->add_option("--nw", a->nw, "The nw executable the workers run (default: this one)");
  cmd->add_option("--sbatch", a->sbatch, "The sbatch command")->capture_default_str();
  cmd->add_flag("--dry-run", a->dry_run, "Print the batch script; submit nothing");
  cmd->callback([a, &g] { g.exit_code = SubmitWorkers(*a); });
}

}  // namespace nw::cli
