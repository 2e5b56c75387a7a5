#include "models/precision/recipe.h"

#include <stdexcept>

namespace rlsim::models {
namespace {

// The built-in recipes of DESIGN.md, one row each. Formats are written as in scenario files and
// parsed at first use; lm_head and the MoE router share the `head` format (every built-in keeps them
// in BF16, as verl, slime and Jet-RL do); `wide` is the element of attention operands, KV cache
// and embedding.
struct RecipeRow {
  std::string_view name;
  std::string_view weight;      // linear weights
  std::string_view activation;  // linear activations
  std::string_view head;        // lm_head and router, weights and activations
  std::string_view wide;        // attention operands, KV cache, embedding
  QuantMode mode;
  std::string_view master;  // master weights the trainer keeps
  std::string_view source;
};

constexpr RecipeRow kRecipeTable[] = {
    {"bf16", "bf16", "bf16", "bf16", "bf16", QuantMode::kReal, "bf16", "BF16 baseline"},
    {"fp16", "fp16", "fp16", "fp16", "fp16", QuantMode::kReal, "fp32", "FP16 baseline"},
    {"fp8-tensor", "fp8-e4m3/tensor", "fp8-e4m3/token", "bf16", "bf16", QuantMode::kReal, "bf16",
     "vLLM fp8 (per-tensor weight, per-token dynamic activation)"},
    {"fp8-block", "fp8-e4m3/block128x128", "fp8-e4m3/group1x128", "bf16", "bf16", QuantMode::kReal, "bf16",
     "DeepSeek-V3 sec. 3.3; Jet-RL arXiv 2601.14243; verl docs/advance/fp8.md"},
    {"mxfp8", "mxfp8", "mxfp8", "bf16", "bf16", QuantMode::kReal, "bf16", "OCP MX v1.0; vllm-ascend MXFP8 (Ascend 950)"},
    {"int4-w4a16-g32", "int4/group32", "bf16", "bf16", "bf16", QuantMode::kReal, "bf16",
     "slime INT4 QAT (LMSYS blog, Jan 2026); Kimi-K2"},
    {"int4-w4a16-g128", "int4/group128", "bf16", "bf16", "bf16", QuantMode::kReal, "bf16",
     "W4A16 group-128 (GPTQ/AWQ-style recipe used by SGLang)"},
    {"nvfp4", "nvfp4", "nvfp4", "bf16", "bf16", QuantMode::kReal, "bf16", "NVIDIA NVFP4 (Blackwell)"},
    {"mxfp4", "mxfp4", "mxfp4", "bf16", "bf16", QuantMode::kReal, "bf16", "OCP MX v1.0 MXFP4"},
    {"hif8", "hif8/tensor", "hif8/token", "bf16", "bf16", QuantMode::kReal, "bf16", "HiFloat8 arXiv 2409.16626 (Ascend)"},
    {"hif4", "hif4", "hif4", "bf16", "bf16", QuantMode::kReal, "bf16",
     "HiFloat4 arXiv 2602.11287 (W4A4 inference; Ascend 950 HiF4)"},
    {"int4-qat-g32", "int4/group32", "bf16", "bf16", "bf16", QuantMode::kFake, "bf16",
     "slime INT4 QAT: BF16 master weights, fake-quantised forward, straight-through backward"},
};

std::vector<Recipe> build() {
  std::vector<Recipe> v;
  for (const RecipeRow& row : kRecipeTable) {
    Recipe r;
    r.name = std::string(row.name);
    r.linear = {parse_format(row.weight), parse_format(row.activation), Element::kFp32};
    r.lm_head = {parse_format(row.head), parse_format(row.head), Element::kFp32};
    r.router = r.lm_head;
    const Format wide = parse_format(row.wide);
    r.attention = wide.element;
    r.kv_cache = wide;
    r.embedding = wide;
    r.mode = row.mode;
    r.master_weights = *parse_element(row.master);
    r.source = std::string(row.source);
    v.push_back(std::move(r));
  }
  return v;
}

}  // namespace

ComputeType LinearPrecision::compute(QuantMode mode) const {
  if (mode == QuantMode::kFake) return ComputeType::kBf16;
  return gemm_compute(weight, activation);
}

bool Recipe::dynamic_activation_quant() const { return linear.activation.quantised(); }

bool Recipe::stores_weights_as(const Format& f) const {
  return linear.weight == f && lm_head.weight == f && router.weight == f && embedding == f;
}

Element Recipe::hidden_element() const {
  const Format& e = embedding;
  if (e.scaling.kind == ScaleKind::kNone && traits(e.element).is_float && traits(e.element).bits >= 16) return e.element;
  return Element::kBf16;
}

const std::vector<Recipe>& builtin_recipes() {
  static const std::vector<Recipe> recipes = build();
  return recipes;
}

std::string recipe_names() {
  std::string out;
  for (const auto& r : builtin_recipes()) {
    if (!out.empty()) out += ", ";
    out += r.name;
  }
  return out;
}

const Recipe& builtin_recipe(std::string_view name) {
  for (const auto& r : builtin_recipes()) {
    if (r.name == name) return r;
  }
  throw std::invalid_argument("unknown recipe '" + std::string(name) + "' (expected one of: " + recipe_names() + ")");
}

}  // namespace rlsim::models
