// ForwardGraphs: replays a sequence's forward passes as CUDA graphs (engine/cuda/cuda_sequence.h).
//
// A forward of the tiny and mid-sized models is a few hundred small kernels; launched one by one
// from several slots' threads, the launches themselves (a driver call of a few microseconds each,
// serialised across the process's threads) and the GPU's per-launch work become what a short job
// costs. A forward's launches are a function of the sequence's buffers, its spec and the chunk's
// (tokens, first position, logit rows): the same sequence state reused for the next job of the
// same shape (CudaBackend keeps it, engine/cuda/cuda_backend.cc) launches exactly the same kernels
// with the same arguments. So the second time a key is seen its forward is captured (stream
// capture, thread-local mode) into a graph that later forwards of that key replay with one launch;
// inputs (token ids, positions) live in device buffers the host fills before each replay.
//
// A graph is valid while none of the buffers it names has been reallocated: the owner bumps an
// epoch whenever it reallocates one, and a graph captured under an older epoch is dropped. A
// capture that fails (an operation that cannot be captured, or the owner refusing to grow a buffer
// while capturing) falls back to launching directly, and the key is not captured again in that
// epoch. Replays launch the same kernels with the same arguments as the direct path: results are
// bitwise identical (tests/cuda_engine/cuda_engine_test.cc checks it). CudaBackend turns graphs
// on only when asked (NW_CUDA_GRAPHS=1): on the H200 they paid for one slot and cost with several
// (docs/cuda.md).
// Thread-safety: one thread at a time (the sequence's).
#pragma once

#include <cuda_runtime_api.h>

#include <compare>
#include <cstdint>
#include <functional>
#include <list>
#include <map>

#include "common/status.h"
#include "kernels/cuda/common.h"

namespace nw::cuda {

class ForwardGraphs {
 public:
  struct Key {
    int64_t tokens = 0;      // the chunk's tokens
    int64_t position = 0;    // its first token's position
    int64_t logit_rows = 0;  // head rows computed (0, 1 or the chunk's)
    auto operator<=>(const Key&) const = default;
  };
  struct Stats {
    int64_t replays = 0;   // forwards run by replaying a graph
    int64_t captures = 0;  // graphs captured and instantiated
    int64_t direct = 0;    // forwards launched kernel by kernel
    int64_t failed = 0;    // captures that fell back to direct launches
  };

  /// `capacity`: graphs kept (least recently used dropped first). 0 disables graphs: every
  /// forward launches directly.
  explicit ForwardGraphs(size_t capacity) : capacity_(capacity) {}

  /// Runs `enqueue` (a forward's launches on `stream`, no host synchronisation) for `key`: replays
  /// a graph captured under the current `epoch`, captures one when the key ran directly before
  /// in this epoch, else calls `enqueue` directly. `epoch` is the owner's counter, read after a
  /// direct run too (that run may reallocate). `*capturing` is true while `enqueue` runs under
  /// capture (the owner must refuse to reallocate buffers then, returning an error). The
  /// enqueue's own errors are returned (after a failed capture, from the direct run).
  Status Run(const Key& key, const uint64_t& epoch, cudaStream_t stream,
             const std::function<Status()>& enqueue, bool* capturing);

  /// Drops every graph (their buffers are about to change).
  void Clear();
  const Stats& stats() const { return stats_; }

 private:
  struct Entry {
    GraphExec exec;
    uint64_t epoch = 0;
    std::list<Key>::iterator lru;
  };
  Status Direct(const std::function<Status()>& enqueue);

  size_t capacity_;
  std::map<Key, Entry> graphs_;
  std::list<Key> lru_;              // most recently used first
  std::map<Key, uint64_t> seen_;    // key -> epoch + 1 after its last direct run
  std::map<Key, uint64_t> failed_;  // key -> epoch of a failed capture
  Stats stats_;
};

}  // namespace nw::cuda
