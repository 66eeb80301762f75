// A fully filled JobSpec shared by the protocol tests.
#pragma once

#include "protocol/job.h"

namespace nw::testing_protocol {

inline JobSpec SampleSpec() {
  JobSpec s;
  s.model_dir = "/models/tiny";
  s.model_digest = "abc";
  s.engine_version = "nw-engine-test";
  s.task = "niah-single";
  s.haystack = "noise";
  s.context_length = 4096;
  s.needle_position = 0.25;
  s.topk = 16;
  s.backend = "cpu";
  s.seed = 42;
  s.trial = 3;
  s.max_new_tokens = 12;
  s.probe = true;
  return s;
}

}  // namespace nw::testing_protocol
