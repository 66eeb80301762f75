#include "kernels/cuda/common.h"

#include <string>

namespace nw::cuda {

Status CudaStatus(cudaError_t err, const char* what, const char* file, int line) {
  if (err == cudaSuccess) return Status::Ok();
  std::string m = std::string(file) + ":" + std::to_string(line) + ": " + what + ": " +
                  cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
  return Status::Internal(std::move(m));
}

Status LastLaunchStatus(const char* kernel, const char* file, int line) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::Ok();
  return CudaStatus(err, (std::string("launch of ") + kernel).c_str(), file, line);
}

bool HasCudaDevice() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the error so that later calls start clean
    return false;
  }
  return n > 0;
}

int MultiprocessorCount() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    cudaGetLastError();
    return 1;
  }
  return sms > 0 ? sms : 1;
}

Status AllowDynamicSharedMemory(const void* kernel, size_t bytes, const char* name) {
  int dev = 0, optin = 0;
  NW_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
  NW_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  cudaFuncAttributes attr{};
  NW_CUDA_RETURN_IF_ERROR(cudaFuncGetAttributes(&attr, kernel));
  const int64_t limit = int64_t{optin} - static_cast<int64_t>(attr.sharedSizeBytes);
  if (static_cast<int64_t>(bytes) > limit) {
    return Status::InvalidArgument(std::string(name) + ": " + std::to_string(bytes) +
                                   " bytes of shared memory, the device allows " +
                                   std::to_string(limit));
  }
  NW_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(limit)));
  return Status::Ok();
}

Status RetainPoolMemory() {
  int dev = 0;
  NW_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
  cudaMemPool_t pool = nullptr;
  NW_CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&pool, dev));
  uint64_t keep = UINT64_MAX;
  NW_CUDA_RETURN_IF_ERROR(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  return Status::Ok();
}

Status TrimPoolMemory() {
  int dev = 0;
  NW_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
  cudaMemPool_t pool = nullptr;
  NW_CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&pool, dev));
  NW_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  NW_CUDA_RETURN_IF_ERROR(cudaMemPoolTrimTo(pool, 0));
  return Status::Ok();
}

Result<Stream> Stream::Create() {
  Stream s;
  NW_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s.s_, cudaStreamNonBlocking));
  return s;
}

Status Stream::Synchronize() const {
  NW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s_));
  return Status::Ok();
}

void Stream::Reset() {
  if (s_ != nullptr) cudaStreamDestroy(s_);
  s_ = nullptr;
}

Result<Event> Event::Create() {
  Event e;
  NW_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e.e_));
  return e;
}

Status Event::Record(cudaStream_t stream) const {
  NW_CUDA_RETURN_IF_ERROR(cudaEventRecord(e_, stream));
  return Status::Ok();
}

Result<float> Event::ElapsedSince(const Event& start) const {
  float ms = 0.0f;
  NW_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start.e_, e_));
  return ms;
}

void Event::Reset() {
  if (e_ != nullptr) cudaEventDestroy(e_);
  e_ = nullptr;
}

void GraphExec::Reset() {
  if (e_ != nullptr) cudaGraphExecDestroy(e_);
  e_ = nullptr;
}

}  // namespace nw::cuda
