// One reader of Hugging Face config.json files for both consumers: the simulator's ModelArch
// (sim/scenario, `model: {hf_config: ...}`) and the real runtime's TransformerConfig
// (models/runtime). Keys follow transformers' configuration classes (LlamaConfig, Qwen2Config,
// Qwen3Config, Qwen3MoeConfig, DeepseekV3Config).
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

#include "models/llm/arch.h"

namespace rlsim::models {

/// A config.json that cannot be read or lacks a key; the message starts with the file's path.
class HfConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The fields rlsim reads from a config.json.
struct HfConfig {
  std::string path;
  std::string model_type;        // model_type; "" when absent
  std::string name;              // _name_or_path, else the containing folder's name
  int layers = 0;                // num_hidden_layers
  int hidden = 0;                // hidden_size
  int intermediate = 0;          // intermediate_size
  int heads = 0;                 // num_attention_heads
  int kv_heads = 0;              // num_key_value_heads (default: heads)
  int head_dim = 0;              // head_dim (default: hidden / heads)
  int vocab = 0;                 // vocab_size
  bool tied_embeddings = false;  // tie_word_embeddings
  /// attention_bias when present, else true for the Qwen2 family (its q/k/v projections carry
  /// biases without the key in its config).
  bool qkv_bias = false;
  int max_position = 4096;      // max_position_embeddings
  float rms_norm_eps = 1e-6f;   // rms_norm_eps
  float rope_theta = 10000.0f;  // rope_theta
  int bos = -1, eos = -1;       // bos_token_id, eos_token_id when they are single integers
  std::optional<MoeSpec> moe;   // num_experts or n_routed_experts, num_experts_per_tok, moe_intermediate_size, ...
  std::optional<MlaSpec> mla;   // kv_lora_rank, q_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim
};

/// Reads `path`. Throws HfConfigError for a missing file, invalid JSON, a missing or non-integer
/// size key, or inconsistent sizes (non-positive, kv heads not dividing heads).
HfConfig read_hf_config_json(const std::string& path);

/// The simulator's architecture of a config (MLA's head_dim is v_head_dim).
ModelArch arch_from_hf_config(const HfConfig& c);

}  // namespace rlsim::models
