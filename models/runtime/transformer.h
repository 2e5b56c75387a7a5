// The transformer forward of the real runtime, in every precision of a recipe: the trainer path
// (prefill: all positions' logits at once, the packed GEMM of gemm.h) and the rollout path
// (incremental decode with a KV cache, the GEMV kernels of kernels.h).
#pragma once

#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "models/precision/recipe.h"
#include "models/runtime/kernels.h"
#include "models/runtime/model.h"
#include "models/runtime/weight_lifecycle.h"

namespace rlsim::models {

/// What precision the runtime computes in: "fp32" (the numerical reference: nothing rounded) or a
/// recipe (built-in name or a Recipe from a scenario).
struct RuntimePrecision {
  std::string name = "fp32";
  std::optional<Recipe> recipe;  // nullopt: fp32
};

/// RoPE inverse frequencies [head_dim / 2]: 1 / theta^(2j / head_dim) in FP32, as llama2.c run.c and
/// Hugging Face LlamaRotaryEmbedding compute them (shared by the runtime and the trainer, so both
/// rotate alike).
std::vector<float> rope_inv_freq(const TransformerConfig& c);

/// "fp32" or a built-in recipe name; throws std::invalid_argument listing the valid names.
RuntimePrecision runtime_precision(std::string_view name);

/// Which kernels compute the linears and attention.
///  - kDefault: as real stacks do, prefill (several tokens) runs the GEMM of gemm.h (BF16 dot
///    products with block scales applied per block) and Eigen attention products whose blocking
///    depends on the number of tokens, decode (one token) the GEMV kernels: the trainer and
///    rollout paths sum in different orders.
///  - kBatchInvariant: every linear runs the packed kernels with a per-token reduction order
///    that does not depend on how many tokens share the call (PackedWeight::gemm_rows);
///    attention sums each query's scores and outputs in one fixed order; activation scales that
///    a format computes over the whole tensor (per-tensor FP8, NVFP4's tensor scale) are computed
///    per token, as a one-token decode computes them. With identical recipes, prefill and
///    decode then give bit-identical logits at every position (the deterministic-RL condition;
///    He et al., "Defeating Nondeterminism in LLM Inference", Thinking Machines Lab 2025).
enum class KernelMode { kDefault, kBatchInvariant };

/// "default" or "batch-invariant".
std::string_view kernel_mode_name(KernelMode m);

/// A model instantiated in one precision.
///
/// Numerics (emulated value for value; the quantisers are bit-exact, models/precision):
/// - every linear (q/k/v/o, gate/up/down) has its weight quantised once to the recipe's
///   linear.weight format and its input quantised per call to linear.activation (per token rows:
///   token, group1xN, mx32, nv16 scales are row-local except NVFP4's tensor scale), products
///   accumulated in FP32; bf16 means bf16-rounded inputs and weights with FP32 accumulation;
/// - lm_head uses recipe.lm_head, the embedding table recipe.embedding (stored in that format and
///   decoded row by row);
/// - the residual stream and norm outputs are rounded to Recipe::hidden_element() (bf16 for every
///   built-in but fp16); RMSNorm, RoPE and softmax compute in FP32 and the softmax output is
///   rounded to recipe.softmax;
/// - attention operands (q, k, v and the probabilities) are rounded to recipe.attention;
/// - the KV cache stores keys and values in recipe.kv_cache: a per-tensor format is static-scaled
///   with scale 1 (vLLM's default k_scale = v_scale = 1.0 when no calibration is loaded), other
///   scalings per token.
/// The prefill and decode paths perform the same roundings, so they differ only by FP32
/// rounding: projections of more than one token run the prefill GEMM of gemm.h, projections of
/// one token (decode) the GEMV kernels of kernels.h, both on the weights in their storage format
/// and with the same products (the GEMM applies block scales to each block's sum; the INT4
/// decode GEMV sums each 32-column chunk's products exactly in integers, PackedWeight::gemv_rows).
///
/// MoE layers (config.experts > 0): the router is a linear in recipe.router (FP32 logits), a
/// softmax over the experts in FP32, the top experts_per_token (lowest index on ties) with their
/// probabilities renormalised; each expert is a SwiGLU FFN whose fused gate/up (w13) and down (w2)
/// weights are in recipe.linear and always run the packed kernels (tokens grouped per expert, so
/// prefill and decode sum alike); the outputs are added in the order of the token's expert ranks.
///
/// Weights follow the reload lifecycle of weight_lifecycle.h: the constructor loads the master
/// weights and processes them (a fresh load); restore_weights_for_loading(), load_weights() and
/// process_weights_after_loading() reload them in place. A forward pass on weights not all
/// transformed throws WeightStateError.
///
/// Weight bytes read per decoded token: decode_weight_bytes().
class Transformer {
 public:
  Transformer(const ModelWeights& weights, const RuntimePrecision& precision, KernelMode kernels = KernelMode::kDefault);

