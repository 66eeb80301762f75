// The coordinator daemon's record of one submitted campaign (a row of table
// coordinator_campaigns, migration 0004_coordinator_campaigns; docs/schema.md): its priority and
// run state. Written by CampaignTable (db/campaign_table.h), read by it and by the Store's
// read-only views (Store::CampaignControls, for the dashboard).
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace nw {

enum class CampaignRunState { kActive, kPaused, kCancelled };
std::string_view CampaignRunStateName(CampaignRunState s);  // active, paused, cancelled
/// Corruption naming the text for anything else.
Result<CampaignRunState> ParseCampaignRunState(std::string_view name);

struct CampaignControl {
  int64_t campaign_id = 0;  // campaigns.id in the Store
  std::string name;
  int priority = 0;
  CampaignRunState state = CampaignRunState::kActive;
  int64_t submitted_ms = 0;  // first submission (kept on update)
  int64_t updated_ms = 0;
};

}  // namespace nw
