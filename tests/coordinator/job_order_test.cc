// InterleaveByLength (coordinator/job_order.h): the load order round-robins prompt lengths, keeps
// each length's own order, and is a permutation of every job.
#include "coordinator/job_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

namespace nw {
namespace {

JobRecord Job(const std::string& key, int64_t length) {
  JobRecord j;
  j.key = key;
  j.spec.context_length = length;
  return j;
}

std::vector<std::string> Keys(const std::vector<JobRecord>& jobs) {
  std::vector<std::string> out;
  for (size_t i : InterleaveByLength(jobs)) out.push_back(jobs[i].key);
  return out;
}

TEST(InterleaveByLength, RoundRobinsLengthsInFirstAppearanceOrder) {
  // A campaign's expansion: every 1K job, then every 8K job, then every 32K job.
  const std::vector<JobRecord> jobs = {Job("a1", 1024),  Job("a2", 1024),  Job("a3", 1024),
                                       Job("b1", 8192),  Job("b2", 8192),  Job("c1", 32768),
                                       Job("c2", 32768), Job("c3", 32768), Job("c4", 32768)};
  EXPECT_EQ(Keys(jobs),
            (std::vector<std::string>{"a1", "b1", "c1", "a2", "b2", "c2", "a3", "c3", "c4"}));
}

TEST(InterleaveByLength, KeepsEachLengthsOrderWhenLengthsAreMixed) {
  const std::vector<JobRecord> jobs = {Job("x1", 500), Job("y1", 100), Job("x2", 500),
                                       Job("x3", 500), Job("y2", 100)};
  EXPECT_EQ(Keys(jobs), (std::vector<std::string>{"x1", "y1", "x2", "y2", "x3"}));
}

TEST(InterleaveByLength, IsAPermutation) {
  std::vector<JobRecord> jobs;
  for (int i = 0; i < 97; ++i) jobs.push_back(Job(std::to_string(i), 1000 * (i * 7 % 5)));
  std::vector<size_t> order = InterleaveByLength(jobs);
  std::sort(order.begin(), order.end());
  std::vector<size_t> all(jobs.size());
  std::iota(all.begin(), all.end(), size_t{0});
  EXPECT_EQ(order, all);
  EXPECT_TRUE(InterleaveByLength({}).empty());
  EXPECT_EQ(Keys({Job("only", 64)}), std::vector<std::string>{"only"});
}

}  // namespace
}  // namespace nw
