// Footprint: the bytes a model's tensors take in a precision recipe, for the simulator's cost
// model (memory, bytes moved by kernels and collectives). Every width comes from the recipe's
// formats through the trait table (Format::bytes, scale overhead included), so the cost model
// holds no byte-width literal of its own (DESIGN.md: one recipe consumed by the cost model, the
// graph and the runtime).
#pragma once

#include <cstdint>

#include "models/llm/arch.h"
#include "models/precision/recipe.h"

namespace rlsim::models {

/// Bytes of one value of an unscaled element (BF16: 2, FP32: 4).
double element_bytes(Element e);

/// Bytes per value of format `f` for a long tensor of `cols` values per row, scale overhead
/// included and per-tensor constants left out: the marginal cost of one more row, averaged over
/// many rows (so block scales of M rows are amortised). Unscaled formats: element_bytes.
double bytes_per_value(const Format& f, std::int64_t cols);

/// Bytes of all weights of `arch` stored in `recipe`'s formats: each linear matrix through
/// Format::bytes (scale overhead included), the embedding in the recipe's embedding format, the
/// norms in the hidden element. `kinds_mask` selects linear kinds (bit i = LinearKind i); the
/// embedding and norms are included only when `with_embedding_and_norms`.
double weight_bytes(const ModelArch& arch, const Recipe& recipe, unsigned kinds_mask = ~0u, bool with_embedding_and_norms = true);

/// Bytes of the KV cache per token over all layers, in the recipe's kv_cache format with its
/// scales (a per-token or per-group scale adds to every token; a per-tensor one is amortised).
double kv_bytes_per_token(const ModelArch& arch, const Recipe& recipe);

/// Bytes of one token's hidden state (residual stream, TP all-reduce payload, MoE combine) in
/// the recipe's hidden element.
double hidden_bytes_per_token(const ModelArch& arch, const Recipe& recipe);

/// Per-parameter widths of the training side's tensor classes (Recipe::gradient, sync,
/// reference, master_weights), in bytes.
struct ParamWidths {
  double master = 0;     // the weights the optimizer updates
  double gradient = 0;   // gradients and their reduce-scatter / all-reduce
  double sync = 0;       // weights as gathered (FSDP all-gather) and synced to the rollout engines
  double reference = 0;  // the reference model's weights
};
ParamWidths param_widths(const Recipe& recipe);

}  // namespace rlsim::models
