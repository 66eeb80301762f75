#include "task/job_prompt.h"

namespace nw {

Result<NiahSpec> NiahSpecForJob(const JobSpec& spec) {
  NiahSpec ns;
  NW_ASSIGN_OR_RETURN(ns.task, ParseNiahTask(spec.task));
  NW_ASSIGN_OR_RETURN(ns.haystack, ParseNiahHaystack(spec.haystack));
  ns.context_length = spec.context_length;
  ns.needle_position = spec.needle_position;
  ns.seed = spec.HaystackSeed();
  return ns;
}

Result<NiahPrompt> BuildJobPrompt(const Tokenizer& tokenizer, const JobSpec& spec) {
  NW_ASSIGN_OR_RETURN(NiahSpec ns, NiahSpecForJob(spec));
  return BuildNiahPrompt(tokenizer, ns);
}

}  // namespace nw
