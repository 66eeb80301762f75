// Shared by the campaign subcommands: parse + resolve + expand a campaign file, printing errors
// the same way everywhere.
#pragma once

#include <string>
#include <vector>

#include "coordinator/campaign/campaign.h"
#include "engine/backend_catalog.h"

namespace nw::cli {

struct LoadedCampaign {
  ResolvedCampaign resolved;
  std::vector<JobSpec> jobs;
  std::vector<std::string> keys;  // jobs[i].Key()
};

struct LoadOptions {
  std::optional<int64_t> max_jobs;
};

Result<LoadedCampaign> LoadCampaign(const std::string& path, const LoadOptions& options);

/// Engine backends the campaign's jobs name that this build and machine cannot run (a cuda* one
/// without a CUDA build or a GPU), in catalog order; the http backend is not an engine backend.
std::vector<std::string> UnavailableBackends(const LoadedCampaign& loaded);

/// True when any job of the campaign runs on a backend of `device` (e.g. the GPU).
bool CampaignUsesDevice(const LoadedCampaign& loaded, DeviceKind device);

/// Why `backend` cannot run here, in a few words ("this nw was built without CUDA").
std::string UnavailableReason(const std::string& backend);

/// The plain note `nw validate` and `nw plan` print for such a backend: the jobs are valid, and
/// need a GPU worker elsewhere.
std::string UnavailableBackendNote(const std::string& backend);

}  // namespace nw::cli
