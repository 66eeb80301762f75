// gpu_throughput_bench: needles judged per second by needlework's product path, per prompt length.
//
// Each job goes the way a campaign's job goes on a worker: a JobSpec (niah-single in noise,
// positions spread over the haystack) -> EngineExecutor::Execute (prompt built from the job's own
// seed, greedy generation up to --max-new-tokens, scoring) -> JobResult. One warm-up job per
// length and slot (engine load, first-touch allocations), then --jobs timed jobs. --slots K runs K
// engine slots at once, each a thread with its own EngineExecutor (its own engine and CUDA
// stream), taking the next job as it finishes one: what `nw worker --slots K` does.
// Printed per length: needles/s, mean prefill and decode ms, mean job ms (the executor's whole
// time for a job: prompt build, generation, scoring; what it adds to prefill + decode is the
// host's share), passes.
//
// --export DIR writes the very prompts the timed jobs used (DIR/prompts.jsonl, token ids in
// DIR/tokens/L_i.bin as int32 LE, and the answer tokens tokenize(" " + value) + EOS) so that
// bench/torch_baselines.py can time HF transformers and models/train/v4.py on the same prompts in
// the same device call; bench/run_throughput.sh runs both and prints the ratios.
//
// Lengths past the model's max_position_embeddings run on a copy of the model folder whose
// config.json has the limit raised to the length (RoPE/YaRN tables need no retraining; nothing
// here claims the model retrieves there: passes are printed as measured).
//
// Usage: gpu_throughput_bench [--model DIR] [--backend cuda] [--lengths 2048,8192,...]
//                             [--jobs N] [--slots K] [--max-new-tokens T] [--precision NAME]
//                             [--export DIR] [--json FILE] [--time-cap SECONDS]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "engine/checkpoint/model_files.h"
#include "engine/engine.h"
#include "protocol/job.h"
#include "task/job_prompt.h"
#include "task/niah.h"
#include "worker/engine_executor.h"

