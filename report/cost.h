// The per-token cost model behind `nw plan`'s estimate and `nw run`'s progress ETA: a job costs
// its prompt tokens (context_length) times its backend's mean milliseconds per prompt token over
// the finished jobs in the database (Store::TimingHistory). A backend without history is
// weighted by the mean of the backends that have one (or 1 ms per token when none has), so a
// 64K-token job still weighs 256 times a 256-token one.
//
// The ETA: once jobs of this run have finished, elapsed × (cost left / cost finished in this
// run), which calibrates the model to this machine and worker count; before that, when every
// backend left has history, the cost left spread over the workers; else unknown.
// Thread-safety: a value; one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "db/store.h"

namespace nw::report {

class JobCostModel {
 public:
  explicit JobCostModel(const std::vector<BackendTiming>& history);

  /// Milliseconds per prompt token of a backend, and whether it comes from history.
  double MsPerToken(const std::string& backend) const;
  bool HasHistory(const std::string& backend) const { return history_.count(backend) > 0; }
  /// The job's estimated cost in milliseconds of one worker.
  double Cost(const JobSpec& job) const;

  /// Jobs still to run (a key given twice counts once; a finished key is ignored).
  void AddPending(const std::string& key, const JobSpec& job);
  /// A pending job finished (a result, or given up); unknown keys are ignored.
  void Finished(const std::string& key);

  double left_ms() const { return left_ms_; }
  double finished_ms() const { return finished_ms_; }
  int64_t left_jobs() const { return static_cast<int64_t>(pending_.size()); }
  /// Every pending job's backend has timing history.
  bool left_all_known() const { return unknown_left_ == 0; }

  /// Seconds left, given the seconds this run has taken and its workers (see the top of the
  /// file); nullopt when there is nothing to go on.
  std::optional<double> EtaSeconds(double elapsed_s, int64_t workers) const;

 private:
  std::map<std::string, double> history_;  // backend -> ms per prompt token
  double fallback_ms_per_token_ = 1.0;
  std::map<std::string, std::pair<double, bool>> pending_;  // key -> (cost, backend known)
  std::set<std::string> finished_;
  double left_ms_ = 0, finished_ms_ = 0;
  int64_t unknown_left_ = 0;
};

}  // namespace nw::report