  const TransformerConfig& config() const { return config_; }
  const std::string& precision_name() const { return precision_name_; }
  KernelMode kernels() const { return kernels_; }

  /// Trainer path: logits [T, vocab] of positions 0..T-1 for `tokens` (a fresh context).
  /// Throws std::invalid_argument when T exceeds max_seq or a token is outside the vocabulary.
  MatrixRM prefill(std::span<const int> tokens) const;

  /// Rollout path: feeds `token` at the next position of the KV cache and returns its logits
  /// [vocab] (valid until the next call). Throws std::invalid_argument past max_seq.
  std::span<const float> decode(int token);
  /// Rollout path, prompt prefill: feeds `tokens` at the next positions of the KV cache in one
  /// pass (as an inference engine prefills a prompt) and returns the logits [vocab] of the last
  /// one (valid until the next call). Throws std::invalid_argument past max_seq, for an empty
  /// span or a token outside the vocabulary.
  std::span<const float> extend(std::span<const int> tokens);
  /// Empties the KV cache (next decode is position 0).
  void reset() { pos_ = 0; }
  int position() const { return pos_; }

  /// Bytes of weights one decode step reads in their storage formats: every linear of every layer,
  /// the lm_head, and one embedding row (as FP32); for MoE layers the router and
  /// experts_per_token experts (one token's). The numerator of the decode roofline.
  std::size_t decode_weight_bytes() const;
  /// Bytes of the KV cache one decode step reads per cached position (keys and values of every
  /// layer, as this runtime stores them: FP32 values rounded to recipe.kv_cache).
  std::size_t kv_cache_bytes_per_position() const;

  /// Weight memory of the quantised tensors (every linear, the lm_head, the embedding table and
  /// the routed experts): `resident` as allocated (PackedWeight::resident_bytes: codes and
  /// scales, tile padding included), `packed` the tensors in their formats
  /// (PackedWeight::packed_bytes). No other copy of a weight is kept.
  struct WeightMemory {
    std::size_t resident = 0, packed = 0;
  };
  WeightMemory weight_memory() const;

  // --- Reload lifecycle (weight_lifecycle.h), over every linear and expert group -------------
  /// Restores every quantised tensor to the loader layout (no-op for those already there).
  ReloadStats restore_weights_for_loading();
  /// The loader's copy of new master weights: every layer (load_layer), the embedding (rounded to
  /// recipe.embedding), the final norm and the lm_head. Throws std::invalid_argument when a
  /// tensor's shape differs from the engine's, WeightStateError when a tensor is transformed.
  ReloadStats load_weights(const ModelWeights& master);
  /// The loader's copy of one layer's weights (norms, biases, linears or router and experts).
  ReloadStats load_layer(int layer, const LayerWeights& w);
  /// Quantises what was loaded and transforms every tensor to its kernel layout.
  ReloadStats process_weights_after_loading();
  /// Whether every tensor is transformed (a forward pass is allowed).
  bool weights_ready() const;
  /// Addresses of every kernel-layout buffer (codes, scales, dense copies, in a fixed order).
  std::vector<const void*> weight_buffers() const;

 private:
  struct Linear {
    // [out, in]: packed() the storage format (the GEMV kernels), dense() its values (the Eigen
    // GEMM of a multi-token default-mode pass).
    QuantizedLinear weight;
    VectorF bias;       // empty when none
    Format activation;  // applied to the input per call
  };
  struct Layer {
    VectorF attn_norm, ffn_norm, q_norm, k_norm;
    Linear q, k, v, o, gate, up, down;  // gate / up / down: dense FFN only
    Linear router;                      // MoE only
    QuantizedExpertGroup experts;       // MoE only
    Format expert_activation{Element::kFp32, {}};
  };

  /// The MoE FFN of x [T, dim] (normed) into out [T, dim].
  void moe(const Layer& l, const MatrixRM& x, MatrixRM& out) const;
  void check_ready() const;
  std::vector<Linear*> all_linears();

