#include "engine/checkpoint/config.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "engine/checkpoint/json_util.h"

namespace nw {
namespace {

using nlohmann::json;

// Keys the reference ignores (HF metadata) or that size runtime buffers (ModelArgs): accepted,
// and checked only where a value would contradict the architecture.
const std::set<std::string>& IgnoredKeys() {
  static const std::set<std::string> kKeys = {
      "architectures",       "model_type",        "num_key_value_heads",  "attention_bias",
      "attention_dropout",   "hidden_act",        "norm_topk_prob",       "topk_method",
      "tie_word_embeddings", "torch_dtype",       "quantization_config",  "dtype",
      "scale_fmt",           "expert_dtype",      "max_batch_size",       "max_seq_len",
      "scale_dtype",         "initializer_range", "transformers_version", "use_cache",
      "pad_token_id",        "temperature"};
  return kKeys;
}

bool IsHfStyle(const json& j) {
  return j.contains("hidden_size") || j.contains("num_hidden_layers") || j.contains("model_type") ||
         j.contains("architectures");
}

// Reads fields by their HF and ModelArgs names and remembers which keys it consumed.
class FieldReader {
 public:
  FieldReader(const json& j, const std::string& source, bool hf)
      : j_(j), source_(source), hf_(hf) {}

  // Looks a field up under both names. Returns nullptr when absent; an error when both names are
  // present with different values.
  Result<const json*> Find(const std::string& hf_key, const std::string& ma_key) {
    const json* a = Lookup(hf_key);
    const json* b = hf_key == ma_key ? nullptr : Lookup(ma_key);
    if (a && b && *a != *b) {
      return Status::InvalidArgument(source_ + ": keys '" + hf_key + "' and '" + ma_key +
                                     "' disagree (" + JsonSnippet(*a) + " vs " + JsonSnippet(*b) +
                                     ")");
    }
    return a ? a : b;
  }

  std::string Name(const std::string& hf_key, const std::string& ma_key) const {
    return hf_ ? hf_key : ma_key;
  }

  Status Missing(const std::string& key) const {
    return Status::InvalidArgument(source_ + ": missing required key '" + key + "'");
  }
  Status BadValue(const std::string& key, const std::string& what) const {
    return Status::InvalidArgument(source_ + ": key '" + key + "' " + what);
  }

  // Integer field. `required` false keeps *out (a documented default) when absent.
  Status Int(const std::string& hf_key, const std::string& ma_key, bool required, int* out) {
    NW_ASSIGN_OR_RETURN(const json* v, Find(hf_key, ma_key));
    std::string key = Name(hf_key, ma_key);
    if (!v) return required ? Missing(key) : Status::Ok();
    return ToInt(*v, key, out);
  }

  Status ToInt(const json& v, const std::string& key, int* out) const {
    if (!v.is_number_integer()) return BadValue(key, "must be an integer, got " + JsonSnippet(v));
    if (v.is_number_unsigned()) {
      auto u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
        return BadValue(key, "is out of range: " + JsonSnippet(v));
      }
      *out = static_cast<int>(u);
      return Status::Ok();
    }
    auto s = v.get<int64_t>();
    if (s < std::numeric_limits<int>::min() || s > std::numeric_limits<int>::max()) {
      return BadValue(key, "is out of range: " + JsonSnippet(v));
    }
    *out = static_cast<int>(s);
    return Status::Ok();
  }

  Status Double(const std::string& hf_key, const std::string& ma_key, bool required, double* out) {
    NW_ASSIGN_OR_RETURN(const json* v, Find(hf_key, ma_key));
    std::string key = Name(hf_key, ma_key);
    if (!v) return required ? Missing(key) : Status::Ok();
    return ToDouble(*v, key, out);
  }

  // Boolean field (same key in both styles); absent keeps *out (the documented default).
  Status Bool(const std::string& key, bool* out) {
    const json* v = Lookup(key);
    if (!v) return Status::Ok();
    if (!v->is_boolean()) {
      return BadValue(key, "must be true or false, got " + JsonSnippet(*v));
    }
    *out = v->get<bool>();
    return Status::Ok();
  }

