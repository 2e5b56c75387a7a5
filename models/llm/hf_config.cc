#include "models/llm/hf_config.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

namespace rlsim::models {

namespace {

// An integer that fits an int: JSON has no width, and narrowing a larger one would silently give
// another model.
int checked_int(const nlohmann::json& v, const std::string& path, const std::string& key) {
  const bool fits = v.is_number_unsigned() ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<int>::max())
                                           : v.get<std::int64_t>() >= std::numeric_limits<int>::min() &&
                                                 v.get<std::int64_t>() <= std::numeric_limits<int>::max();
  if (!fits) throw HfConfigError(fmt::format("{}: '{}' is {}, outside the range of an int", path, key, v.dump()));
  return static_cast<int>(v.get<std::int64_t>());
}

int int_key(const nlohmann::json& j, const std::string& path, const std::string& key) {
  if (!j.contains(key) || !j[key].is_number_integer()) throw HfConfigError(path + ": missing integer key '" + key + "'");
  return checked_int(j[key], path, key);
}

int optional_int(const nlohmann::json& j, const std::string& path, const char* key, int dflt) {
  return j.contains(key) && j[key].is_number_integer() ? checked_int(j[key], path, key) : dflt;
}

// A number that fits a float (converting a larger double is undefined behaviour).
void optional_float(const nlohmann::json& j, const std::string& path, const char* key, float& out) {
  if (!j.contains(key) || !j[key].is_number()) return;
  const double v = j[key].get<double>();
  if (!std::isfinite(v) || std::fabs(v) > std::numeric_limits<float>::max())
    throw HfConfigError(fmt::format("{}: '{}' is {}, outside the range of a float", path, key, j[key].dump()));
  out = static_cast<float>(v);
}

}  // namespace

HfConfig read_hf_config_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw HfConfigError(path + ": cannot open");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number too large
    throw HfConfigError(path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw HfConfigError(path + ": expected a JSON object");
  HfConfig c;
  c.path = path;
  c.model_type = j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
  c.name = j.contains("_name_or_path") && j["_name_or_path"].is_string()
               ? j["_name_or_path"].get<std::string>()
               : std::filesystem::absolute(path).parent_path().filename().string();
  c.layers = int_key(j, path, "num_hidden_layers");
  c.hidden = int_key(j, path, "hidden_size");
  c.intermediate = int_key(j, path, "intermediate_size");
  c.heads = int_key(j, path, "num_attention_heads");
  c.kv_heads = optional_int(j, path, "num_key_value_heads", c.heads);
  c.head_dim = optional_int(j, path, "head_dim", c.heads > 0 ? c.hidden / c.heads : 0);
  c.vocab = int_key(j, path, "vocab_size");
  c.tied_embeddings =
      j.contains("tie_word_embeddings") && j["tie_word_embeddings"].is_boolean() && j["tie_word_embeddings"].get<bool>();
  const bool qwen2 = c.model_type == "qwen2" || c.model_type == "qwen2_moe";
  c.qkv_bias = j.contains("attention_bias") && j["attention_bias"].is_boolean() ? j["attention_bias"].get<bool>() : qwen2;
  c.max_position = optional_int(j, path, "max_position_embeddings", c.max_position);
  optional_float(j, path, "rms_norm_eps", c.rms_norm_eps);
  optional_float(j, path, "rope_theta", c.rope_theta);
  c.bos = optional_int(j, path, "bos_token_id", -1);
  c.eos = optional_int(j, path, "eos_token_id", -1);
  const int experts = j.contains("num_experts")        ? int_key(j, path, "num_experts")
                      : j.contains("n_routed_experts") ? int_key(j, path, "n_routed_experts")
                                                       : 0;
  if (experts > 0) {
    MoeSpec moe;
    moe.experts = experts;
    moe.active = int_key(j, path, "num_experts_per_tok");
    moe.expert_intermediate = int_key(j, path, "moe_intermediate_size");
    moe.shared_experts = optional_int(j, path, "n_shared_experts", 0);
    moe.dense_layers = optional_int(j, path, "first_k_dense_replace", 0);
    c.moe = moe;
  }
  if (j.contains("kv_lora_rank") && j["kv_lora_rank"].is_number_integer()) {
    MlaSpec mla;
    mla.q_lora_rank = optional_int(j, path, "q_lora_rank", 0);
    mla.kv_lora_rank = int_key(j, path, "kv_lora_rank");
    mla.qk_nope_head_dim = int_key(j, path, "qk_nope_head_dim");
    mla.qk_rope_head_dim = int_key(j, path, "qk_rope_head_dim");
    mla.v_head_dim = int_key(j, path, "v_head_dim");
    c.mla = mla;
  }
  for (int v : {c.layers, c.hidden, c.intermediate, c.heads, c.kv_heads, c.head_dim, c.vocab}) {
    if (v < 1) throw HfConfigError(path + ": sizes must be positive");
  }
  if (c.heads % c.kv_heads != 0) throw HfConfigError(path + ": num_key_value_heads must divide num_attention_heads");
  return c;
}

ModelArch arch_from_hf_config(const HfConfig& c) {
  ModelArch a;
  a.name = c.name;
  a.layers = c.layers;
  a.hidden = c.hidden;
  a.intermediate = c.intermediate;
  a.heads = c.heads;
  a.kv_heads = c.kv_heads;
  a.head_dim = c.mla ? c.mla->v_head_dim : c.head_dim;
  a.vocab = c.vocab;
  a.tied_embeddings = c.tied_embeddings;
  a.qkv_bias = c.qkv_bias;
  a.moe = c.moe;
  a.mla = c.mla;
  a.source = c.path;
  return a;
}

}  // namespace rlsim::models
