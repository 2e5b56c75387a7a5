// Builds the precision-flow graph of a transformer (llm catalog entry: dense or MoE, GQA or MLA)
// under a precision recipe: the training graph (forward + backward) or the rollout engine's
// inference graph (forward + KV cache).
#pragma once

#include "models/graph/graph.h"
#include "models/llm/arch.h"
#include "models/precision/recipe.h"

namespace rlsim::models {

enum class GraphSide : std::uint8_t { kTraining, kInference };

struct GraphOptions {
  bool backward = true;  // training side: add dgrad / wgrad vertices and gradient edges
};

/// The operator graph of one pass of `arch` under `recipe`.
///
/// Vertices (names follow Hugging Face module paths, "layers.{i}." prefixed):
/// embed_tokens; per layer input_layernorm, self_attn.{q,k,v}_proj (MLA: q_a_proj, q_a_layernorm,
/// q_b_proj or q_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj), self_attn.{q,k}_rope,
/// self_attn.scores, self_attn.softmax, self_attn.attn_value, self_attn.o_proj, attn_residual,
/// post_attention_layernorm, then mlp.{gate,up,down}_proj + mlp.act_fn (dense) or mlp.gate
/// (router), mlp.topk, mlp.experts.{e}.{gate,up,down}_proj + act_fn, mlp.shared_experts.*,
/// mlp.combine (MoE), and mlp_residual; then norm, lm_head, log_softmax. Every weight is a
/// kParameter vertex "<operator>.weight" (a tied lm_head reads embed_tokens.weight).
///
/// Edge precision (the values the consumer sees):
/// - linear, expert_linear, router, lm_head: weight = the recipe's LinearPrecision weight format,
///   input = its activation format (quantised dynamically by the consumer); mode = recipe mode for
///   a quantised format (fake: stored in BF16), compute = LinearPrecision::compute, accumulate;
/// - attention scores / attention-value operands: the recipe's attention element; softmax input:
///   its softmax element; router logits and routing weights: the router's accumulate type (FP32,
///   as DeepSeek-V3 and Megatron route); lm_head logits into log_softmax: lm_head accumulate;
/// - everything else (residual stream, norms, rope, SwiGLU): the hidden element,
///   Recipe::hidden_element().
///
/// Inference side: each tensor the KV cache holds (GQA: roped key and value; MLA: the normalised
/// latent and the roped key, as vLLM / SGLang cache them) goes producer -> kv_write ->
/// kv_read -> consumer; the write->read edge carries recipe.kv_cache (the caller applies a
/// scenario's rollout.kv_cache override to the recipe).
///
/// Training side with `backward`: per forward operator a dgrad vertex ("<name>.dgrad"), per
/// linear-like operator also a wgrad vertex; gradient edges mirror the forward activation edges.
/// Gradients into GEMMs are in the linear activation format for a real-quantised recipe (DeepSeek-
/// V3 sec. 3.3 quantises dgrad / wgrad inputs 1x128 too; Jet-RL runs the backward in FP8) and in
/// the hidden element otherwise (BF16, or the straight-through estimator of QAT); weight gradients
/// are FP32. Backward vertices never match an inference vertex; they are there for the DOT view and
/// for graphs imported from training frameworks.
///
/// The graph's GraphInfo names builder "rlsim", the model, the recipe and the side.
PrecisionGraph build_precision_graph(const ModelArch& arch, const Recipe& recipe, GraphSide side,
                                     const GraphOptions& options = {});

}  // namespace rlsim::models
