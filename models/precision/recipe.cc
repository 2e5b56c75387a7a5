#include "models/precision/recipe.h"

#include <stdexcept>

namespace rlsim::models {
namespace {

const Format kBf16{Element::kBf16, {}};
const Format kFp16{Element::kFp16, {}};
const LinearPrecision kBf16Linear{kBf16, kBf16, Element::kFp32};

Format fmt(std::string_view s) { return parse_format(s); }

Recipe make(std::string name, LinearPrecision linear, std::string source) {
  Recipe r;
  r.name = std::move(name);
  r.linear = linear;
  r.lm_head = kBf16Linear;   // every built-in keeps lm_head and router in BF16 (verl, slime, Jet-RL)
  r.router = kBf16Linear;
  r.source = std::move(source);
  return r;
}

std::vector<Recipe> build() {
  std::vector<Recipe> v;
  v.push_back(make("bf16", kBf16Linear, "BF16 baseline"));
  {
    Recipe r = make("fp16", {kFp16, kFp16, Element::kFp32}, "FP16 baseline");
    r.attention = Element::kFp16;
    r.kv_cache = kFp16;
    r.embedding = kFp16;
    r.lm_head = {kFp16, kFp16, Element::kFp32};
    r.router = r.lm_head;
    r.master_weights = Element::kFp32;
    v.push_back(r);
  }
  v.push_back(make("fp8-tensor", {fmt("fp8-e4m3/tensor"), fmt("fp8-e4m3/token"), Element::kFp32},
                   "vLLM fp8 (per-tensor weight, per-token dynamic activation)"));
  v.push_back(make("fp8-block", {fmt("fp8-e4m3/block128x128"), fmt("fp8-e4m3/group1x128"), Element::kFp32},
                   "DeepSeek-V3 sec. 3.3; Jet-RL arXiv 2601.14243; verl docs/advance/fp8.md"));
  v.push_back(make("mxfp8", {fmt("mxfp8"), fmt("mxfp8"), Element::kFp32},
                   "OCP MX v1.0; vllm-ascend MXFP8 (Ascend 950)"));
  v.push_back(make("int4-w4a16-g32", {fmt("int4/group32"), kBf16, Element::kFp32},
                   "slime INT4 QAT (LMSYS blog, Jan 2026); Kimi-K2"));
  v.push_back(make("int4-w4a16-g128", {fmt("int4/group128"), kBf16, Element::kFp32},
                   "W4A16 group-128 (GPTQ/AWQ-style recipe used by SGLang)"));
  v.push_back(make("nvfp4", {fmt("nvfp4"), fmt("nvfp4"), Element::kFp32}, "NVIDIA NVFP4 (Blackwell)"));
  v.push_back(make("mxfp4", {fmt("mxfp4"), fmt("mxfp4"), Element::kFp32}, "OCP MX v1.0 MXFP4"));
  v.push_back(make("hif8", {fmt("hif8/tensor"), fmt("hif8/token"), Element::kFp32},
                   "HiFloat8 arXiv 2409.16626 (Ascend)"));
  {
    Recipe r = make("int4-qat-g32", {fmt("int4/group32"), kBf16, Element::kFp32},
                    "slime INT4 QAT: BF16 master weights, fake-quantised forward, straight-through backward");
    r.mode = QuantMode::kFake;
    v.push_back(r);
  }
  return v;
}

}  // namespace

ComputeType LinearPrecision::compute(QuantMode mode) const {
  if (mode == QuantMode::kFake) return ComputeType::kBf16;
  return gemm_compute(weight, activation);
}

bool Recipe::dynamic_activation_quant() const {
  return linear.activation.scaling.kind != ScaleKind::kNone ||
         traits(linear.activation.element).bits < 16;
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
  throw std::invalid_argument("unknown recipe '" + std::string(name) + "' (expected one of: " +
                              recipe_names() + ")");
}

}  // namespace rlsim::models
