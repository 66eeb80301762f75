#include "diff/traced_run.h"

#include <sstream>
#include <utility>

#include "engine/engine.h"
#include "engine/generate.h"

namespace nw::diff {

std::string DiffConfig::Label() const {
  return "backend=" + backend + " precision=" + precision +
         " fault=" + std::string(FaultName(fault));
}

Result<DiffConfig> ParseDiffConfig(const std::string& spec, const DiffConfig& defaults,
                                   const std::string& what) {
  DiffConfig c = defaults;
  std::stringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Status::InvalidArgument(what + ": '" + item +
                                     "' is not key=value (keys: backend, precision, fault, model)");
    }
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (value.empty()) return Status::InvalidArgument(what + ": " + key + ": empty value");
    if (key == "backend") {
      c.backend = value;
    } else if (key == "precision") {
      c.precision = value;
    } else if (key == "fault") {
      Result<Fault> f = ParseFault(value);
      if (!f.ok()) return f.status().WithContext(what + ": fault");
      c.fault = *f;
    } else if (key == "model") {
      c.model_dir = value;
    } else {
      return Status::InvalidArgument(what + ": unknown key '" + key +
                                     "' (keys: backend, precision, fault, model)");
    }
  }
  return c;
}

Result<std::unique_ptr<DiffSide>> DiffSide::Create(const DiffConfig& config,
                                                   const std::string& what) {
  std::unique_ptr<DiffSide> s(new DiffSide());
  s->config_ = config;
  Result<PrecisionProfile> profile = NamedPrecisionProfile(config.precision);
  if (!profile.ok()) return profile.status().WithContext(what + ": precision");
  s->profile_ = *profile;
  if (Status st = BackendAvailableHere(config.backend); !st.ok()) {
    return st.WithContext(what + ": backend");
  }
  const BackendInfo* info = FindBackend(config.backend);
  if (Status st = CheckBackendTrace(*info, true); !st.ok()) {
    return st.WithContext(what + ": backend");
  }
  if (Status st = CheckBackendFault(*info, config.fault); !st.ok()) {
    return st.WithContext(what + ": fault");
  }
  Result<LoadedModel> m = LoadModelFolder(config.model_dir);
  if (!m.ok()) return m.status().WithContext(what + ": model " + config.model_dir.string());
  s->tokenizer_ = std::move(m->tokenizer);
  s->digest_ = m->files.digest;
  auto weights = std::make_shared<const ModelWeights>(std::move(m->weights));
  Result<std::unique_ptr<Backend>> b = CreateBackend(config.backend, m->config, std::move(weights));
  if (!b.ok()) return b.status().WithContext(what);
  s->backend_ = *std::move(b);
  return s;
}

Result<DiffSide::Run> DiffSide::Go(const std::vector<int32_t>& prompt, int steps, int topk,
                                   const std::vector<int32_t>& forced) {
  Run run;
  GenerateRequest req;
  req.prompt = prompt;
  req.max_new_tokens = steps;
  req.index_topk = topk;
  req.precision = profile_;
  req.fault = config_.fault;
  ProbeRequest pr;
  pr.keep_topk_sets = true;
  req.probe = pr;
  req.trace = &run.trace;
  NW_ASSIGN_OR_RETURN(SequenceSpec spec, CheckRequest(model(), req));
  NW_ASSIGN_OR_RETURN(std::unique_ptr<BackendSequence> seq, backend_->NewSequence(spec));
  std::vector<float> logits;
  NW_RETURN_IF_ERROR(seq->Prefill(prompt, &logits));
  run.logits.push_back(logits);
  for (int i = 0; i < steps; ++i) {
    const int32_t tok = forced.empty() ? Argmax(logits.data(), static_cast<int64_t>(logits.size()))
                                       : forced[static_cast<size_t>(i)];
    run.fed.push_back(tok);
    NW_RETURN_IF_ERROR(seq->Decode(tok, &logits));
    run.logits.push_back(logits);
  }
  run.probes = seq->probes();
  return run;
}

}  // namespace nw::diff
