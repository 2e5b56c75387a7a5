#include "models/llm/arch.h"

namespace rlsim::models {

std::int64_t ModelArch::attention_params_per_layer() const {
  const std::int64_t h = hidden;
  if (mla) {
    const std::int64_t qk_head = mla->qk_nope_head_dim + mla->qk_rope_head_dim;
    std::int64_t q = mla->q_lora_rank > 0 ? h * mla->q_lora_rank + mla->q_lora_rank * heads * qk_head : h * heads * qk_head;
    const std::int64_t kv_a = h * (mla->kv_lora_rank + mla->qk_rope_head_dim);
    const std::int64_t kv_b = static_cast<std::int64_t>(mla->kv_lora_rank) * heads * (mla->qk_nope_head_dim + mla->v_head_dim);
    const std::int64_t o = static_cast<std::int64_t>(heads) * mla->v_head_dim * h;
    return q + kv_a + kv_b + o;
  }
  const std::int64_t q = h * heads * head_dim;
  const std::int64_t kv = 2 * h * kv_heads * head_dim;
  const std::int64_t o = static_cast<std::int64_t>(heads) * head_dim * h;
  const std::int64_t bias = qkv_bias ? static_cast<std::int64_t>(heads + 2 * kv_heads) * head_dim : 0;
  return q + kv + o + bias;
}

std::int64_t ModelArch::expert_params() const { return moe ? 3LL * hidden * moe->expert_intermediate : 0; }

ParamCounts ModelArch::params() const {
  ParamCounts p;
  p.embedding = static_cast<std::int64_t>(vocab) * hidden;
  p.lm_head = tied_embeddings ? 0 : p.embedding;
  p.attention = attention_params_per_layer() * layers;
  p.dense_ffn = 3LL * hidden * intermediate * dense_ffn_layers();
  if (moe) {
    p.routed_experts = expert_params() * moe->experts * moe_layers();
    p.shared_experts = expert_params() * moe->shared_experts * moe_layers();
    p.router = static_cast<std::int64_t>(hidden) * moe->experts * moe_layers();
  }
  // Two RMSNorms per layer plus the final one (MLA adds q/kv latent norms).
  p.norms = static_cast<std::int64_t>(hidden) * (2LL * layers + 1);
  if (mla) p.norms += static_cast<std::int64_t>(mla->q_lora_rank + mla->kv_lora_rank) * layers;
  return p;
}

std::vector<LinearShape> ModelArch::linear_shapes() const {
  std::vector<LinearShape> v;
  const std::int64_t h = hidden, L = layers;
  if (mla) {
    const std::int64_t qk_head = mla->qk_nope_head_dim + mla->qk_rope_head_dim;
    if (mla->q_lora_rank > 0) {
      v.push_back({"q_a_proj", LinearKind::kAttention, mla->q_lora_rank, h, L});
      v.push_back({"q_b_proj", LinearKind::kAttention, heads * qk_head, mla->q_lora_rank, L});
    } else {
      v.push_back({"q_proj", LinearKind::kAttention, heads * qk_head, h, L});
    }
    v.push_back({"kv_a_proj_with_mqa", LinearKind::kAttention, mla->kv_lora_rank + mla->qk_rope_head_dim, h, L});
    v.push_back({"kv_b_proj", LinearKind::kAttention,
                 static_cast<std::int64_t>(heads) * (mla->qk_nope_head_dim + mla->v_head_dim), mla->kv_lora_rank, L});
    v.push_back({"o_proj", LinearKind::kAttention, h, static_cast<std::int64_t>(heads) * mla->v_head_dim, L});
  } else {
    v.push_back({"q_proj", LinearKind::kAttention, static_cast<std::int64_t>(heads) * head_dim, h, L});
    v.push_back({"k_proj", LinearKind::kAttention, static_cast<std::int64_t>(kv_heads) * head_dim, h, L});
    v.push_back({"v_proj", LinearKind::kAttention, static_cast<std::int64_t>(kv_heads) * head_dim, h, L});
    v.push_back({"o_proj", LinearKind::kAttention, h, static_cast<std::int64_t>(heads) * head_dim, L});
  }
  const std::int64_t dl = dense_ffn_layers();
  if (dl > 0) {
    v.push_back({"gate_proj", LinearKind::kDenseFfn, intermediate, h, dl});
    v.push_back({"up_proj", LinearKind::kDenseFfn, intermediate, h, dl});
    v.push_back({"down_proj", LinearKind::kDenseFfn, h, intermediate, dl});
  }
  if (moe) {
    const std::int64_t ml = moe_layers();
    const std::int64_t e = moe->expert_intermediate;
    v.push_back({"experts.gate_proj", LinearKind::kRoutedExpert, e, h, ml * moe->experts});
    v.push_back({"experts.up_proj", LinearKind::kRoutedExpert, e, h, ml * moe->experts});
    v.push_back({"experts.down_proj", LinearKind::kRoutedExpert, h, e, ml * moe->experts});
    if (moe->shared_experts > 0) {
      v.push_back({"shared_experts.gate_proj", LinearKind::kSharedExpert, e, h, ml * moe->shared_experts});
      v.push_back({"shared_experts.up_proj", LinearKind::kSharedExpert, e, h, ml * moe->shared_experts});
      v.push_back({"shared_experts.down_proj", LinearKind::kSharedExpert, h, e, ml * moe->shared_experts});
    }
    v.push_back({"router", LinearKind::kRouter, moe->experts, h, ml});
  }
  v.push_back({"lm_head", LinearKind::kLmHead, vocab, h, 1});
  return v;
}

std::int64_t ModelArch::active_params() const {
  const ParamCounts p = params();
  std::int64_t inactive = 0;
  if (moe) inactive = expert_params() * (moe->experts - moe->active) * moe_layers();
  return p.total() - inactive;
}

std::int64_t ModelArch::active_matmul_params() const {
  const ParamCounts p = params();
  const std::int64_t head = tied_embeddings ? p.embedding : p.lm_head;
  std::int64_t experts = 0;
  if (moe) experts = expert_params() * moe->active * moe_layers();
  return p.attention + p.dense_ffn + experts + p.shared_experts + p.router + head;
}

std::int64_t ModelArch::kv_elements_per_token() const {
  if (mla) return static_cast<std::int64_t>(mla->kv_lora_rank + mla->qk_rope_head_dim) * layers;
  return 2LL * kv_heads * head_dim * layers;
}

double ModelArch::attention_flops_per_token(double context) const {
  double qk = head_dim, v = head_dim;
  if (mla) {
    qk = mla->qk_nope_head_dim + mla->qk_rope_head_dim;
    v = mla->v_head_dim;
  }
  return 2.0 * heads * (qk + v) * context * layers;
}

double ModelArch::causal_attention_flops(double length) const {
  return attention_flops_per_token(1.0) * length * (length + 1.0) / 2.0;
}

}  // namespace rlsim::models