  Status ToDouble(const json& v, const std::string& key, double* out) const {
    if (!v.is_number()) return BadValue(key, "must be a number, got " + JsonSnippet(v));
    *out = v.get<double>();
    if (!std::isfinite(*out)) return BadValue(key, "must be finite");
    return Status::Ok();
  }

  // Keys present in the object that no field consumed and that are not known-ignored.
  Status CheckUnknownKeys() const {
    for (const auto& [key, value] : j_.items()) {
      if (used_.count(key) || IgnoredKeys().count(key)) continue;
      return Status::InvalidArgument(source_ + ": unknown key '" + key + "'");
    }
    return Status::Ok();
  }

  const json* Lookup(const std::string& key) {
    auto it = j_.find(key);
    if (it == j_.end()) return nullptr;
    used_.insert(key);
    return &*it;
  }

  const std::string& source() const { return source_; }
  bool hf() const { return hf_; }

 private:
  const json& j_;
  const std::string& source_;
  bool hf_;
  std::set<std::string> used_;
};

// bos/eos: an integer, a non-empty list of integers (the first is used) or null.
Status ParseTokenId(FieldReader& r, const std::string& key, int* out) {
  const json* v = r.Lookup(key);
  if (!v || v->is_null()) return Status::Ok();
  if (v->is_array()) {
    if (v->empty()) return r.BadValue(key, "must not be an empty list");
    for (const json& e : *v) {
      int ignored = 0;
      NW_RETURN_IF_ERROR(r.ToInt(e, key, &ignored));
    }
    return r.ToInt(v->front(), key, out);
  }
  return r.ToInt(*v, key, out);
}

// HF rope_scaling {type: yarn, factor, original_max_position_embeddings, beta_fast, beta_slow}.
Status ParseRopeScaling(FieldReader& r, const json& rs, ModelConfig* c) {
  if (rs.is_null()) return Status::Ok();
  if (!rs.is_object()) return r.BadValue("rope_scaling", "must be an object or null");
  static const std::set<std::string> kKnown = {
      "type", "rope_type", "factor", "original_max_position_embeddings", "beta_fast", "beta_slow"};
  for (const auto& [key, value] : rs.items()) {
    if (!kKnown.count(key)) {
      return Status::InvalidArgument(r.source() + ": unknown key 'rope_scaling." + key + "'");
    }
  }
  for (const char* type_key : {"type", "rope_type"}) {
    auto it = rs.find(type_key);
    if (it != rs.end() && *it != json("yarn")) {
      return r.BadValue(std::string("rope_scaling.") + type_key,
                        "must be \"yarn\", got " + JsonSnippet(*it));
    }
  }
  auto need = [&](const char* key) -> Result<const json*> {
    auto it = rs.find(key);
    if (it == rs.end()) return r.Missing(std::string("rope_scaling.") + key);
    return &*it;
  };
  NW_ASSIGN_OR_RETURN(const json* osl, need("original_max_position_embeddings"));
  NW_RETURN_IF_ERROR(
      r.ToInt(*osl, "rope_scaling.original_max_position_embeddings", &c->original_seq_len));
  NW_ASSIGN_OR_RETURN(const json* factor, need("factor"));
  NW_RETURN_IF_ERROR(r.ToDouble(*factor, "rope_scaling.factor", &c->rope_factor));
  NW_ASSIGN_OR_RETURN(const json* bf, need("beta_fast"));
  NW_RETURN_IF_ERROR(r.ToDouble(*bf, "rope_scaling.beta_fast", &c->beta_fast));
  NW_ASSIGN_OR_RETURN(const json* bs, need("beta_slow"));
  NW_RETURN_IF_ERROR(r.ToDouble(*bs, "rope_scaling.beta_slow", &c->beta_slow));
  return Status::Ok();
}

// Checks the values of ignored keys that would contradict the architecture.
Status CheckIgnoredKeyValues(FieldReader& r, const json& j) {
  if (auto it = j.find("num_key_value_heads"); it != j.end() && *it != json(1)) {
    return r.BadValue("num_key_value_heads",
                      "must be 1 (V4 has one shared KV head), got " + JsonSnippet(*it));
  }
  if (auto it = j.find("model_type"); it != j.end() && *it != json("deepseek_v4")) {
    return r.BadValue("model_type", "must be \"deepseek_v4\", got " + JsonSnippet(*it));
  }
  if (auto it = j.find("tie_word_embeddings"); it != j.end() && *it != json(false)) {
    return r.BadValue("tie_word_embeddings", "must be false (V4 has an untied head)");
  }
  if (auto it = j.find("attention_bias"); it != j.end() && *it != json(false)) {
    return r.BadValue("attention_bias", "must be false (V4 has no attention biases)");
  }
  if (auto it = j.find("quantization_config");
      it != j.end() && !it->is_object() && !it->is_null()) {
    return r.BadValue("quantization_config", "must be an object");
  }
  return Status::Ok();
}

bool IsPowerOfTwo(int x) { return x > 0 && (x & (x - 1)) == 0; }

}  // namespace

