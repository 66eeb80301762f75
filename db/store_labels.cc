// The job labels and job states of the Store (db/store.h).
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "db/store.h"

namespace nw {

std::string BackendLabel(const JobSpec& spec) {
  if (spec.backend != "http" || !spec.http) return spec.backend;
  return std::string(spec.http->api == "chat" ? "http-chat" : "http") + ":" + spec.http->model +
         "@" + spec.http->url;
}

std::string ConfigLabel(const JobSpec& spec) {
  return "topk=" + std::to_string(spec.topk) + " precision=" + spec.precision.name +
         " backend=" + BackendLabel(spec) + " task=" + spec.task + " haystack=" + spec.haystack +
         (spec.fault != "none" && !spec.fault.empty() ? " fault=" + spec.fault : "") +
         (spec.backend == "http" && spec.http && !spec.http->sampling.empty()
              ? " sampling=" + spec.http->sampling.ToJson().dump()
              : "");
}

std::string_view JobStateName(JobState s) {
  switch (s) {
    case JobState::kQueued:
      return "queued";
    case JobState::kLeased:
      return "leased";
    case JobState::kDone:
      return "done";
    case JobState::kFailed:
      return "failed";
  }
  return "queued";
}

Result<JobState> ParseJobState(std::string_view name) {
  for (JobState s : {JobState::kQueued, JobState::kLeased, JobState::kDone, JobState::kFailed}) {
    if (JobStateName(s) == name) return s;
  }
  return Status::InvalidArgument("unknown job state '" + std::string(name) + "'");
}

}  // namespace nw
