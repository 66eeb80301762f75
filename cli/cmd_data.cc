// nw data niah: emits NIAH training/evaluation samples as token files from the same prompt
// builder the workers use, so that training data and evaluation prompts come from one generator.
//
// Output (DIR):
//   tokens.bin   int32 little-endian token ids, samples back to back
//   index.jsonl  one JSON object per sample: offset (in tokens), prompt_len, answer_len (answer
//                tokens follow the prompt, then one EOS token, counted in answer_len),
//                needle_begin, needle_end, question_begin, task, haystack, context_length,
//                needle_position, expected
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/splitmix64.h"
#include "engine/text/tokenizer.h"
#include "task/niah.h"

namespace nw::cli {
namespace {

struct DataArgs {
  std::string tokenizer;
  std::string out;
  int64_t count = 1000;
  int64_t min_len = 256;
  int64_t max_len = 8192;
  uint64_t seed = 0;
  std::vector<std::string> tasks = {"niah-single", "niah-multikey", "niah-repeat"};
  std::vector<std::string> haystacks = {"noise", "essay", "needles"};
  std::vector<double> task_weights;
  double window_fraction = 0.1;  // share of samples with the needle in the last 128 tokens
  std::string eos = "<|end_of_text|>";
};

Status WriteData(const DataArgs& a) {
  if (a.count <= 0) return Status::InvalidArgument("--count must be positive");
  if (a.min_len <= 0 || a.max_len < a.min_len) {
    return Status::InvalidArgument("--min-len/--max-len must satisfy 0 < min <= max");
  }
  NW_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::Load(a.tokenizer));
  auto eos = tok.TokenId(a.eos);
  if (!eos) return Status::InvalidArgument(a.tokenizer + ": no token '" + a.eos + "' for EOS");
  std::vector<NiahTask> tasks;
  for (const auto& t : a.tasks) {
    NW_ASSIGN_OR_RETURN(NiahTask nt, ParseNiahTask(t));
    tasks.push_back(nt);
  }
  std::vector<NiahHaystack> hays;
  for (const auto& h : a.haystacks) {
    NW_ASSIGN_OR_RETURN(NiahHaystack nh, ParseNiahHaystack(h));
    hays.push_back(nh);
  }
  std::filesystem::create_directories(a.out);
  std::ofstream bin(std::filesystem::path(a.out) / "tokens.bin", std::ios::binary);
  std::ofstream idx(std::filesystem::path(a.out) / "index.jsonl");
  if (!bin || !idx) return Status::IoError("cannot write into " + a.out);
  // SplitMix64: a deterministic, library-independent stream for the sample parameters.
  SplitMix64 rng(a.seed * 0x632BE59BD9B4E019ull + 1);
  int64_t offset = 0;
  for (int64_t i = 0; i < a.count; ++i) {
    NiahSpec spec;
    spec.task = tasks[rng.Next() % tasks.size()];
    spec.haystack = hays[rng.Next() % hays.size()];
    // Log-uniform lengths: as many short samples as long ones per octave.
    const double lo = std::log(static_cast<double>(a.min_len));
    const double hi = std::log(static_cast<double>(a.max_len));
    spec.context_length = static_cast<int64_t>(std::exp(lo + (hi - lo) * rng.Uniform()));
    spec.seed = rng.Next();
    if (rng.Uniform() < a.window_fraction) {
      spec.needle_position = -static_cast<double>(40 + rng.Next() % 80);
    } else {
      spec.needle_position = rng.Uniform();
    }
    Result<NiahPrompt> p = BuildNiahPrompt(tok, spec);
    if (!p.ok()) {
      // Too short for this task/position: draw again rather than bias the mix silently.
      --i;
      continue;
    }
    std::vector<int32_t> answer = tok.Encode(" " + p->expected);
    answer.push_back(*eos);
    bin.write(reinterpret_cast<const char*>(p->tokens.data()),
              static_cast<std::streamsize>(p->tokens.size() * sizeof(int32_t)));
    bin.write(reinterpret_cast<const char*>(answer.data()),
              static_cast<std::streamsize>(answer.size() * sizeof(int32_t)));
    nlohmann::json j{{"offset", offset},
                     {"prompt_len", p->tokens.size()},
                     {"answer_len", answer.size()},
                     {"needle_begin", p->needle_begin},
                     {"needle_end", p->needle_end},
                     {"question_begin", p->question_begin},
                     {"task", NiahTaskName(spec.task)},
                     {"haystack", NiahHaystackName(spec.haystack)},
                     {"context_length", spec.context_length},
                     {"needle_position", spec.needle_position},
                     {"expected", p->expected}};
    idx << j.dump() << "\n";
    offset += static_cast<int64_t>(p->tokens.size() + answer.size());
  }
  if (!bin || !idx) return Status::IoError("write error in " + a.out);
  return Status::Ok();
}

}  // namespace

void RegisterData(CLI::App& app, Globals& g) {
  auto* data = app.add_subcommand("data", "Emit NIAH samples as token files (training data)");
  data->require_subcommand(1);
  auto a = std::make_shared<DataArgs>();
  auto* niah = data->add_subcommand("niah", "Write tokens.bin + index.jsonl of NIAH samples");
  niah->add_option("--tokenizer", a->tokenizer, "tokenizer.json")->required();
  niah->add_option("--out", a->out, "Output folder")->required();
  niah->add_option("--count", a->count, "Samples")->capture_default_str();
  niah->add_option("--min-len", a->min_len, "Shortest prompt (tokens)")->capture_default_str();
  niah->add_option("--max-len", a->max_len, "Longest prompt (tokens)")->capture_default_str();
  niah->add_option("--seed", a->seed, "Seed")->capture_default_str();
  niah->add_option("--tasks", a->tasks, "Task variants to mix")->capture_default_str();
  niah->add_option("--haystacks", a->haystacks, "Haystacks to mix")->capture_default_str();
  niah->add_option("--window-fraction", a->window_fraction,
                   "Share of samples with the needle inside the last 128 tokens")
      ->capture_default_str();
  niah->add_option("--eos", a->eos, "EOS token text")->capture_default_str();
  niah->callback([a, &g] {
    Status s = WriteData(*a);
    if (!s.ok()) {
      std::cerr << "nw data niah: " << s.ToString() << "\n";
      g.exit_code = 2;
    }
  });
}

}  // namespace nw::cli
