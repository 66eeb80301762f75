// nw gpu-busy [--gpu N | --pci-bus-id ID] [--seconds S]: measures a GPU's busy fraction with
// NVML for S seconds, the way a GPU worker does (worker/gpu_busy_sampler.h), and prints it. The
// check that NVML works on a machine before a campaign relies on it. Exit 0: measured; 1: NVML
// answered but had no sample in the window; 2: NVML unavailable (the reason is printed).
#include <chrono>
#include <iostream>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "engine/engine.h"
#include "report/stats.h"
#include "worker/gpu_busy_sampler.h"
#include "worker/gpu_utilization.h"

namespace nw::cli {
namespace {

struct GpuBusyArgs {
  int gpu = 0;
  std::string pci_bus_id;
  double seconds = 2;
  std::string library = kNvmlLibrary;
};

std::string Seconds(double s) { return report::FormatNumber(s, 1) + " s"; }

int MeasureGpuBusy(const GpuBusyArgs& a) {
  std::string bus_id = a.pci_bus_id;
  if (bus_id.empty()) {
    auto from_cuda = CudaDevicePciBusId(a.gpu);
    if (!from_cuda.ok()) {
      std::cerr << "nw gpu-busy: --gpu " << a.gpu << ": " << from_cuda.status().message()
                << " (name the GPU with --pci-bus-id instead)\n";
      return 2;
    }
    bus_id = *from_cuda;
  }
  auto source = OpenNvmlUtilization(bus_id, a.library);
  if (!source.ok()) {
    std::cerr << "nw gpu-busy: " << source.status().message() << "\n";
    return 2;
  }
  GpuBusySampler sampler(**source, std::chrono::milliseconds(250));
  const uint64_t from = sampler.Mark();
  sampler.Start();
  std::this_thread::sleep_for(std::chrono::duration<double>(a.seconds));
  const uint64_t to = sampler.Mark();
  sampler.Stop();
  if (auto error = sampler.TakeFirstError()) std::cerr << "nw gpu-busy: " << *error << "\n";
  const std::optional<double> busy = sampler.BusyBetween(from, to);
  const int64_t samples = sampler.SamplesBetween(from, to);
  std::cout << sampler.Name() << ": ";
  if (!busy) {
    std::cout << "no utilization sample in " << Seconds(a.seconds) << " (unknown)\n";
    return 1;
  }
  std::cout << "busy " << report::FormatBusy(*busy) << " over " << Seconds(a.seconds) << " ("
            << samples << (samples == 1 ? " sample" : " samples") << ")\n";
  return 0;
}

}  // namespace

void RegisterGpuBusy(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand(
      "gpu-busy", "Measure a GPU's busy fraction with NVML for a few seconds, as GPU workers do");
  auto a = std::make_shared<GpuBusyArgs>();
  cmd->add_option("--gpu", a->gpu, "CUDA device index (needs a CUDA build)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--pci-bus-id", a->pci_bus_id,
                  "The GPU's PCI bus id as NVML knows it (e.g. 0000:19:00.0), instead of --gpu");
  cmd->add_option("--seconds", a->seconds, "How long to sample")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_option("--nvml-library", a->library, "The NVML library to load")->capture_default_str();
  cmd->callback([a, &g] { g.exit_code = MeasureGpuBusy(*a); });
}

}  // namespace nw::cli
