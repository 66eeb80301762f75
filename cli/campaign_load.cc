#include "cli/campaign_load.h"

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

}  // namespace nw::cli
