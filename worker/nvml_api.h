// The few NVML entry points and types the GPU busy sampler uses (worker/nvml_source.cc), declared
// here because neither this machine nor CI has nvml.h: they match NVML API version 12 (nvml.h of
// CUDA 12.x, NVML_API_VERSION 12; the same signatures since API version 10). The library is
// opened at run time with dlopen("libnvidia-ml.so.1") and these are looked up by name, so a
// build and a machine without the NVIDIA driver need nothing of NVML.
// Thread-safety: declarations only.
#pragma once

namespace nw::nvml {

using Return = int;                                  // nvmlReturn_t
inline constexpr Return kSuccess = 0;                // NVML_SUCCESS
inline constexpr Return kErrorNotFound = 6;          // NVML_ERROR_NOT_FOUND: no samples (yet)
inline constexpr Return kErrorInsufficientSize = 7;  // NVML_ERROR_INSUFFICIENT_SIZE

struct DeviceSt;
using Device = DeviceSt*;  // nvmlDevice_t

using SamplingType = int;                                  // nvmlSamplingType_t
inline constexpr SamplingType kGpuUtilizationSamples = 1;  // NVML_GPU_UTILIZATION_SAMPLES

using ValueType = int;                                  // nvmlValueType_t
inline constexpr ValueType kValueDouble = 0;            // NVML_VALUE_TYPE_DOUBLE
inline constexpr ValueType kValueUnsignedInt = 1;       // NVML_VALUE_TYPE_UNSIGNED_INT
inline constexpr ValueType kValueUnsignedLong = 2;      // NVML_VALUE_TYPE_UNSIGNED_LONG
inline constexpr ValueType kValueUnsignedLongLong = 3;  // NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
inline constexpr ValueType kValueSignedLongLong = 4;    // NVML_VALUE_TYPE_SIGNED_LONG_LONG
inline constexpr ValueType kValueSignedInt = 5;         // NVML_VALUE_TYPE_SIGNED_INT

union Value {  // nvmlValue_t
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;        // NOLINT(runtime/int): NVML's type
  unsigned long long ullVal;  // NOLINT(runtime/int)
  signed long long sllVal;    // NOLINT(runtime/int)
};

struct Sample {                  // nvmlSample_t
  unsigned long long timeStamp;  // NOLINT(runtime/int): CPU timestamp in microseconds
  Value sampleValue;             // GPU utilization samples: percent of the sample period busy
};

extern "C" {
using InitFn = Return (*)();                                     // nvmlInit_v2
using ShutdownFn = Return (*)();                                 // nvmlShutdown
using ErrorStringFn = const char* (*)(Return);                   // nvmlErrorString
using GetHandleByPciBusIdFn = Return (*)(const char*, Device*);  // nvmlDeviceGetHandleByPciBusId_v2
using GetSamplesFn = Return (*)(Device, SamplingType,
                                unsigned long long,  // NOLINT(runtime/int): lastSeenTimeStamp
                                ValueType*, unsigned int*, Sample*);  // nvmlDeviceGetSamples
}

}  // namespace nw::nvml
