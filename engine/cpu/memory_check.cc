#include "engine/cpu/memory_check.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <string>

namespace nw::cpu {

double CpuSequenceBytes(const ModelConfig& cfg, int64_t max_tokens, int64_t prefill_chunk,
                        int index_topk, const ProbeRequest* probe) {
  constexpr double f = 4.0;  // bytes per stored value (fp32)
  const double T = static_cast<double>(std::max<int64_t>(max_tokens, 0));
  double need = 2.0 * T * cfg.rope_head_dim * f;  // plain and compressed RoPE tables
  const int topk = index_topk > 0 ? index_topk : std::max(cfg.index_topk, 1);
  for (int l = 0; l < cfg.n_layers; ++l) {
    const int r = cfg.ratio(l);
    need += static_cast<double>(cfg.window_size) * cfg.head_dim * f;
    if (r > 0) need += (T / r + 1) * cfg.head_dim * f;
    if (r == 4) {
      need += (T / 4 + 1) * cfg.index_head_dim * f;
      if (probe != nullptr && probe->keep_topk_sets) need += T * topk * f;
    }
  }
  const double chunk = prefill_chunk > 0 ? std::min<double>(T, prefill_chunk) : T;
  const double per_row = 2.0 * cfg.hc_mult * cfg.dim + 8.0 * cfg.dim + cfg.q_lora_rank +
                         3.0 * cfg.n_heads * cfg.head_dim + cfg.o_groups * cfg.o_lora_rank +
                         8.0 * cfg.head_dim + (4.0 + cfg.index_n_heads) * cfg.index_head_dim +
                         cfg.n_activated_experts * (2.0 * cfg.moe_inter_dim + cfg.dim) +
                         2.0 * cfg.moe_inter_dim + cfg.window_size + topk;
  need += chunk * per_row * f;
  need += 3.0 * (T / 4 + 1) * f;  // one token's index scores over the visible entries (scratch)
  need += static_cast<double>(cfg.vocab_size) * f;  // the last token's logits
  return need;
}

int64_t HostMemoryLimitBytes(int64_t cap_bytes) {
  if (cap_bytes > 0) return cap_bytes;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  int64_t limit = pages > 0 && page_size > 0 ? static_cast<int64_t>(pages) * page_size : INT64_MAX;
  for (int resource : {RLIMIT_AS, RLIMIT_DATA}) {
    rlimit rl{};
    if (getrlimit(resource, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
      limit = std::min<int64_t>(limit, static_cast<int64_t>(rl.rlim_cur));
    }
  }
  return limit;
}

Status CheckCpuSequenceFits(const ModelConfig& cfg, int64_t max_tokens, int64_t prefill_chunk,
                            int index_topk, const ProbeRequest* probe, int64_t limit_bytes) {
  const double need = CpuSequenceBytes(cfg, max_tokens, prefill_chunk, index_topk, probe);
  if (need > 0.9 * static_cast<double>(limit_bytes)) {
    return Status::OutOfRange(
        "a sequence of " + std::to_string(max_tokens) + " tokens needs about " +
        std::to_string(static_cast<int64_t>(need / (1 << 20))) + " MiB of host memory, which has " +
        std::to_string(limit_bytes >> 20) + " MiB");
  }
  return Status::Ok();
}

}  // namespace nw::cpu
