#include "models/precision/footprint.h"

namespace rlsim::models {

namespace {
unsigned bit(LinearKind k) { return 1u << static_cast<unsigned>(k); }

const LinearPrecision& precision_of(const Recipe& r, LinearKind k) {
  switch (k) {
    case LinearKind::kRouter:
      return r.router;
    case LinearKind::kLmHead:
      return r.lm_head;
    default:
      return r.linear;
  }
}

// Rows over which bytes_per_value averages the marginal cost of a row: a multiple of every block
// height the scalings allow (128 and below), large enough that nothing else matters.
constexpr std::int64_t kRowsLow = 1 << 16, kRowsHigh = 1 << 17;
// Row width at which per-parameter widths of the training tensors are taken (a group or block
// scale along rows of this width is amortised as it is over a hidden dimension of 4096).
constexpr std::int64_t kTypicalRow = 4096;
}  // namespace

double element_bytes(Element e) { return traits(e).bits / 8.0; }

double bytes_per_value(const Format& f, std::int64_t cols) {
  const double marginal = f.bytes(kRowsHigh, cols) - f.bytes(kRowsLow, cols);
  return marginal / static_cast<double>(kRowsHigh - kRowsLow) / static_cast<double>(cols);
}

double weight_bytes(const ModelArch& arch, const Recipe& recipe, unsigned kinds_mask, bool with_embedding_and_norms) {
  double bytes = 0;
  for (const auto& l : arch.linear_shapes()) {
    if (!(kinds_mask & bit(l.kind))) continue;
    if (l.kind == LinearKind::kLmHead && arch.tied_embeddings && with_embedding_and_norms) continue;  // stored once
    bytes += static_cast<double>(l.count) * precision_of(recipe, l.kind).weight.bytes(l.out, l.in);
  }
  if (with_embedding_and_norms) {
    bytes += recipe.embedding.bytes(arch.vocab, arch.hidden);
    bytes += static_cast<double>(arch.params().norms) * element_bytes(recipe.hidden_element());
  }
  return bytes;
}

double kv_bytes_per_token(const ModelArch& arch, const Recipe& recipe) {
  // One row per token and layer: K and V of every KV head (GQA), or the MLA latent.
  const std::int64_t per_layer = arch.kv_elements_per_token() / arch.layers;
  return static_cast<double>(arch.kv_elements_per_token()) * bytes_per_value(recipe.kv_cache, per_layer);
}

double hidden_bytes_per_token(const ModelArch& arch, const Recipe& recipe) {
  return arch.hidden * element_bytes(recipe.hidden_element());
}

ParamWidths param_widths(const Recipe& recipe) {
  return {element_bytes(recipe.master_weights), bytes_per_value(recipe.gradient, kTypicalRow),
          bytes_per_value(recipe.sync, kTypicalRow), bytes_per_value(recipe.reference, kTypicalRow)};
}

}  // namespace rlsim::models
