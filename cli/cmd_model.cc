// nw model init: writes a random-weight checkpoint of any V4 config (BF16 or the real FP8+FP4
// layout) with a byte-level BPE tokenizer trained on needlework's own NIAH text, for tests,
// benchmarks and plumbing runs. --layers/--mtp-layers/--vocab/--routed-experts reduce the config
// (ReduceConfig) while keeping every per-layer shape, e.g. a 2-layer DeepSeek-V4-Flash in the
// real tensor formats:
//   nw model init --config models/configs/v4-flash.json --layers 2 --layout real --seed 1 DIR
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "engine/checkpoint/config.h"
#include "engine/checkpoint/random_checkpoint.h"
#include "engine/text/tokenizer.h"
#include "task/niah.h"

namespace nw::cli {
namespace {

struct ModelInitArgs {
  std::string config;
  std::string out;
  uint64_t seed = 0;
  std::string layout = "bf16";
  int64_t max_shard_mb = 0;
  int64_t corpus_kb = 1024;
  ConfigReduction reduce;
};

Status ModelInit(const ModelInitArgs& a) {
  NW_ASSIGN_OR_RETURN(ModelConfig full, LoadModelConfig(a.config));
  NW_ASSIGN_OR_RETURN(ModelConfig cfg, ReduceConfig(full, a.reduce));
  CheckpointLayout layout;
  if (a.layout == "bf16") {
    layout = CheckpointLayout::kBf16;
  } else if (a.layout == "fp8" || a.layout == "real") {
    layout = CheckpointLayout::kFp8Fp4;
  } else {
    return Status::InvalidArgument("--layout must be bf16, fp8 or real, not '" + a.layout + "'");
  }
  // The tokenizer is trained on text from the same generators the prompts use, with the
  // special tokens at the end of the vocabulary; the config's BOS/EOS point at them.
  const std::vector<std::string> specials = {"<|begin_of_text|>", "<|end_of_text|>"};
  const std::string corpus = NiahTokenizerCorpus(a.seed, static_cast<size_t>(a.corpus_kb) * 1024);
  NW_ASSIGN_OR_RETURN(nlohmann::json tok_json, TrainByteLevelBpe(corpus, cfg.vocab_size, specials));
  NW_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::FromJson(tok_json, "trained tokenizer"));
  auto bos = tok.TokenId(specials[0]);
  auto eos = tok.TokenId(specials[1]);
  if (!bos || !eos) return Status::Internal("trained tokenizer lacks its special tokens");
  cfg.bos_token_id = *bos;
  cfg.eos_token_id = *eos;

  std::filesystem::create_directories(a.out);
  NW_RETURN_IF_ERROR(WriteRandomCheckpoint(cfg, a.seed, layout, a.out, a.max_shard_mb << 20));
  const auto tok_path = std::filesystem::path(a.out) / "tokenizer.json";
  std::ofstream f(tok_path);
  f << tok_json.dump(1) << "\n";
  if (!f) return Status::IoError("cannot write " + tok_path.string());
  return Status::Ok();
}

}  // namespace

void RegisterModel(CLI::App& app, Globals& g) {
  auto* model = app.add_subcommand("model", "Model utilities");
  model->require_subcommand(1);
  auto args = std::make_shared<ModelInitArgs>();
  auto* init = model->add_subcommand(
      "init", "Write a random-weight checkpoint (config.json, model.safetensors, tokenizer.json)");
  init->add_option("--config", args->config, "config.json to instantiate (HF or ModelArgs keys)")
      ->required()
      ->check(CLI::ExistingFile);
  init->add_option("--seed", args->seed, "Seed for weights and tokenizer corpus")
      ->capture_default_str();
  init->add_option("--layout,--formats", args->layout,
                   "bf16, or fp8 = real (the real V4 formats: F8_E4M3 linears with 128x128 F8_E8M0 "
                   "scales, FP4 e2m1 routed experts with per-32 F8_E8M0 scales)")
      ->capture_default_str();
  init->add_option("--layers", args->reduce.layers,
                   "Keep only the first N main layers (0: all); per-layer shapes stay")
      ->capture_default_str();
  init->add_option("--mtp-layers", args->reduce.mtp_layers,
                   "Keep only the first N MTP blocks (-1: all)")
      ->capture_default_str();
  init->add_option("--vocab", args->reduce.vocab_size,
                   "Reduce vocab_size (embed, head, tid2eid rows; 0: the config's)")
      ->capture_default_str();
  init->add_option("--routed-experts", args->reduce.routed_experts,
                   "Reduce n_routed_experts (>= num_experts_per_tok; 0: the config's)")
      ->capture_default_str();
  init->add_option("--max-shard-mb", args->max_shard_mb,
                   "Shard weights above this size (0: one file)")
      ->capture_default_str();
  init->add_option("--corpus-kb", args->corpus_kb, "Tokenizer training text size")
      ->capture_default_str();
  init->add_option("out", args->out, "Output folder")->required();
  init->callback([args, &g] {
    Status s = ModelInit(*args);
    if (!s.ok()) {
      std::cerr << "nw model init: " << s.ToString() << "\n";
      g.exit_code = 2;
      return;
    }
    if (!g.quiet) std::cout << "wrote " << args->out << "\n";
  });
}

}  // namespace nw::cli
