#include "coordinator/job_order.h"

#include <cstdint>
#include <map>

namespace nw {

std::vector<size_t> InterleaveByLength(const std::vector<JobRecord>& jobs) {
  // Per length (in order of first appearance), its jobs' indices in order.
  std::map<int64_t, size_t> group_of;
  std::vector<std::vector<size_t>> groups;
  for (size_t i = 0; i < jobs.size(); ++i) {
    auto [it, added] = group_of.try_emplace(jobs[i].spec.context_length, groups.size());
    if (added) groups.emplace_back();
    groups[it->second].push_back(i);
  }
  std::vector<size_t> order;
  order.reserve(jobs.size());
  for (size_t round = 0; order.size() < jobs.size(); ++round) {
    for (const std::vector<size_t>& g : groups) {
      if (round < g.size()) order.push_back(g[round]);
    }
  }
  return order;
}

}  // namespace nw