std::string_view ScoreFuncName(ScoreFunc f) {
  switch (f) {
    case ScoreFunc::kSoftmax:
      return "softmax";
    case ScoreFunc::kSigmoid:
      return "sigmoid";
    case ScoreFunc::kSqrtSoftplus:
      return "sqrtsoftplus";
  }
  return "unknown";
}

int ModelConfig::num_indexer_layers() const {
  int n = 0;
  for (int i = 0; i < n_layers && i < static_cast<int>(compress_ratios.size()); ++i) {
    if (has_indexer(i)) ++n;
  }
  return n;
}

Status ModelConfig::Validate() const {
  auto bad = [](const std::string& what) {
    return Status::InvalidArgument("invalid model config: " + what);
  };
  struct Positive {
    const char* name;
    int value;
  };
  for (const Positive& p :
       {Positive{"vocab_size", vocab_size}, Positive{"dim", dim}, Positive{"n_layers", n_layers},
        Positive{"n_heads", n_heads}, Positive{"head_dim", head_dim},
        Positive{"rope_head_dim", rope_head_dim}, Positive{"q_lora_rank", q_lora_rank},
        Positive{"o_groups", o_groups}, Positive{"o_lora_rank", o_lora_rank},
        Positive{"window_size", window_size}, Positive{"index_n_heads", index_n_heads},
        Positive{"index_head_dim", index_head_dim}, Positive{"index_topk", index_topk},
        Positive{"hc_mult", hc_mult}, Positive{"hc_sinkhorn_iters", hc_sinkhorn_iters},
        Positive{"n_routed_experts", n_routed_experts},
        Positive{"n_activated_experts", n_activated_experts},
        Positive{"moe_inter_dim", moe_inter_dim},
        Positive{"max_position_embeddings", max_position_embeddings}}) {
    if (p.value <= 0) {
      return bad(std::string(p.name) + " must be positive, got " + std::to_string(p.value));
    }
  }
  // Upper bounds: every size here multiplies into an allocation or a loop per token, so a value
  // far beyond any DeepSeek-V4 (V4-Pro: vocab 129,280, dim 7,168, 61 layers, 128 heads,
  // head_dim 512, top-k 1,024, 384 experts, 1M positions) is refused with the reason before
  // anything is allocated or iterated.
  struct Bounded {
    const char* name;
    int64_t value;
    int64_t max;
    const char* why;
  };
  for (const Bounded& b :
       {Bounded{"vocab_size", vocab_size, int64_t{1} << 22, "rows of the embedding and head"},
        Bounded{"dim", dim, 65536, "the hidden size of every activation"},
        Bounded{"n_layers", n_layers, 1024, "blocks run per token"},
        Bounded{"n_mtp_layers", n_mtp_layers, 16, "MTP blocks loaded"},
        Bounded{"n_heads", n_heads, 1024, "query heads per token"},
        Bounded{"head_dim", head_dim, 4096, "dimensions per head"},
        Bounded{"q_lora_rank", q_lora_rank, 65536, "the query low-rank size"},
        Bounded{"o_lora_rank", o_lora_rank, 65536, "the output low-rank size"},
        Bounded{"window_size", window_size, 65536, "keys attended densely per query"},
        Bounded{"index_n_heads", index_n_heads, 1024, "indexer heads per query"},
        Bounded{"index_head_dim", index_head_dim, 4096, "indexer dimensions per head"},
        Bounded{"index_topk", index_topk, 65536, "compressed blocks selected per query"},
        Bounded{"hc_mult", hc_mult, 64, "hyper-connection streams per token"},
        Bounded{"hc_sinkhorn_iters", hc_sinkhorn_iters, 1000,
                "Sinkhorn iterations per token and layer"},
        Bounded{"n_routed_experts", n_routed_experts, 65536, "experts per MoE layer"},
        Bounded{"n_activated_experts", n_activated_experts, 1024, "experts run per token"},
        Bounded{"moe_inter_dim", moe_inter_dim, int64_t{1} << 18, "the expert hidden size"},
        Bounded{"max_position_embeddings", max_position_embeddings, int64_t{1} << 24,
                "positions of RoPE tables and caches"},
        Bounded{"original_seq_len", original_seq_len, int64_t{1} << 24, "YaRN positions"}}) {
    if (b.value > b.max) {
      return bad(std::string(b.name) + " (" + std::to_string(b.value) + ") exceeds " +
                 std::to_string(b.max) + ": it sizes " + b.why +
                 ", and no DeepSeek-V4 model comes near it");
    }
  }
  if (n_mtp_layers < 0) return bad("n_mtp_layers must be >= 0");
  if (n_hash_layers < 0 || n_hash_layers >= n_layers) {
    return bad("n_hash_layers (" + std::to_string(n_hash_layers) +
               ") must be in [0, n_layers=" + std::to_string(n_layers) + ")");
  }
  const size_t want = static_cast<size_t>(n_layers) + static_cast<size_t>(n_mtp_layers);
  if (compress_ratios.size() != want) {
    return bad("compress_ratios has " + std::to_string(compress_ratios.size()) +
               " entries, expected n_layers + n_mtp_layers = " + std::to_string(want));
  }
  for (size_t i = 0; i < compress_ratios.size(); ++i) {
    int r = compress_ratios[i];
    if (r != 0 && r != 4 && r != 128) {
      return bad("compress_ratios[" + std::to_string(i) + "] = " + std::to_string(r) +
                 " (must be 0, 4 or 128)");
    }
  }
  if (n_heads % o_groups != 0) {
    return bad("n_heads (" + std::to_string(n_heads) + ") must be divisible by o_groups (" +
               std::to_string(o_groups) + ")");
  }
  if (rope_head_dim % 2 != 0) return bad("rope_head_dim must be even (interleaved pairs)");
  if (rope_head_dim > head_dim) return bad("rope_head_dim must not exceed head_dim");
  if ((head_dim - rope_head_dim) % 64 != 0) {
    return bad("head_dim - rope_head_dim (" + std::to_string(head_dim - rope_head_dim) +
               ") must be a multiple of 64");
  }
  if (!IsPowerOfTwo(index_head_dim) || index_head_dim % 32 != 0) {
    return bad("index_head_dim (" + std::to_string(index_head_dim) +
               ") must be a power of two and a multiple of 32");
  }
  if (rope_head_dim > index_head_dim) return bad("rope_head_dim must not exceed index_head_dim");
  if (n_shared_experts != 1) {
    return bad("n_shared_experts must be 1, got " + std::to_string(n_shared_experts));
  }
  if (n_activated_experts > n_routed_experts) {
    return bad("n_activated_experts (" + std::to_string(n_activated_experts) +
               ") exceeds n_routed_experts (" + std::to_string(n_routed_experts) + ")");
  }
  if (!(rope_theta > 0) || !(compress_rope_theta > 0)) {
    return bad("rope_theta and compress_rope_theta must be positive");
  }
  if (original_seq_len < 0) return bad("original_seq_len must be >= 0");
  if (original_seq_len > 0 && (!(rope_factor > 0) || !(beta_fast > 0) || !(beta_slow > 0))) {
    return bad("YaRN rope_factor, beta_fast and beta_slow must be positive");
  }
  if (!(hc_eps >= 0) || !(norm_eps > 0)) return bad("hc_eps must be >= 0 and norm_eps > 0");
  if (!(route_scale > 0)) return bad("route_scale must be positive");
  if (!(swiglu_limit >= 0)) return bad("swiglu_limit must be >= 0");
  for (auto [name, id] : {std::pair<const char*, int>{"bos_token_id", bos_token_id},
                          std::pair<const char*, int>{"eos_token_id", eos_token_id}}) {
    if (id < -1 || id >= vocab_size) {
      return bad(std::string(name) + " (" + std::to_string(id) + ") outside the vocabulary");
    }
  }
  return Status::Ok();
}

