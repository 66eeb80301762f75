// Host-side plumbing of the CUDA kernels: Status from cudaError_t (with file:line), RAII owners of
// device memory, streams, events and instantiated graphs, and the device query the tests use to
// skip without a GPU.
//
// Every launcher in kernels/cuda returns an nw::Status: InvalidArgument for a bad params struct
// (checked on the host before launching), Internal for a CUDA error (the message names the CUDA
// error, the call and its file:line). Launchers never synchronize; a kernel fault surfaces at the
// next synchronizing call, which the caller checks with NW_CUDA_RETURN_IF_ERROR.
// Thread-safety: the owners are move-only values; use one per thread or synchronize externally.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "common/status.h"

namespace nw::cuda {

/// OK for cudaSuccess, else Internal("<file>:<line>: <what>: <cudaErrorName>: <description>").
Status CudaStatus(cudaError_t err, const char* what, const char* file, int line);

/// The launch error of the last kernel launch (cudaGetLastError), as a Status.
Status LastLaunchStatus(const char* kernel, const char* file, int line);

/// True when at least one CUDA device is usable.
bool HasCudaDevice();

/// Number of multiprocessors of the current device (1 if the query fails).
int MultiprocessorCount();

/// Lets `kernel` launch with `bytes` of dynamic shared memory by raising its
/// cudaFuncAttributeMaxDynamicSharedMemorySize to the most the current device allows it (the
/// opt-in maximum less its static shared memory). The attribute is process-wide: setting it to
/// the launch's own size would let a thread launching the kernel with a larger size fail
/// (cudaErrorInvalidValue) when another thread has just set a smaller one; every caller sets the
/// same value here. InvalidArgument when `bytes` exceed what the device allows.
Status AllowDynamicSharedMemory(const void* kernel, size_t bytes, const char* name);

}  // namespace nw::cuda

/// Returns an Internal Status from the enclosing function when `expr` (a cudaError_t) fails.
#define NW_CUDA_RETURN_IF_ERROR(expr)                                         \
  do {                                                                        \
    const cudaError_t nw_cuda_err_ = (expr);                                  \
    if (nw_cuda_err_ != cudaSuccess) {                                        \
      return ::nw::cuda::CudaStatus(nw_cuda_err_, #expr, __FILE__, __LINE__); \
    }                                                                         \
  } while (0)

/// Returns the launch error of the kernel just launched, or OK.
#define NW_CUDA_LAUNCH_STATUS(kernel_name) \
  ::nw::cuda::LastLaunchStatus(kernel_name, __FILE__, __LINE__)

namespace nw::cuda {

/// Owns `count` elements of device memory. Move-only; frees on destruction.
///
/// Allocate: cudaMalloc / cudaFree (cudaFree waits for the whole device, so a process whose
/// threads drive one GPU through several streams stalls them all at every free).
/// AllocateOn(count, stream): stream-ordered, cudaMallocAsync / cudaFreeAsync on `stream` from
/// the device's default memory pool: no device-wide synchronisation, and the free is ordered
/// after every kernel queued on `stream` before it, so a buffer may be dropped (or replaced)
/// while kernels that read it are still queued. The stream must outlive the buffer, and the
/// buffer must be used only by work on that stream (or work the host has waited for).
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)),
        count_(std::exchange(o.count_, 0)),
        stream_(std::exchange(o.stream_, nullptr)),
        ordered_(std::exchange(o.ordered_, false)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      count_ = std::exchange(o.count_, 0);
      stream_ = std::exchange(o.stream_, nullptr);
      ordered_ = std::exchange(o.ordered_, false);
    }
    return *this;
  }
  ~DeviceBuffer() { Reset(); }

  /// Allocates `count` elements (uninitialised); count 0 gives an empty buffer.
  static Result<DeviceBuffer> Allocate(size_t count) {
    DeviceBuffer b;
    if (count == 0) return Result<DeviceBuffer>(std::move(b));
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, count * sizeof(T));
    if (err != cudaSuccess) {
      return CudaStatus(err,
                        ("cudaMalloc of " + std::to_string(count * sizeof(T)) + " bytes").c_str(),
                        __FILE__, __LINE__);
    }
    b.ptr_ = static_cast<T*>(p);
    b.count_ = count;
    return Result<DeviceBuffer>(std::move(b));  // spelled out: nvcc's front end does not move
  }

  /// Allocates `count` elements (uninitialised) in stream order on `stream` (see above).
  static Result<DeviceBuffer> AllocateOn(size_t count, cudaStream_t stream) {
    DeviceBuffer b;
    if (count == 0) return Result<DeviceBuffer>(std::move(b));
    void* p = nullptr;
    const cudaError_t err = cudaMallocAsync(&p, count * sizeof(T), stream);
    if (err != cudaSuccess) {
      return CudaStatus(
          err, ("cudaMallocAsync of " + std::to_string(count * sizeof(T)) + " bytes").c_str(),
          __FILE__, __LINE__);
    }
    b.ptr_ = static_cast<T*>(p);
    b.count_ = count;
    b.stream_ = stream;
    b.ordered_ = true;
    return Result<DeviceBuffer>(std::move(b));
  }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

  /// Copies `n` elements from host memory into elements [offset, offset + n) (synchronous; a
  /// stream-ordered buffer copies on its stream, after the work queued there).
  Status CopyFromHost(const T* src, size_t n, size_t offset = 0) {
    if (offset + n > count_) return Status::OutOfRange("DeviceBuffer::CopyFromHost past the end");
    if (ordered_) {
      NW_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(ptr_ + offset, src, n * sizeof(T), cudaMemcpyHostToDevice, stream_));
      NW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
      return Status::Ok();
    }
    NW_CUDA_RETURN_IF_ERROR(cudaMemcpy(ptr_ + offset, src, n * sizeof(T), cudaMemcpyHostToDevice));
    return Status::Ok();
  }
  /// Copies elements [offset, offset + n) to host memory (synchronous; a stream-ordered buffer
  /// copies on its stream, after the work queued there).
  Status CopyToHost(T* dst, size_t n, size_t offset = 0) const {
    if (offset + n > count_) return Status::OutOfRange("DeviceBuffer::CopyToHost past the end");
    if (ordered_) {
      NW_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(dst, ptr_ + offset, n * sizeof(T), cudaMemcpyDeviceToHost, stream_));
      NW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
      return Status::Ok();
    }
    NW_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, ptr_ + offset, n * sizeof(T), cudaMemcpyDeviceToHost));
    return Status::Ok();
  }

 private:
  void Reset() {
    if (ptr_ != nullptr) {
      if (ordered_) {
        cudaFreeAsync(ptr_, stream_);
      } else {
        cudaFree(ptr_);
      }
    }
    ptr_ = nullptr;
    count_ = 0;
    stream_ = nullptr;
    ordered_ = false;
  }
  T* ptr_ = nullptr;
  size_t count_ = 0;
  cudaStream_t stream_ = nullptr;  // AllocateOn's stream
  bool ordered_ = false;           // freed with cudaFreeAsync on stream_
};

