#include "slurm/sbatch.h"

#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <sstream>

extern char** environ;

namespace nw {
namespace {

// A value that goes after `#SBATCH --flag=`: no whitespace, quotes, control characters or '#'.
Status CheckToken(const std::string& flag, const std::string& v) {
  if (v.empty()) return Status::Ok();
  for (unsigned char c : v) {
    if (c <= ' ' || c == 0x7f || c == '"' || c == '\'' || c == '\\' || c == '#' || c == '`' ||
        c == '$') {
      return Status::InvalidArgument(flag + ": '" + v +
                                     "' has whitespace, a quote or a shell character; it cannot "
                                     "go on an #SBATCH line");
    }
  }
  return Status::Ok();
}

}  // namespace

std::string ShellQuote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789_-+=./:,@%") == std::string::npos) {
    return arg;
  }
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

Result<std::string> RenderWorkerArrayScript(const WorkerArraySpec& s) {
  if (s.workers < 1 || s.workers > 100000) {
    return Status::InvalidArgument("--workers: must be 1..100000, got " +
                                   std::to_string(s.workers));
  }
  if (s.max_running < 0) return Status::InvalidArgument("--max-running: must be >= 0");
  if (s.cpus_per_worker < 1 || s.cpus_per_worker > 4096) {
    return Status::InvalidArgument("--cpus-per-worker: must be 1..4096, got " +
                                   std::to_string(s.cpus_per_worker));
  }
  if (s.gpus_per_worker < 0 || s.gpus_per_worker > 1) {
    return Status::InvalidArgument(
        "--gpu: a worker runs one engine on one GPU; start one worker per GPU");
  }
  if (!s.gres.empty() && s.gpus_per_worker == 0) {
    return Status::InvalidArgument("--gres: only for GPU workers (--gpu)");
  }
  if (s.signal_grace_s < 0) return Status::InvalidArgument("--signal-grace-s: must be >= 0");
  if (s.job_name.empty() || s.job_name.find('/') != std::string::npos) {
    return Status::InvalidArgument("--job-name: must be a non-empty name without '/'");
  }
  const std::pair<const char*, const std::string*> tokens[] = {
      {"--job-name", &s.job_name},   {"--gres", &s.gres},       {"--mem", &s.mem},
      {"--partition", &s.partition}, {"--account", &s.account}, {"--qos", &s.qos},
      {"--time", &s.time_limit},     {"--dir", &s.log_dir},
  };
  for (const auto& [flag, v] : tokens) NW_RETURN_IF_ERROR(CheckToken(flag, *v));
  for (const std::string& e : s.extra) {
    if (e.size() < 2 || e[0] != '-') {
      return Status::InvalidArgument("--sbatch-arg: '" + e +
                                     "' is not an sbatch option (give --name=value)");
    }
    NW_RETURN_IF_ERROR(CheckToken("--sbatch-arg", e));
  }
  if (s.log_dir.empty() || s.log_dir[0] != '/') {
    return Status::InvalidArgument("--dir: the log directory must be an absolute path");
  }
  if (s.command.empty()) return Status::InvalidArgument("worker command: empty");

  std::ostringstream o;
  o << "#!/bin/bash\n"
    << "# Written by `nw slurm submit-workers`: one needlework worker per array element.\n"
    << "#SBATCH --job-name=" << s.job_name << "\n"
    << "#SBATCH --array=0-" << (s.workers - 1);
  if (s.max_running > 0) o << "%" << s.max_running;
  o << "\n"
    << "#SBATCH --ntasks=1\n"
    << "#SBATCH --cpus-per-task=" << s.cpus_per_worker << "\n";
  if (s.gpus_per_worker > 0) {
    if (!s.gres.empty()) {
      o << "#SBATCH --gres=" << s.gres << "\n";
    } else {
      o << "#SBATCH --gpus-per-task=" << s.gpus_per_worker << "\n";
    }
  }
  if (!s.mem.empty()) o << "#SBATCH --mem=" << s.mem << "\n";
  if (!s.partition.empty()) o << "#SBATCH --partition=" << s.partition << "\n";
  if (!s.account.empty()) o << "#SBATCH --account=" << s.account << "\n";
  if (!s.qos.empty()) o << "#SBATCH --qos=" << s.qos << "\n";
  if (!s.time_limit.empty()) o << "#SBATCH --time=" << s.time_limit << "\n";
  o << (s.requeue ? "#SBATCH --requeue\n" : "#SBATCH --no-requeue\n");
  if (s.signal_grace_s > 0) o << "#SBATCH --signal=B:TERM@" << s.signal_grace_s << "\n";
  // %x job name, %A array job, %a task; appended, so a requeued worker's log continues.
  o << "#SBATCH --output=" << s.log_dir << "/%x-%A_%a.out\n"
    << "#SBATCH --open-mode=append\n";
  for (const std::string& e : s.extra) o << "#SBATCH " << e << "\n";
  o << "\n# exec: the worker is the batch step itself, so Slurm's SIGTERM reaches it directly.\n"
    << "exec";
  for (const std::string& a : s.command) o << " " << ShellQuote(a);
  o << "\n";
  return o.str();
}

Result<std::string> SubmitBatchScript(const std::string& sbatch, const std::string& script_path) {
  std::array<int, 2> out_pipe{-1, -1}, err_pipe{-1, -1};
  if (pipe(out_pipe.data()) != 0) {
    return Status::IoError(std::string("sbatch: pipe: ") + std::strerror(errno));
  }
  if (pipe(err_pipe.data()) != 0) {
    const int e = errno;
    close(out_pipe[0]);
    close(out_pipe[1]);
    return Status::IoError(std::string("sbatch: pipe: ") + std::strerror(e));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], STDERR_FILENO);
  for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) {
    posix_spawn_file_actions_addclose(&fa, fd);
  }
  std::vector<std::string> args = {sbatch, "--parsable", script_path};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, sbatch.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    return Status::Unavailable("cannot run " + sbatch + ": " + std::strerror(rc) +
                               " (is Slurm's client installed and on PATH?)");
  }
  std::string out, err;
  std::array<pollfd, 2> fds{{{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}}};
  int open_fds = 2;
  std::array<char, 4096> buf{};
  while (open_fds > 0) {
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = read(fds[i].fd, buf.data(), buf.size());
      if (n > 0) {
        (i == 0 ? out : err).append(buf.data(), static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (const auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  auto trim = [](std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
    return s;
  };
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status::FailedPrecondition("sbatch refused " + script_path + ": " +
                                      (err.empty() ? trim(out) : trim(err)));
  }
  // --parsable: "jobid" or "jobid;cluster".
  std::string id = trim(out);
  if (auto semi = id.find(';'); semi != std::string::npos) id.resize(semi);
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
    return Status::Internal("sbatch --parsable printed '" + trim(out) + "', not a job id");
  }
  return id;
}

}  // namespace nw
