// Precision recipes: per operator class, what numbers flow. One Recipe is consumed by the cost
// model (bytes moved, tensor-core rate), the precision-flow graph (edge attributes) and the real
// runtime (which quantiser / kernel each layer runs). See DESIGN.md, "The precision recipe".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "models/precision/format.h"

namespace rlsim::models {

/// Quantisation is real (packed codes, low-precision kernels) or fake (quantise-dequantise in
/// BF16, as in quantisation-aware training with a straight-through estimator).
enum class QuantMode : std::uint8_t { kReal, kFake };

/// Precision of one class of linear layer (weights stored [out, in]).
struct LinearPrecision {
  Format weight;
  Format activation;
  Element accumulate = Element::kFp32;
  bool operator==(const LinearPrecision&) const = default;

  /// The GEMM's tensor-core type before device fallback (see gemm_compute()). Fake quantisation
  /// computes on BF16 whatever the element format (quantise-dequantise keeps BF16 operands).
  ComputeType compute(QuantMode mode) const;
};

/// A complete precision recipe.
struct Recipe {
  std::string name;
  LinearPrecision linear;  // attention projections, dense FFN and expert linears
  LinearPrecision lm_head;
  LinearPrecision router;              // MoE router (gate) linear
  Element attention = Element::kBf16;  // QK^T and PV operand type
  Element softmax = Element::kFp32;
  Format kv_cache{Element::kBf16, {}};
  Format embedding{Element::kBf16, {}};
  QuantMode mode = QuantMode::kReal;
  Element master_weights = Element::kBf16;  // what the trainer keeps and updates (QAT: BF16)
  // Training-side tensor classes the cost model sizes (models/precision/footprint.h):
  Format gradient{Element::kFp32, {}};   // gradients, their reduce-scatter and all-reduce. Default: FP32
  Format sync{Element::kBf16, {}};       // weights as gathered (FSDP) and sent to the rollout engines. Default: BF16
  Format reference{Element::kBf16, {}};  // the reference (KL) model's weights. Default: BF16
  std::string source;                    // where the recipe comes from (paper / framework)
  bool operator==(const Recipe&) const = default;

  /// Whether activations of the linears are quantised dynamically at run time (costs a pass).
  bool dynamic_activation_quant() const;

  /// Whether every weight matrix (linears, lm_head, router) and the embedding are stored in
  /// format `f`: a trainer syncing weights in `f` hands them over unconverted exactly then.
  bool stores_weights_as(const Format& f) const;

  /// The element the residual stream, norm outputs and other non-GEMM tensors travel in: the
  /// embedding's element when it is an unscaled float of 16 or 32 bits (bf16 in every built-in
  /// recipe, fp16 in `fp16`), else bf16. Read by the precision-flow graph and the runtime.
  Element hidden_element() const;
};

/// The built-in recipes of DESIGN.md, in a stable order.
const std::vector<Recipe>& builtin_recipes();

/// Looks up a built-in recipe; throws std::invalid_argument listing valid names when unknown.
const Recipe& builtin_recipe(std::string_view name);

/// Comma-separated built-in names.
std::string recipe_names();

}  // namespace rlsim::models
