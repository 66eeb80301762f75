#include "engine/parallel/partition.h"

#include <string>

namespace nw::parallel {

namespace {

Status Divides(int ranks, int64_t n, const std::string& name) {
  if (n % ranks != 0) {
    return Status::InvalidArgument(name + " = " + std::to_string(n) + " is not divisible by " +
                                   std::to_string(ranks) + " tensor-parallel ranks");
  }
  return Status::Ok();
}

Range Slice(int rank, int ranks, int64_t n) {
  const int64_t per = n / ranks;
  return Range{rank * per, (rank + 1) * per};
}

Status CheckCover(const PartitionPlan& plan, Range RankSlice::*field, int64_t n,
                  const std::string& name) {
  const int64_t per = n / plan.ranks;
  int64_t next = 0;
  for (const RankSlice& s : plan.slices) {
    const Range& r = s.*field;
    if (r.begin != next || r.size() != per) {
      return Status::InvalidArgument("rank " + std::to_string(s.rank) + " " + name + " slice [" +
                                     std::to_string(r.begin) + ", " + std::to_string(r.end) +
                                     ") does not continue an equal split of " + std::to_string(n));
    }
    next = r.end;
  }
  if (next != n) return Status::InvalidArgument(name + " not fully covered");
  return Status::Ok();
}

}  // namespace

Result<PartitionPlan> MakePartitionPlan(const ModelConfig& cfg, int ranks) {
  if (ranks < 1) {
    return Status::InvalidArgument("tensor-parallel ranks must be >= 1, got " +
                                   std::to_string(ranks));
  }
  const bool indexer = cfg.num_indexer_layers() > 0;
  NW_RETURN_IF_ERROR(Divides(ranks, cfg.n_heads, "n_heads"));
  NW_RETURN_IF_ERROR(Divides(ranks, cfg.o_groups, "o_groups"));
  if (indexer) NW_RETURN_IF_ERROR(Divides(ranks, cfg.index_n_heads, "index_n_heads"));
  NW_RETURN_IF_ERROR(Divides(ranks, cfg.n_routed_experts, "n_routed_experts"));
  PartitionPlan plan;
  plan.ranks = ranks;
  for (int r = 0; r < ranks; ++r) {
    RankSlice s;
    s.rank = r;
    s.heads = Slice(r, ranks, cfg.n_heads);
    s.groups = Slice(r, ranks, cfg.o_groups);
    s.wo_b_columns = Slice(r, ranks, cfg.o_groups * cfg.o_lora_rank);
    s.index_heads = indexer ? Slice(r, ranks, cfg.index_n_heads) : Range{};
    s.experts = Slice(r, ranks, cfg.n_routed_experts);
    plan.slices.push_back(s);
  }
  return plan;
}

Status ValidatePartitionPlan(const ModelConfig& cfg, const PartitionPlan& plan) {
  if (plan.ranks < 1 || static_cast<int>(plan.slices.size()) != plan.ranks) {
    return Status::InvalidArgument("plan has " + std::to_string(plan.slices.size()) +
                                   " slices for " + std::to_string(plan.ranks) + " ranks");
  }
  for (int r = 0; r < plan.ranks; ++r) {
    if (plan.slices[static_cast<size_t>(r)].rank != r) {
      return Status::InvalidArgument("plan slices are not in rank order");
    }
  }
  NW_RETURN_IF_ERROR(Divides(plan.ranks, cfg.n_heads, "n_heads"));
  NW_RETURN_IF_ERROR(Divides(plan.ranks, cfg.o_groups, "o_groups"));
  NW_RETURN_IF_ERROR(Divides(plan.ranks, cfg.n_routed_experts, "n_routed_experts"));
  NW_RETURN_IF_ERROR(CheckCover(plan, &RankSlice::heads, cfg.n_heads, "heads"));
  NW_RETURN_IF_ERROR(CheckCover(plan, &RankSlice::groups, cfg.o_groups, "groups"));
  NW_RETURN_IF_ERROR(
      CheckCover(plan, &RankSlice::wo_b_columns, cfg.o_groups * cfg.o_lora_rank, "wo_b columns"));
  if (cfg.num_indexer_layers() > 0) {
    NW_RETURN_IF_ERROR(Divides(plan.ranks, cfg.index_n_heads, "index_n_heads"));
    NW_RETURN_IF_ERROR(CheckCover(plan, &RankSlice::index_heads, cfg.index_n_heads, "index heads"));
  }
  NW_RETURN_IF_ERROR(CheckCover(plan, &RankSlice::experts, cfg.n_routed_experts, "routed experts"));
  for (const RankSlice& s : plan.slices) {
    // A rank's groups must hold exactly its heads (wo_a groups are contiguous head blocks).
    const int64_t heads_per_group = cfg.n_heads / cfg.o_groups;
    if (s.groups.begin * heads_per_group != s.heads.begin ||
        s.groups.end * heads_per_group != s.heads.end) {
      return Status::InvalidArgument("rank " + std::to_string(s.rank) +
                                     " wo_a groups do not match its heads");
    }
  }
  return Status::Ok();
}

}  // namespace nw::parallel
