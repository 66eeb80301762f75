#include "engine/cuda/forward_graphs.h"

#include <vector>

#include "kernels/cuda/common.h"

namespace nw::cuda {
namespace {

// Keys remembered as seen once (a forward shape that has not repeated yet); past this many the
// memory starts over, so a long stream of one-off shapes (decode steps of ever new positions)
// does not grow it without bound.
constexpr size_t kMaxSeen = 4096;

// Owns a captured (not yet instantiated) graph.
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() {
    if (g_ != nullptr) cudaGraphDestroy(g_);
  }
  cudaGraph_t* out() { return &g_; }
  cudaGraph_t get() const { return g_; }

 private:
  cudaGraph_t g_ = nullptr;
};

// Whether the graph allocates memory (a stream-ordered allocation captured as a node). Such a
// graph is not kept: graph allocations come from the driver's graph memory, which it may share
// between graphs by ordering their launches after one another; the sequence gives its kernels
// workspaces instead (LinearParams::split_workspace), so a kept graph names only its buffers.
bool AllocatesMemory(cudaGraph_t g) {
  size_t count = 0;
  if (cudaGraphGetNodes(g, nullptr, &count) != cudaSuccess) return true;
  std::vector<cudaGraphNode_t> nodes(count);
  if (count > 0 && cudaGraphGetNodes(g, nodes.data(), &count) != cudaSuccess) return true;
  for (cudaGraphNode_t n : nodes) {
    cudaGraphNodeType type{};
    if (cudaGraphNodeGetType(n, &type) != cudaSuccess || type == cudaGraphNodeTypeMemAlloc) {
      return true;
    }
  }
  return false;
}

}  // namespace

Status ForwardGraphs::Direct(const std::function<Status()>& enqueue) {
  ++stats_.direct;
  return enqueue();
}

void ForwardGraphs::Clear() {
  graphs_.clear();
  lru_.clear();
  seen_.clear();
  failed_.clear();
}

Status ForwardGraphs::Run(const Key& key, const uint64_t& epoch, cudaStream_t stream,
                          const std::function<Status()>& enqueue, bool* capturing) {
  if (capacity_ == 0) return Direct(enqueue);
  if (auto it = graphs_.find(key); it != graphs_.end()) {
    if (it->second.epoch == epoch) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      ++stats_.replays;
      NW_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(it->second.exec.get(), stream));
      return Status::Ok();
    }
    lru_.erase(it->second.lru);  // its buffers have been reallocated since
    graphs_.erase(it);
  }
  if (auto f = failed_.find(key); f != failed_.end() && f->second == epoch) return Direct(enqueue);
  // A shape seen for the first time (in this epoch) runs directly: most one-off shapes never
  // repeat, and capturing costs more than launching.
  auto seen = seen_.find(key);
  if (seen == seen_.end() || seen->second != epoch + 1) {
    NW_RETURN_IF_ERROR(Direct(enqueue));
    if (seen_.size() >= kMaxSeen) seen_.clear();
    seen_[key] = epoch + 1;  // as it stands after the run
    return Status::Ok();
  }

  NW_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  *capturing = true;
  const Status st = enqueue();
  *capturing = false;
  Graph graph;
  const cudaError_t end = cudaStreamEndCapture(stream, graph.out());
  GraphExec exec;
  bool ok =
      st.ok() && end == cudaSuccess && graph.get() != nullptr && !AllocatesMemory(graph.get());
  if (ok) {
    cudaGraphExec_t e = nullptr;
    ok = cudaGraphInstantiate(&e, graph.get(), 0) == cudaSuccess;
    exec = GraphExec(e);
  }
  if (!ok) {
    // Nothing captured ran: clear the capture's error and launch the forward directly (which also
    // reports the enqueue's own error, if it has one).
    (void)cudaGetLastError();
    ++stats_.failed;
    failed_[key] = epoch;
    const Status direct = Direct(enqueue);
    if (direct.ok() && failed_[key] != epoch) failed_.erase(key);  // it grew a buffer: try again
    return direct;
  }
  ++stats_.captures;
  seen_.erase(key);
  if (graphs_.size() >= capacity_ && !lru_.empty()) {
    graphs_.erase(lru_.back());
    lru_.pop_back();
  }
  lru_.push_front(key);
  Entry& entry = graphs_[key];
  entry.exec = std::move(exec);
  entry.epoch = epoch;
  entry.lru = lru_.begin();
  NW_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(entry.exec.get(), stream));
  return Status::Ok();
}

}  // namespace nw::cuda
