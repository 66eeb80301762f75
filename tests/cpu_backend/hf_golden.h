// The HF transformers golden file (tests/data/hf_reference/tiny-v4.json, written on the GPU machine
// by models/train/hf_reference.py) as C++ values, shared by the CPU test
// (tests/cpu_backend/hf_reference_test.cc) and the GPU backends' test
// (tests/cuda_engine/cuda_engine_test.cc). Header-only test support.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace nw {

struct IndexerRecord {
  int layer = 0;
  std::vector<std::vector<int32_t>> sets;  // per stored position, sorted
  std::vector<std::optional<double>> kth, next;
  std::vector<double> max_abs;
};

struct HfPrompt {
  std::string name;
  std::vector<int32_t> tokens;
  int index_topk = 0;
  std::vector<int64_t> positions;
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> greedy;
  std::vector<double> greedy_margins;
  double greedy_scale = 0;
  std::vector<IndexerRecord> indexer;
};

inline std::optional<double> OptionalNumber(const nlohmann::json& v) {
  if (v.is_null()) return std::nullopt;
  return v.get<double>();
}

inline std::vector<HfPrompt> ReadGolden(const std::filesystem::path& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  const nlohmann::json doc = nlohmann::json::parse(f);
  EXPECT_EQ(doc.at("needlework_config").at("swiglu_clamp_shared_expert"), true);
  std::vector<HfPrompt> out;
  for (const auto& p : doc.at("prompts")) {
    HfPrompt g;
    g.name = p.at("name").get<std::string>();
    g.tokens = p.at("tokens").get<std::vector<int32_t>>();
    g.index_topk = p.at("index_topk").get<int>();
    g.positions = p.at("positions").get<std::vector<int64_t>>();
    g.logits = p.at("logits").get<std::vector<std::vector<float>>>();
    g.greedy = p.at("greedy").get<std::vector<int32_t>>();
    g.greedy_margins = p.at("greedy_top2_margins").get<std::vector<double>>();
    g.greedy_scale = p.at("greedy_max_abs_logit").get<double>();
    for (const auto& r : p.at("indexer")) {
      IndexerRecord rec;
      rec.layer = r.at("layer").get<int>();
      rec.sets = r.at("topk_sets").get<std::vector<std::vector<int32_t>>>();
      for (const auto& v : r.at("kth_score")) rec.kth.push_back(OptionalNumber(v));
      for (const auto& v : r.at("next_score")) rec.next.push_back(OptionalNumber(v));
      rec.max_abs = r.at("max_abs_score").get<std::vector<double>>();
      g.indexer.push_back(std::move(rec));
    }
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace nw
