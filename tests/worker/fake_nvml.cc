// A stand-in for libnvidia-ml.so.1 (tests/worker/gpu_busy_test.cc loads it with dlopen through
// OpenNvmlUtilization): the entry points worker/nvml_api.h declares, with NVML's C signatures.
// It knows one GPU, PCI bus id 0000:19:00.0, whose utilization samples are four unsigned-int
// percentages at timestamps 1000..4000 us (10, 50, 100, 0); fake_nvml_shutdowns() counts
// nvmlShutdown calls so the test can check that the source's destructor shuts NVML down.
#include <cstring>

namespace {
struct DeviceSt {};
DeviceSt the_gpu;
int shutdowns = 0;
int inits = 0;
constexpr unsigned long long kTimes[] = {1000, 2000, 3000, 4000};  // NOLINT(runtime/int)
constexpr unsigned int kPercents[] = {10, 50, 100, 0};
}  // namespace

extern "C" {

union FakeValue {
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;        // NOLINT(runtime/int)
  unsigned long long ullVal;  // NOLINT(runtime/int)
  signed long long sllVal;    // NOLINT(runtime/int)
};
struct FakeSample {
  unsigned long long timeStamp;  // NOLINT(runtime/int)
  FakeValue sampleValue;
};

__attribute__((visibility("default"))) int nvmlInit_v2() {
  ++inits;
  return 0;
}
__attribute__((visibility("default"))) int nvmlShutdown() {
  ++shutdowns;
  return 0;
}
__attribute__((visibility("default"))) const char* nvmlErrorString(int rc) {
  return rc == 6 ? "Not Found" : "Unknown Error";
}
__attribute__((visibility("default"))) int nvmlDeviceGetHandleByPciBusId_v2(const char* id,
                                                                            DeviceSt** device) {
  if (std::strcmp(id, "0000:19:00.0") != 0) return 6;  // NVML_ERROR_NOT_FOUND
  *device = &the_gpu;
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetSamples(
    DeviceSt* device, int type, unsigned long long last_seen,  // NOLINT(runtime/int)
    int* value_type, unsigned int* count, FakeSample* samples) {
  if (device != &the_gpu || type != 1) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  unsigned int n = 0;
  for (unsigned long long t : kTimes) n += t > last_seen ? 1 : 0;  // NOLINT(runtime/int)
  if (n == 0) return 6;                                            // NVML_ERROR_NOT_FOUND
  *value_type = 1;                                                 // unsigned int
  if (samples == nullptr) {
    *count = n;
    return 0;
  }
  if (*count < n) return 7;  // NVML_ERROR_INSUFFICIENT_SIZE
  unsigned int i = 0;
  for (unsigned int k = 0; k < 4; ++k) {
    if (kTimes[k] <= last_seen) continue;
    samples[i].timeStamp = kTimes[k];
    samples[i].sampleValue.uiVal = kPercents[k];
    ++i;
  }
  *count = n;
  return 0;
}
__attribute__((visibility("default"))) int fake_nvml_shutdowns() { return shutdowns; }
__attribute__((visibility("default"))) int fake_nvml_inits() { return inits; }

}  // extern "C"
