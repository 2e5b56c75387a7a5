// Transformer architecture specs and the per-operator parameter, FLOP and byte counts the cost
// model uses. Catalog entries live in catalog/llm/*.yaml (numbers of the public config.json).
//
// Counting conventions (Kaplan et al. 2020, "Scaling Laws", sec. 2.1; Narayanan et al. 2021,
// "Efficient Large-Scale Language Model Training on GPU Clusters", sec. 5.1):
// a linear of P weights costs 2P FLOPs per token forward, 4P backward (dgrad + wgrad);
// causal attention over a context of c tokens costs 4 * heads * head_dim * c FLOPs per token per
// layer (QK^T and PV, 2 FLOPs per multiply-add), halved on average over a causal prefix.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rlsim::models {

/// Mixture-of-experts FFN (Qwen3-MoE, DeepSeek-V3 / Kimi-K2 conventions).
struct MoeSpec {
  int experts = 0;              // routed experts per MoE layer
  int active = 0;               // routed experts per token (top-k)
  int expert_intermediate = 0;  // FFN width of one expert
  int shared_experts = 0;       // always-active experts of the same width
  int dense_layers = 0;         // leading layers with a dense FFN (first_k_dense_replace)
};

/// Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): the KV cache holds the compressed
/// latent (kv_lora_rank) and the decoupled RoPE key (qk_rope_head_dim) per token per layer.
struct MlaSpec {
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
};

/// Parameter counts, in parameters (not bytes).
struct ParamCounts {
  std::int64_t embedding = 0;       // token embedding (vocab x hidden)
  std::int64_t lm_head = 0;         // 0 when tied to the embedding
  std::int64_t attention = 0;       // all layers' attention projections
  std::int64_t dense_ffn = 0;       // all dense-FFN layers
  std::int64_t routed_experts = 0;  // all routed experts of all MoE layers
  std::int64_t shared_experts = 0;
  std::int64_t router = 0;
  std::int64_t norms = 0;
  std::int64_t total() const {
    return embedding + lm_head + attention + dense_ffn + routed_experts + shared_experts + router + norms;
  }
  /// Linear weights that run through the recipe's `linear` format (attention + FFN + experts).
  std::int64_t linear() const { return attention + dense_ffn + routed_experts + shared_experts; }
};

/// Which class of linear a weight matrix belongs to (selects the recipe's precision for it).
enum class LinearKind { kAttention, kDenseFfn, kRoutedExpert, kSharedExpert, kRouter, kLmHead };

/// One weight matrix shape [out, in] (y = W x) and how many such matrices the model holds.
struct LinearShape {
  const char* name;  // e.g. "q_proj", "experts.gate_proj"
  LinearKind kind;
  std::int64_t out = 0;
  std::int64_t in = 0;
  std::int64_t count = 0;  // over all layers (and experts)
};

/// A decoder-only transformer.
struct ModelArch {
  std::string name;
  int layers = 0;
  int hidden = 0;
  int intermediate = 0;  // dense FFN width
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int vocab = 0;
  bool tied_embeddings = false;
  bool qkv_bias = false;  // Qwen2 has q/k/v biases (tiny; counted)
  std::optional<MoeSpec> moe;
  std::optional<MlaSpec> mla;
  std::string source;

  int moe_layers() const { return moe ? layers - moe->dense_layers : 0; }
  int dense_ffn_layers() const { return layers - moe_layers(); }

  /// Attention projection parameters of one layer (GQA or MLA).
  std::int64_t attention_params_per_layer() const;
  /// Parameters of one routed expert (gate, up, down: 3 x hidden x expert_intermediate).
  std::int64_t expert_params() const;

  ParamCounts params() const;

  /// Every linear weight matrix shape (attention, FFN, experts, router, lm_head; for a tied
  /// lm_head the embedding matrix is listed as kLmHead since the GEMM reads it). Sum of
  /// out*in*count over the list equals params().linear() + router + lm_head (or embedding if tied),
  /// ignoring biases.
  std::vector<LinearShape> linear_shapes() const;

  /// Parameters touched per token: all but the inactive routed experts (embedding included).
  std::int64_t active_params() const;

  /// Linear-layer weights per token whose GEMMs cost 2 FLOPs each (active, excl. embedding
  /// look-up, incl. lm_head).
  std::int64_t active_matmul_params() const;

  /// KV-cache elements per token over all layers: 2 * kv_heads * head_dim * layers (GQA), or
  /// (kv_lora_rank + qk_rope_head_dim) * layers (MLA latent cache, as vLLM/SGLang store it).
  std::int64_t kv_elements_per_token() const;

  /// Attention FLOPs (QK^T + PV) for one query token against `context` cached tokens, summed
  /// over layers: 2 * 2 * heads * (qk_dim + v_dim)/2 * context * layers.
  double attention_flops_per_token(double context) const;

  /// Attention FLOPs of a causal forward over a whole sequence of length L: sum over positions of
  /// attention_flops_per_token(position) = attention_flops_per_token(1) * L (L + 1) / 2.
  double causal_attention_flops(double length) const;
};

}  // namespace rlsim::models
