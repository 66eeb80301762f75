// nw diff: the same prompts through two engine configurations (backend, precision, fault, model
// folder), compared layer by layer (diff/, docs/diff.md). Side A decodes greedily, side B is fed
// A's tokens, so both process the same tokens. Prints per layer the cosine and max relative
// error of the attention output and of the residual streams, the indexer top-k Jaccard per
// position band, the logit error and greedy agreement, and the first layer / component where the
// two part by the thresholds.
// Exit codes: 0 the configurations agree within the thresholds; 1 they part (the first diverging
// layer / component is named); 2 bad input or an engine error (the message names the file or
// field). Like diff(1).
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "diff/render.h"
#include "diff/run_diff.h"

namespace nw::cli {
namespace {

constexpr int kDiffBadInput = 2;

struct DiffArgs {
  std::string model;
  std::string a, b;
  std::string prompts_file;
  diff::PromptDesign design;
  int steps = 8;
  int topk = 0;
  std::string format = "text";
  diff::DiffThresholds thresholds;
};

Result<int> RunDiffCommand(const DiffArgs& args) {
  if (args.format != "text" && args.format != "markdown" && args.format != "json") {
    return Status::InvalidArgument("--format: '" + args.format +
                                   "' is not one of text, markdown, json");
  }
  if (args.topk < 0) return Status::InvalidArgument("--topk: must be >= 0");
  if (!(args.thresholds.max_rel_error >= 0)) {
    return Status::InvalidArgument("--max-rel-error: must be >= 0");
  }
  if (!(args.thresholds.min_jaccard >= 0 && args.thresholds.min_jaccard <= 1)) {
    return Status::InvalidArgument("--min-jaccard: must be in [0, 1]");
  }
  if (!(args.thresholds.min_greedy >= 0 && args.thresholds.min_greedy <= 1)) {
    return Status::InvalidArgument("--min-greedy: must be in [0, 1]");
  }
  diff::DiffConfig defaults;
  defaults.model_dir = args.model;
  NW_ASSIGN_OR_RETURN(diff::DiffConfig ca, diff::ParseDiffConfig(args.a, defaults, "--a"));
  NW_ASSIGN_OR_RETURN(diff::DiffConfig cb, diff::ParseDiffConfig(args.b, defaults, "--b"));
  if (ca.model_dir.empty() || cb.model_dir.empty()) {
    return Status::InvalidArgument("--model: required unless --a and --b both name model=DIR");
  }
  NW_ASSIGN_OR_RETURN(std::unique_ptr<diff::DiffSide> a, diff::DiffSide::Create(ca, "A"));
  NW_ASSIGN_OR_RETURN(std::unique_ptr<diff::DiffSide> b, diff::DiffSide::Create(cb, "B"));

  std::vector<diff::DiffPrompt> prompts;
  diff::DiffOptions o;
  o.steps = args.steps;
  o.topk = args.topk;
  o.thresholds = args.thresholds;
  if (!args.prompts_file.empty()) {
    NW_ASSIGN_OR_RETURN(
        prompts, diff::FilePrompts(args.prompts_file, a->tokenizer(), a->model().vocab_size));
    o.prompts_source = std::to_string(prompts.size()) + " from " + args.prompts_file;
  } else {
    const diff::PromptDesign& d = args.design;
    NW_ASSIGN_OR_RETURN(prompts, diff::DesignPrompts(a->tokenizer(), d));
    char pos[32];
    std::snprintf(pos, sizeof(pos), "%g", d.needle_position);
    o.prompts_source = std::to_string(prompts.size()) + " (" + d.task + " " + d.haystack + ", " +
                       std::to_string(d.context_length) + " tokens, needle at " + pos + ", seed " +
                       std::to_string(d.seed) + ")";
  }
  NW_ASSIGN_OR_RETURN(diff::DiffReport r, diff::RunDiff(*a, *b, prompts, o));
  if (args.format == "json") {
    std::cout << diff::RenderJson(r);
  } else if (args.format == "markdown") {
    std::cout << diff::RenderMarkdown(r);
  } else {
    std::cout << diff::RenderText(r);
  }
  return r.exit_code();
}

}  // namespace

void RegisterDiff(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand(
      "diff",
      "Compare two engine configurations layer by layer on the same prompts "
      "(exit 0 same within the thresholds, 1 different, 2 bad input; docs/diff.md)");
  auto a = std::make_shared<DiffArgs>();
  cmd->add_option("--model", a->model, "Model folder of both sides (unless --a/--b say model=)");
  cmd->add_option("--a", a->a,
                  "Side A (the reference): key=value,... of backend, precision, fault, model "
                  "(default backend=cpu,precision=fp32,fault=none)");
  cmd->add_option("--b", a->b, "Side B, as --a");
  cmd->add_option("--prompts", a->prompts_file,
                  "JSON prompts file ({\"prompts\": [{\"name\", \"tokens\" | \"text\"}]}) "
                  "instead of a design point");
  cmd->add_option("--task", a->design.task, "Design point: task")->capture_default_str();
  cmd->add_option("--haystack", a->design.haystack, "Design point: haystack")
      ->capture_default_str();
  cmd->add_option("--length", a->design.context_length, "Design point: context length in tokens")
      ->capture_default_str();
  cmd->add_option("--position", a->design.needle_position,
                  "Design point: needle position (fraction, or negative tokens from the end)")
      ->capture_default_str();
  cmd->add_option("--seed", a->design.seed, "Design point: campaign seed")->capture_default_str();
  cmd->add_option("--trials", a->design.trials, "Design point: prompts (one per trial)")
      ->capture_default_str();
  cmd->add_option("--steps", a->steps, "Decode steps after each prompt")->capture_default_str();
  cmd->add_option("--topk", a->topk, "Indexer top-k (0: the model's)")->capture_default_str();
  cmd->add_option("--max-rel-error", a->thresholds.max_rel_error,
                  "Attention, hidden state and logits part above this max relative error")
      ->capture_default_str();
  cmd->add_option("--min-jaccard", a->thresholds.min_jaccard,
                  "The indexer parts below this mean top-k Jaccard in a position band")
      ->capture_default_str();
  cmd->add_option("--min-greedy", a->thresholds.min_greedy,
                  "Greedy tokens part below this agreement")
      ->capture_default_str();
  cmd->add_option("--format", a->format, "text, markdown or json")->capture_default_str();
  cmd->callback([a, &g] {
    auto code = RunDiffCommand(*a);
    if (!code.ok()) {
      std::cerr << "nw diff: " << code.status().ToString() << "\n";
      g.exit_code = kDiffBadInput;
      return;
    }
    g.exit_code = *code;
  });
}

}  // namespace nw::cli
