// Shared by the campaign subcommands: parse + resolve + expand a campaign file, printing errors
// the same way everywhere.
#pragma once

#include <string>
#include <vector>

#include "coordinator/campaign/campaign.h"

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

}  // namespace nw::cli
