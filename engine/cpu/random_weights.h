// Seeded random ModelWeights for a ModelConfig, built in memory (no files): for tests, benchmarks
// and tools that need a model of a given shape. Values are well scaled for a stable forward pass:
// linear weights uniform with variance 1/in, norm weights near 1, small biases, and per-row
// distinct expert ids for hash routing. The generator is a fixed SplitMix64 stream, so the same
// (config, seed) gives the same weights on every platform.
// Thread-safety: pure function.
#pragma once

#include <cstdint>

#include "engine/checkpoint/config.h"
#include "engine/checkpoint/weights.h"

namespace nw::cpu {

ModelWeights RandomModelWeights(const ModelConfig& cfg, uint64_t seed);

}  // namespace nw::cpu