nlohmann::json ModelConfig::ToHfJson() const {
  json j = json::object();
  j["architectures"] = json::array({"DeepseekV4ForCausalLM"});
  j["model_type"] = "deepseek_v4";
  j["num_key_value_heads"] = 1;
  j["attention_bias"] = false;
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = false;
  j["torch_dtype"] = "bfloat16";
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = dim;
  j["num_hidden_layers"] = n_layers;
  j["num_nextn_predict_layers"] = n_mtp_layers;
  j["num_attention_heads"] = n_heads;
  j["head_dim"] = head_dim;
  j["qk_rope_head_dim"] = rope_head_dim;
  j["q_lora_rank"] = q_lora_rank;
  j["o_groups"] = o_groups;
  j["o_lora_rank"] = o_lora_rank;
  j["sliding_window"] = window_size;
  j["compress_ratios"] = compress_ratios;
  j["rope_theta"] = rope_theta;
  j["compress_rope_theta"] = compress_rope_theta;
  if (original_seq_len > 0) {
    j["rope_scaling"] = json{{"type", "yarn"},
                             {"factor", rope_factor},
                             {"original_max_position_embeddings", original_seq_len},
                             {"beta_fast", beta_fast},
                             {"beta_slow", beta_slow}};
  }
  j["index_n_heads"] = index_n_heads;
  j["index_head_dim"] = index_head_dim;
  j["index_topk"] = index_topk;
  j["hc_mult"] = hc_mult;
  j["hc_sinkhorn_iters"] = hc_sinkhorn_iters;
  j["hc_eps"] = hc_eps;
  j["n_routed_experts"] = n_routed_experts;
  j["n_shared_experts"] = n_shared_experts;
  j["num_experts_per_tok"] = n_activated_experts;
  j["moe_intermediate_size"] = moe_inter_dim;
  j["scoring_func"] = ScoreFuncName(score_func);
  j["routed_scaling_factor"] = route_scale;
  j["num_hash_layers"] = n_hash_layers;
  j["swiglu_limit"] = swiglu_limit;
  j["swiglu_clamp_shared_expert"] = swiglu_clamp_shared_expert;
  j["rms_norm_eps"] = norm_eps;
  j["max_position_embeddings"] = max_position_embeddings;
  if (bos_token_id >= 0) j["bos_token_id"] = bos_token_id;
  if (eos_token_id >= 0) j["eos_token_id"] = eos_token_id;
  return j;
}

