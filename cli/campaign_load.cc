#include "cli/campaign_load.h"

#include <set>

#include "engine/backend_catalog.h"
#include "engine/engine.h"

namespace nw::cli {

Result<LoadedCampaign> LoadCampaign(const std::string& path, const LoadOptions& options) {
  NW_ASSIGN_OR_RETURN(Campaign campaign, ParseCampaignFile(path));
  ResolveOptions ro;
  ro.max_jobs = options.max_jobs;
  LoadedCampaign out;
  NW_ASSIGN_OR_RETURN(out.resolved, ResolveCampaign(campaign, ro));
  NW_ASSIGN_OR_RETURN(out.jobs, ExpandCampaign(out.resolved));
  out.keys.reserve(out.jobs.size());
  for (const JobSpec& j : out.jobs) out.keys.push_back(j.Key());
  return out;
}

std::vector<std::string> UnavailableBackends(const LoadedCampaign& loaded) {
  std::set<std::string> used;
  for (const JobSpec& j : loaded.jobs) used.insert(j.backend);
  std::vector<std::string> out;
  for (const BackendInfo& b : BackendCatalog()) {
    const std::string name(b.name);
    if (used.count(name) && !BackendAvailableHere(name).ok()) out.push_back(name);
  }
  return out;
}

bool CampaignUsesDevice(const LoadedCampaign& loaded, DeviceKind device) {
  for (const JobSpec& j : loaded.jobs) {
    const BackendInfo* info = FindBackend(j.backend);
    if (info != nullptr && info->device == device) return true;
  }
  return false;
}

std::string UnavailableReason(const std::string& backend) {
  const BackendInfo* info = FindBackend(backend);
  if (info == nullptr) return "not an engine backend";
  if (info->device == DeviceKind::kCuda) {
#ifdef NW_HAVE_CUDA_BACKEND
    return "no usable GPU on this machine";
#else
    return "this nw was built without the CUDA backend (-DNW_CUDA=OFF)";
#endif
  }
  return std::string(BackendAvailableHere(backend).message());
}

std::string UnavailableBackendNote(const std::string& backend) {
  return "note: backend " + backend + " is not available here (" + UnavailableReason(backend) +
         "); these jobs need a GPU worker (nw worker --gpu N) on a machine with one";
}

}  // namespace nw::cli
