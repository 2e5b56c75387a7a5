// Training in the runtime: the forward and backward pass of the Llama architecture the runtime
// runs (embedding, RMSNorm, RoPE attention with grouped KV heads, SwiGLU, tied or untied
// classifier) over one sequence at a time, in the style of llm.c (explicit forward and backward
// per layer, activations kept from the forward for the backward), and AdamW on FP32 master
// weights with global-norm gradient clipping.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "models/precision/recipe.h"
#include "models/runtime/model.h"

namespace rlsim::models {

/// Parameters (or their gradients) of a dense Llama model in scalar type S, shaped as ModelWeights:
/// linears [out, in], norms [dim].
template <typename S>
struct Params {
  using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Vec = Eigen::Matrix<S, Eigen::Dynamic, 1>;
  struct Layer {
    Vec attn_norm, ffn_norm;
    Mat wq, wk, wv, wo, w_gate, w_up, w_down;
  };
  Mat embedding;  // [vocab, dim]
  std::vector<Layer> layers;
  Vec final_norm;
  Mat lm_head;  // [vocab, dim]; empty when tied

  /// Every tensor in a fixed order (embedding, per layer attn_norm, wq, wk, wv, wo, ffn_norm,
  /// w_gate, w_up, w_down, then final_norm, lm_head): for optimizers and tests.
  std::vector<Eigen::Map<Vec>> tensors();
  /// Zero tensors of the same shapes.
  Params zeros_like() const;
};

/// The trainable model. `precision` sets the training forward: nullopt is FP32; a recipe
/// fake-quantises (quantise-dequantise, round_to_format) the weights of every linear to
/// recipe.linear.weight (lm_head: recipe.lm_head.weight) once per forward and each linear's input
/// to its activation format per call, with a straight-through estimator in the backward (the
/// gradient passes the rounding unchanged), as QAT does. The residual stream, attention and
/// softmax stay FP32 (a recipe's hidden / attention / softmax roundings are the rollout runtime's,
/// not this trainer's). S = double is for gradient checks and takes only the FP32 forward.
///
/// Supported: the dense Llama configs of TransformerConfig without qkv_bias, qk_norm or experts;
/// the constructor throws std::invalid_argument otherwise.
template <typename S>
class TrainableModel {
 public:
  using Mat = typename Params<S>::Mat;
  using Vec = typename Params<S>::Vec;

  TrainableModel(const ModelWeights& init, std::optional<Recipe> precision = std::nullopt);
  ~TrainableModel();
  TrainableModel(TrainableModel&&) noexcept;
  TrainableModel& operator=(TrainableModel&&) noexcept;

  /// What a forward pass of `tokens` (T >= 2, at most max_seq) gives: for t in [0, T-2], the
  /// log-probability of tokens[t+1] after tokens[0..t] and the entropy (nats) of that
  /// distribution, at temperature `temperature` (> 0).
  struct Pass {
    std::vector<double> logp;
    std::vector<double> entropy;
  };
  /// Forward pass; keeps the activations for backward(). Throws std::invalid_argument for a
  /// token outside the vocabulary or a bad length.
  Pass forward(std::span<const int> tokens, double temperature = 1.0);
  /// Backward pass of the last forward(): adds to grads() the gradient of sum_t dlogp[t] *
  /// logp[t] (dlogp has T-1 entries; a position with 0 contributes nothing).
  void backward(std::span<const double> dlogp);

  Params<S>& params() { return p_; }
  const Params<S>& params() const { return p_; }
  Params<S>& grads() { return g_; }
  void zero_grads();
  /// The parameters as FP32 ModelWeights (what the rollout engine loads).
  ModelWeights weights() const;
  const TransformerConfig& config() const { return c_; }

 private:
  struct Saved;  // activations of the last forward
  void quantise_weights();
  void round_input(Mat& x, const Format& f) const;
  TransformerConfig c_;
  std::optional<Recipe> recipe_;
  Params<S> p_, g_;
  Params<S> w_;  // the weights the forward uses (fake-quantised copies when a recipe says so)
  std::vector<S> inv_freq_;
  std::unique_ptr<Saved> saved_;
};

/// AdamW (Loshchilov and Hutter 2019) on FP32 master weights: m, v moments with bias correction,
/// decoupled weight decay on matrices only (not norms), after clipping the global gradient norm to
/// `clip` (<= 0: no clipping).
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.0;
  double clip = 1.0;
};

class AdamW {
 public:
  explicit AdamW(AdamWOptions o) : o_(o) {}
  /// One update of `p` from `g` (the gradient to descend); returns the gradient norm before
  /// clipping.
  double step(Params<float>& p, Params<float>& g);

 private:
  AdamWOptions o_;
  std::optional<Params<float>> m_, v_;
  std::int64_t t_ = 0;
};

}  // namespace rlsim::models