Result<ModelConfig> ParseModelConfig(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) return Status::InvalidArgument(source + ": config must be a JSON object");
  const bool hf = IsHfStyle(j);
  FieldReader r(j, source, hf);
  ModelConfig c;
  NW_RETURN_IF_ERROR(r.Int("vocab_size", "vocab_size", true, &c.vocab_size));
  NW_RETURN_IF_ERROR(r.Int("hidden_size", "dim", true, &c.dim));
  NW_RETURN_IF_ERROR(r.Int("num_hidden_layers", "n_layers", true, &c.n_layers));
  NW_RETURN_IF_ERROR(r.Int("num_nextn_predict_layers", "n_mtp_layers", false, &c.n_mtp_layers));
  NW_RETURN_IF_ERROR(r.Int("num_attention_heads", "n_heads", true, &c.n_heads));
  NW_RETURN_IF_ERROR(r.Int("head_dim", "head_dim", true, &c.head_dim));
  NW_RETURN_IF_ERROR(r.Int("qk_rope_head_dim", "rope_head_dim", true, &c.rope_head_dim));
  NW_RETURN_IF_ERROR(r.Int("q_lora_rank", "q_lora_rank", true, &c.q_lora_rank));
  NW_RETURN_IF_ERROR(r.Int("o_groups", "o_groups", true, &c.o_groups));
  NW_RETURN_IF_ERROR(r.Int("o_lora_rank", "o_lora_rank", true, &c.o_lora_rank));
  NW_RETURN_IF_ERROR(r.Int("sliding_window", "window_size", true, &c.window_size));
  {
    NW_ASSIGN_OR_RETURN(const json* v, r.Find("compress_ratios", "compress_ratios"));
    if (!v) return r.Missing("compress_ratios");
    if (!v->is_array()) return r.BadValue("compress_ratios", "must be a list of integers");
    for (const json& e : *v) {
      int ratio = 0;
      NW_RETURN_IF_ERROR(r.ToInt(e, "compress_ratios", &ratio));
      c.compress_ratios.push_back(ratio);
    }
  }
  NW_RETURN_IF_ERROR(r.Double("rope_theta", "rope_theta", true, &c.rope_theta));
  NW_RETURN_IF_ERROR(
      r.Double("compress_rope_theta", "compress_rope_theta", true, &c.compress_rope_theta));

  // YaRN: HF nests it in rope_scaling; ModelArgs has flat keys. Both spellings may appear.
  ModelConfig yarn_hf = c;
  const json* rope_scaling = r.Lookup("rope_scaling");
  if (rope_scaling) NW_RETURN_IF_ERROR(ParseRopeScaling(r, *rope_scaling, &yarn_hf));
  const json* osl = r.Lookup("original_seq_len");
  if (osl) {
    NW_RETURN_IF_ERROR(r.ToInt(*osl, "original_seq_len", &c.original_seq_len));
    const bool need = c.original_seq_len > 0;
    NW_RETURN_IF_ERROR(r.Double("rope_factor", "rope_factor", need, &c.rope_factor));
    NW_RETURN_IF_ERROR(r.Double("beta_fast", "beta_fast", need, &c.beta_fast));
    NW_RETURN_IF_ERROR(r.Double("beta_slow", "beta_slow", need, &c.beta_slow));
    if (rope_scaling && !rope_scaling->is_null() &&
        (yarn_hf.original_seq_len != c.original_seq_len || yarn_hf.rope_factor != c.rope_factor ||
         yarn_hf.beta_fast != c.beta_fast || yarn_hf.beta_slow != c.beta_slow)) {
      return Status::InvalidArgument(source +
                                     ": keys 'rope_scaling' and 'original_seq_len'/'rope_factor'/"
                                     "'beta_fast'/'beta_slow' disagree");
    }
  } else if (hf || rope_scaling) {
    c.original_seq_len = yarn_hf.original_seq_len;
    c.rope_factor = yarn_hf.rope_factor;
    c.beta_fast = yarn_hf.beta_fast;
    c.beta_slow = yarn_hf.beta_slow;
    for (const char* flat : {"rope_factor", "beta_fast", "beta_slow"}) {
      if (j.contains(flat)) {
        return Status::InvalidArgument(source + ": key '" + flat +
                                       "' needs 'original_seq_len' (use rope_scaling in HF "
                                       "configs)");
      }
    }
  } else {
    return r.Missing("original_seq_len");
  }

  NW_RETURN_IF_ERROR(r.Int("index_n_heads", "index_n_heads", true, &c.index_n_heads));
  NW_RETURN_IF_ERROR(r.Int("index_head_dim", "index_head_dim", true, &c.index_head_dim));
  NW_RETURN_IF_ERROR(r.Int("index_topk", "index_topk", true, &c.index_topk));
  NW_RETURN_IF_ERROR(r.Int("hc_mult", "hc_mult", true, &c.hc_mult));
  NW_RETURN_IF_ERROR(r.Int("hc_sinkhorn_iters", "hc_sinkhorn_iters", true, &c.hc_sinkhorn_iters));
  NW_RETURN_IF_ERROR(r.Double("hc_eps", "hc_eps", false, &c.hc_eps));
  NW_RETURN_IF_ERROR(r.Int("n_routed_experts", "n_routed_experts", true, &c.n_routed_experts));
  NW_RETURN_IF_ERROR(r.Int("n_shared_experts", "n_shared_experts", true, &c.n_shared_experts));
  NW_RETURN_IF_ERROR(
      r.Int("num_experts_per_tok", "n_activated_experts", true, &c.n_activated_experts));
  NW_RETURN_IF_ERROR(r.Int("moe_intermediate_size", "moe_inter_dim", true, &c.moe_inter_dim));
  {
    NW_ASSIGN_OR_RETURN(const json* v, r.Find("scoring_func", "score_func"));
    std::string key = r.Name("scoring_func", "score_func");
    if (!v) return r.Missing(key);
    if (*v == json("softmax")) {
      c.score_func = ScoreFunc::kSoftmax;
    } else if (*v == json("sigmoid")) {
      c.score_func = ScoreFunc::kSigmoid;
    } else if (*v == json("sqrtsoftplus")) {
      c.score_func = ScoreFunc::kSqrtSoftplus;
    } else {
      return r.BadValue(
          key, "must be \"softmax\", \"sigmoid\" or \"sqrtsoftplus\", got " + JsonSnippet(*v));
    }
  }
  NW_RETURN_IF_ERROR(r.Double("routed_scaling_factor", "route_scale", true, &c.route_scale));
  NW_RETURN_IF_ERROR(r.Int("num_hash_layers", "n_hash_layers", true, &c.n_hash_layers));
  NW_RETURN_IF_ERROR(r.Double("swiglu_limit", "swiglu_limit", true, &c.swiglu_limit));
  NW_RETURN_IF_ERROR(r.Bool("swiglu_clamp_shared_expert", &c.swiglu_clamp_shared_expert));
  NW_RETURN_IF_ERROR(r.Double("rms_norm_eps", "norm_eps", false, &c.norm_eps));
  if (hf) {
    const json* mpe = r.Lookup("max_position_embeddings");
    if (!mpe) return r.Missing("max_position_embeddings");
    NW_RETURN_IF_ERROR(r.ToInt(*mpe, "max_position_embeddings", &c.max_position_embeddings));
  } else {
    NW_RETURN_IF_ERROR(
        r.Int("max_position_embeddings", "max_seq_len", true, &c.max_position_embeddings));
  }
  NW_RETURN_IF_ERROR(ParseTokenId(r, "bos_token_id", &c.bos_token_id));
  NW_RETURN_IF_ERROR(ParseTokenId(r, "eos_token_id", &c.eos_token_id));
  NW_RETURN_IF_ERROR(CheckIgnoredKeyValues(r, j));
  NW_RETURN_IF_ERROR(r.CheckUnknownKeys());
  if (Status s = c.Validate(); !s.ok()) {
    return Status(s.code(), source + ": " + s.message());
  }
  return c;
}

Result<ModelConfig> LoadModelConfig(const std::filesystem::path& path) {
  std::filesystem::path file = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) file = path / "config.json";
  NW_ASSIGN_OR_RETURN(std::string text, ReadFileToString(file));
  NW_ASSIGN_OR_RETURN(json j, ParseJsonStrict(text, file.string()));
  return ParseModelConfig(j, file.string());
}

}  // namespace nw