/// Keeps memory that stream-ordered frees (DeviceBuffer::AllocateOn) return in the current
/// device's default pool instead of handing it back to the driver at every synchronisation, so
/// the next request's buffers come from the pool. A setting of the device (shared by every user
/// of its default pool in this process), idempotent.
Status RetainPoolMemory();

/// Returns the default pool's unused memory of the current device to the driver (before a
/// free-memory check, so pooled bytes do not count as taken). Waits for the device's queued work
/// first: a stream-ordered free returns its memory to the pool only once its stream has run it,
/// and memory still owed to a pending free cannot be released (the H200 refused a second
/// 1M-token sequence with 62 GB of the first one's freed scratch still pooled).
Status TrimPoolMemory();

/// Owns a non-blocking cudaStream_t.
class Stream {
 public:
  Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept {
    if (this != &o) {
      Reset();
      s_ = std::exchange(o.s_, nullptr);
    }
    return *this;
  }
  ~Stream() { Reset(); }

  static Result<Stream> Create();
  cudaStream_t get() const { return s_; }
  Status Synchronize() const;

 private:
  void Reset();
  cudaStream_t s_ = nullptr;
};

/// Owns a cudaEvent_t (timing enabled).
class Event {
 public:
  Event() = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event& operator=(Event&& o) noexcept {
    if (this != &o) {
      Reset();
      e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
  }
  ~Event() { Reset(); }

  static Result<Event> Create();
  cudaEvent_t get() const { return e_; }
  Status Record(cudaStream_t stream) const;
  /// Milliseconds from `start` to this event (both recorded and complete).
  Result<float> ElapsedSince(const Event& start) const;

 private:
  void Reset();
  cudaEvent_t e_ = nullptr;
};

/// Owns an instantiated CUDA graph. Move-only; destroys it on destruction.
class GraphExec {
 public:
  GraphExec() = default;
  explicit GraphExec(cudaGraphExec_t e) : e_(e) {}
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  GraphExec(GraphExec&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  GraphExec& operator=(GraphExec&& o) noexcept {
    if (this != &o) {
      Reset();
      e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
  }
  ~GraphExec() { Reset(); }
  cudaGraphExec_t get() const { return e_; }

 private:
  void Reset();
  cudaGraphExec_t e_ = nullptr;
};

}  // namespace nw::cuda
