#include "report/cost.h"

#include <algorithm>

namespace nw::report {

JobCostModel::JobCostModel(const std::vector<BackendTiming>& history) {
  double sum = 0;
  int64_t n = 0;
  for (const BackendTiming& t : history) {
    if (!(t.ms_per_token > 0) || t.jobs <= 0) continue;
    history_[t.backend] = t.ms_per_token;
    sum += t.ms_per_token;
    ++n;
  }
  if (n > 0) fallback_ms_per_token_ = sum / static_cast<double>(n);
}

double JobCostModel::MsPerToken(const std::string& backend) const {
  auto it = history_.find(backend);
  return it == history_.end() ? fallback_ms_per_token_ : it->second;
}

double JobCostModel::Cost(const JobSpec& job) const {
  return MsPerToken(job.backend) * static_cast<double>(std::max<int64_t>(job.context_length, 1));
}

void JobCostModel::AddPending(const std::string& key, const JobSpec& job) {
  if (pending_.count(key) || finished_.count(key)) return;
  const bool known = HasHistory(job.backend);
  const double cost = Cost(job);
  pending_[key] = {cost, known};
  left_ms_ += cost;
  if (!known) ++unknown_left_;
}

void JobCostModel::Finished(const std::string& key) {
  auto it = pending_.find(key);
  if (it == pending_.end()) return;
  left_ms_ = std::max(0.0, left_ms_ - it->second.first);
  finished_ms_ += it->second.first;
  if (!it->second.second) --unknown_left_;
  pending_.erase(it);
  finished_.insert(key);
}

std::optional<double> JobCostModel::EtaSeconds(double elapsed_s, int64_t workers) const {
  if (pending_.empty()) return 0.0;
  if (finished_ms_ > 0 && elapsed_s > 0) return elapsed_s * left_ms_ / finished_ms_;
  if (left_all_known()) {
    return left_ms_ / 1000.0 / static_cast<double>(std::max<int64_t>(workers, 1));
  }
  return std::nullopt;
}

}  // namespace nw::report