namespace nw {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Args {
  fs::path model = "models/tiny-v4";
  std::string backend = "cuda";
  std::vector<int64_t> lengths = {2048, 8192, 32768, 131072, 1048576};
  int jobs = 8;
  int slots = 1;
  int max_new_tokens = 16;
  std::string precision = "fp32";
  fs::path export_dir;
  fs::path json_out;
  double time_cap_s = 120;  // stop a length's timed jobs once this much time has been spent
};

// Parses the command line (CLI11); exits 0 after --help, 2 on a bad option or value.
Args ParseArgs(int argc, char** argv) {
  Args a;
  std::string model = a.model.string(), export_dir, json_out;
  CLI::App app{"GPU throughput: needles judged per second through the product path"};
  app.add_option("--model", model, "Model folder")->capture_default_str();
  app.add_option("--backend", a.backend, "Engine backend")->capture_default_str();
  app.add_option("--lengths", a.lengths, "Prompt lengths in tokens (at least 64 each)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{64}, int64_t{1} << 31))
      ->capture_default_str();
  app.add_option("--jobs", a.jobs, "Timed jobs per length")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--slots", a.slots, "Slots running jobs at once")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--max-new-tokens", a.max_new_tokens, "Greedy tokens at most")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--precision", a.precision, "Precision profile")->capture_default_str();
  app.add_option("--export", export_dir, "Write the timed jobs' prompts here (torch_baselines.py)");
  app.add_option("--json", json_out, "Write the figures as JSON");
  app.add_option("--time-cap", a.time_cap_s, "Stop a length's timed jobs after this many seconds")
      ->check(CLI::Range(0.001, 1e7))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
  a.model = model;
  a.export_dir = export_dir;
  a.json_out = json_out;
  return a;
}

template <typename T>
T OrDie(Result<T> r, const std::string& what) {
  if (!r.ok()) {
    std::fprintf(stderr, "gpu_throughput_bench: %s: %s\n", what.c_str(),
                 r.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(r);
}

// The model folder to run `length` tokens on: the model itself, or a copy (weights and tokenizer
// linked) whose config.json allows the length.
fs::path ModelFor(const fs::path& model, int64_t length, int64_t max_positions) {
  if (length + 64 <= max_positions) return model;
  const fs::path dir = fs::temp_directory_path() / ("nw-throughput-" + std::to_string(length));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(model)) {
    if (e.path().filename() != "config.json") {
      fs::create_symlink(fs::absolute(e.path()), dir / e.path().filename());
    }
  }
  std::ifstream in(model / "config.json");
  json cfg = json::parse(in);
  cfg["max_position_embeddings"] = length + 64;
  std::ofstream(dir / "config.json") << cfg.dump(2) << "\n";
  return dir;
}

JobSpec SpecFor(const Args& a, const fs::path& model_dir, const std::string& digest, int64_t length,
                int topk, const PrecisionProfile& precision, int i) {
  JobSpec s;
  s.model_dir = fs::absolute(model_dir).string();
  s.model_digest = digest;
  s.engine_version = kEngineVersion;
  s.task = "niah-single";
  s.haystack = "noise";
  s.context_length = length;
  s.needle_position = a.jobs == 1 ? 0.5 : double(i % a.jobs) / double(a.jobs - 1);
  s.topk = topk;
  s.precision = precision;
  s.backend = a.backend;
  s.seed = 20261201;
  s.trial = i;
  s.max_new_tokens = a.max_new_tokens;
  return s;
}

void Export(const fs::path& dir, const LoadedModel& m, const JobSpec& s, int i,
            std::ofstream& index) {
  // The prompt the executors build for this job (task/job_prompt.h), exported for the torch
  // baselines.
  const NiahPrompt p = OrDie(BuildJobPrompt(m.tokenizer, s), "prompt");
  const std::string name = std::to_string(s.context_length) + "_" + std::to_string(i) + ".bin";
  fs::create_directories(dir / "tokens");
  std::ofstream(dir / "tokens" / name, std::ios::binary)
      .write(reinterpret_cast<const char*>(p.tokens.data()),
             static_cast<std::streamsize>(p.tokens.size() * sizeof(int32_t)));
  std::vector<int32_t> answer = m.tokenizer.Encode(" " + p.expected);
  if (m.config.eos_token_id >= 0) answer.push_back(m.config.eos_token_id);
  index << json{{"length", s.context_length},   {"i", i},
                {"tokens", "tokens/" + name},   {"answer", answer},
                {"prompt_hash", p.prompt_hash}, {"needle_begin", p.needle_begin},
                {"needle_end", p.needle_end}}
               .dump()
        << "\n";
}

int Main(int argc, char** argv) {
  const Args a = ParseArgs(argc, argv);
  const LoadedModel base = OrDie(LoadModelFolder(a.model), "model " + a.model.string());
  const PrecisionProfile precision = OrDie(NamedPrecisionProfile(a.precision), "precision");
  const int topk = base.config.index_topk;
  std::ofstream index;
  if (!a.export_dir.empty()) {
    fs::create_directories(a.export_dir);
    index.open(a.export_dir / "prompts.jsonl");
  }
  EngineExecutorOptions eo;
  eo.worker_id = "bench";
  eo.backends = {a.backend};
  eo.max_loaded_engines = 1;
  std::vector<std::unique_ptr<EngineExecutor>> slots;
  for (int k = 0; k < a.slots; ++k) slots.push_back(std::make_unique<EngineExecutor>(eo));

  json rows = json::array();
  // Rewritten after every length, so a run stopped by a time limit keeps what it measured.
  auto write_json = [&] {
    if (a.json_out.empty()) return;
    std::ofstream(a.json_out) << json{{"model", a.model.string()},
                                      {"engine_version", kEngineVersion},
                                      {"max_new_tokens", a.max_new_tokens},
                                      {"topk", topk},
                                      {"rows", rows}}
                                     .dump(1)
                              << "\n";
  };
  std::printf(
      "%s, backend %s, precision %s, top-k %d, up to %d new tokens, %d jobs per length, %d "
      "slot(s)\n",
      a.model.string().c_str(), a.backend.c_str(), a.precision.c_str(), topk, a.max_new_tokens,
      a.jobs, a.slots);
  std::printf("%9s %6s %10s %11s %10s %8s %7s %s\n", "tokens", "jobs", "needles/s", "prefill ms",
              "decode ms", "job ms", "passes", "note");
  for (int64_t length : a.lengths) {
    const fs::path dir = ModelFor(a.model, length, base.config.max_position_embeddings);
    const std::string digest = dir == a.model
                                   ? base.files.digest
                                   : OrDie(LocateModel(dir), "model copy " + dir.string()).digest;
    json row{
        {"length", length}, {"backend", a.backend}, {"precision", a.precision}, {"slots", a.slots}};
    // Warm-up job per slot (engine load for this folder, first allocations at this length), all
    // slots at once: not timed.
    const JobSpec warm = SpecFor(a, dir, digest, length, topk, precision, a.jobs);
    std::vector<JobResult> warmed(slots.size());
    {
      std::vector<std::jthread> threads;
      for (size_t k = 0; k < slots.size(); ++k) {
        threads.emplace_back([&, k] { warmed[k] = slots[k]->Execute(warm, warm.Key(), 1); });
      }
    }
    const auto failed = std::find_if(warmed.begin(), warmed.end(), [](const JobResult& r) {
      return r.outcome == Outcome::kEngineError || r.outcome == Outcome::kTimeout;
    });
    const JobResult& w = failed == warmed.end() ? warmed.front() : *failed;
    if (w.outcome == Outcome::kEngineError || w.outcome == Outcome::kTimeout) {
      std::printf("%9lld %6s %10s %11s %10s %8s %7s %s: %s\n", static_cast<long long>(length), "-",
                  "-", "-", "-", "-", "-", w.error_code.c_str(), w.error_message.c_str());
      row["error"] = w.error_code + ": " + w.error_message;
      rows.push_back(row);
      write_json();
      continue;
    }
    if (index.is_open()) {  // before the clock starts
      for (int i = 0; i < a.jobs; ++i) {
        Export(a.export_dir, base, SpecFor(a, dir, digest, length, topk, precision, i), i, index);
      }
      index.flush();
    }
    // Each slot takes the next job index until the jobs or the time cap run out.
    struct Tally {
      int done = 0, passes = 0, errors = 0;
      double prefill = 0, decode = 0, job = 0;
      std::string first_error;
    };
    std::vector<Tally> tallies(slots.size());
    std::atomic<int> next{0};
    const auto t0 = Clock::now();
    {
      std::vector<std::jthread> threads;
      for (size_t k = 0; k < slots.size(); ++k) {
        threads.emplace_back([&, k] {
          Tally& t = tallies[k];
          for (int i = next++; i < a.jobs; i = next++) {
            const JobSpec s = SpecFor(a, dir, digest, length, topk, precision, i);
            const JobResult r = slots[k]->Execute(s, s.Key(), 1);
            ++t.done;
            t.passes += r.outcome == Outcome::kPass;
            if (r.outcome == Outcome::kEngineError || r.outcome == Outcome::kTimeout) {
              ++t.errors;
              if (t.first_error.empty()) t.first_error = r.error_code + ": " + r.error_message;
            }
            t.prefill += r.prefill_ms;
            t.decode += r.decode_ms;
            t.job += r.total_ms;
            if (std::chrono::duration<double>(Clock::now() - t0).count() > a.time_cap_s) break;
          }
        });
      }
    }
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    int done = 0, passes = 0, errors = 0;
    double prefill = 0, decode = 0, job = 0;
    std::string first_error;
    for (const Tally& t : tallies) {
      if (first_error.empty()) first_error = t.first_error;
      done += t.done;
      passes += t.passes;
      errors += t.errors;
      prefill += t.prefill;
      decode += t.decode;
      job += t.job;
    }
    const double rate = done / wall;
    std::printf(
        "%9lld %6d %10.2f %11.1f %10.1f %8.1f %4d/%-2d %s\n", static_cast<long long>(length), done,
        rate, prefill / done, decode / done, job / done, passes, done,
        errors ? (std::to_string(errors) + " engine errors, the first: " + first_error).c_str()
               : "");
    std::fflush(stdout);
    row.update({{"jobs", done},
                {"wall_s", wall},
                {"needles_per_s", rate},
                {"prefill_ms_mean", prefill / done},
                {"decode_ms_mean", decode / done},
                {"job_ms_mean", job / done},
                {"passes", passes},
                {"errors", errors}});
    if (!first_error.empty()) row["error"] = first_error;
    rows.push_back(row);
    write_json();
  }
  return 0;
}

}  // namespace
}  // namespace nw

int main(int argc, char** argv) { return nw::Main(argc, argv); }