  MatrixRM linear(const Linear& l, const MatrixRM& x) const;
  /// Several linears on one input (q/k/v, gate/up): one activation rounding per format, one
  /// parallel region for the batch-1 GEMVs.
  void linears(std::initializer_list<std::pair<const Linear*, MatrixRM*>> outs, const MatrixRM& x) const;
  void round_hidden(MatrixRM& x) const;
  void rmsnorm(MatrixRM& x, const VectorF& w) const;  // in place, per row
  /// cos and sin of every RoPE frequency at positions first_pos.. first_pos + rows - 1:
  /// [rows][head_dim / 2][cos, sin].
  std::vector<float> rope_table(int first_pos, Eigen::Index rows) const;
  void rope(MatrixRM& x, int heads, const std::vector<float>& table) const;  // in place, rows are positions
  void store_kv(MatrixRM& kv) const;                                         // round to the KV-cache format
  /// Self-attention of layer l on xb [T, dim] (normed) at positions first_pos..: q, k, v, their
  /// norms and RoPE (rope_cs: rope_table(first_pos, T)), k and v rounded to the KV-cache format
  /// into rows first_pos.. of kc and vc [max_seq, kv_dim], causal attention over the caches into
  /// out [T, heads * head_dim] (before the output projection).
  void attention_block(const Layer& l, const MatrixRM& xb, int first_pos, const std::vector<float>& rope_cs, MatrixRM& kc,
                       MatrixRM& vc, MatrixRM& out) const;
  /// The FFN of layer l on xb [T, dim] (normed) into d [T, dim]: SwiGLU, or the MoE block.
  void feed_forward(const Layer& l, const MatrixRM& xb, MatrixRM& d) const;
  /// Logits of every row of x, or of the last row only when `last_only`.
  MatrixRM forward_layers(MatrixRM x, int first_pos, MatrixRM* k_cache, MatrixRM* v_cache, bool last_only = false) const;
  /// Batch-invariant attention of queries q [T, heads * head_dim] at positions first_pos.. over
  /// the caches, into out [T, heads * head_dim].
  void attention_fixed_order(const MatrixRM& q, const MatrixRM& kc, const MatrixRM& vc, int first_pos, MatrixRM& out) const;
  MatrixRM embed(std::span<const int> tokens) const;          // rows of the embedding; checks the ids
  void round_activation(MatrixRM& x, const Format& f) const;  // per tensor, or per row when batch-invariant

  TransformerConfig config_;
  std::string precision_name_;
  std::optional<Recipe> recipe_;
  KernelMode kernels_ = KernelMode::kDefault;
  Element hidden_ = Element::kFp32, attention_ = Element::kFp32, softmax_ = Element::kFp32;
  Format kv_{Element::kFp32, {}};
  Linear embedding_;  // [vocab, dim] in recipe.embedding: rows looked up by embed(), never multiplied
  std::vector<Layer> layers_;
  VectorF final_norm_;
  Linear head_;
  std::vector<float> inv_freq_;  // RoPE inverse frequencies [head_dim / 2]
  // Decode state: per layer K and V caches [max_seq, kv_dim].
  std::vector<MatrixRM> k_cache_, v_cache_;
  int pos_ = 0;
  std::vector<float> logits_;
  bool ready_ = false;  // every tensor transformed
};

/// Seeded sampling: temperature 0 is greedy (arg max, lowest index on ties); otherwise softmax of
/// logits / temperature, restricted to the smallest set of most likely tokens whose probability
/// reaches top_p (1: no restriction), drawn with `uniform` in [0, 1).
int sample_token(std::span<const float> logits, double temperature, double top_p, double uniform);

/// Rounds x in place to `f`'s values as a [rows, cols] tensor (rows independent where the scaling
/// is row-local). fp32 is a no-op; bf16 / fp16 round each value; a per-tensor scaling is applied
/// with a static scale of 1 when `static_tensor_scale`.
void round_to_format(float* x, std::int64_t rows, std::int64_t cols, const Format& f, bool static_tensor_scale = false);

/// Whether round_to_format() rounds each row of a tensor from that row alone (unscaled, token,
/// group1xN, groupN, mx32 scalings, and a per-tensor one with a static scale), so that rows can be
/// split among threads.
bool rows_round_independently(const Format& f, bool static_tensor_scale = false);

}  // namespace rlsim::models
