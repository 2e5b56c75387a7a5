#include "models/llm/hf_config.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace rlsim::models {

namespace {

int int_key(const nlohmann::json& j, const std::string& path, const std::string& key) {
  if (!j.contains(key) || !j[key].is_number_integer()) throw HfConfigError(path + ": missing integer key '" + key + "'");
  return j[key].get<int>();
}

int optional_int(const nlohmann::json& j, const char* key, int dflt) {
  return j.contains(key) && j[key].is_number_integer() ? j[key].get<int>() : dflt;
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
  c.kv_heads = optional_int(j, "num_key_value_heads", c.heads);
  c.head_dim = optional_int(j, "head_dim", c.heads > 0 ? c.hidden / c.heads : 0);
  c.vocab = int_key(j, path, "vocab_size");
  c.tied_embeddings =
      j.contains("tie_word_embeddings") && j["tie_word_embeddings"].is_boolean() && j["tie_word_embeddings"].get<bool>();
  const bool qwen2 = c.model_type == "qwen2" || c.model_type == "qwen2_moe";
  c.qkv_bias = j.contains("attention_bias") && j["attention_bias"].is_boolean() ? j["attention_bias"].get<bool>() : qwen2;
  c.max_position = optional_int(j, "max_position_embeddings", c.max_position);
  if (j.contains("rms_norm_eps") && j["rms_norm_eps"].is_number()) c.rms_norm_eps = j["rms_norm_eps"].get<float>();
  if (j.contains("rope_theta") && j["rope_theta"].is_number()) c.rope_theta = j["rope_theta"].get<float>();
  c.bos = optional_int(j, "bos_token_id", -1);
  c.eos = optional_int(j, "eos_token_id", -1);
  const int experts = j.contains("num_experts")        ? int_key(j, path, "num_experts")
                      : j.contains("n_routed_experts") ? int_key(j, path, "n_routed_experts")
                                                       : 0;
  if (experts > 0) {
    MoeSpec moe;
    moe.experts = experts;
    moe.active = int_key(j, path, "num_experts_per_tok");
    moe.expert_intermediate = int_key(j, path, "moe_intermediate_size");
    moe.shared_experts = optional_int(j, "n_shared_experts", 0);
    moe.dense_layers = optional_int(j, "first_k_dense_replace", 0);
    c.moe = moe;
  }
  if (j.contains("kv_lora_rank") && j["kv_lora_rank"].is_number_integer()) {
    MlaSpec mla;
    mla.q_lora_rank = optional_int(j, "q_lora_rank", 0);
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
