#include "models/graph/graph.h"

#include <array>

namespace rlsim::models {
namespace {

constexpr std::array<std::string_view, 20> kKindNames{
    "parameter", "embedding",       "rmsnorm",  "linear",      "expert_linear", "rope",     "attention_scores",
    "softmax",   "attention_value", "kv_write", "kv_read",     "residual_add",  "silu_mul", "router",
    "topk",      "moe_combine",     "lm_head",  "log_softmax", "dgrad",         "wgrad"};
static_assert(kKindNames.size() == static_cast<std::size_t>(OpKind::kWgrad) + 1);

constexpr std::array<std::string_view, 5> kRoleNames{"activation", "weight", "gradient", "kv", "router"};
static_assert(kRoleNames.size() == static_cast<std::size_t>(TensorRole::kRouter) + 1);

}  // namespace

std::string_view op_kind_name(OpKind k) { return kKindNames[static_cast<std::size_t>(k)]; }

std::optional<OpKind> parse_op_kind(std::string_view name) {
  for (std::size_t i = 0; i < kKindNames.size(); ++i) {
    if (kKindNames[i] == name) return static_cast<OpKind>(i);
  }
  return std::nullopt;
}

std::string op_kind_names() {
  std::string out;
  for (const auto n : kKindNames) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

bool is_linear_like(OpKind k) {
  return k == OpKind::kLinear || k == OpKind::kExpertLinear || k == OpKind::kRouter || k == OpKind::kLmHead;
}

std::string_view role_name(TensorRole r) { return kRoleNames[static_cast<std::size_t>(r)]; }

std::optional<TensorRole> parse_role(std::string_view name) {
  for (std::size_t i = 0; i < kRoleNames.size(); ++i) {
    if (kRoleNames[i] == name) return static_cast<TensorRole>(i);
  }
  return std::nullopt;
}

std::string TensorPrecision::str() const { return mode == QuantMode::kFake ? format.str() + " (fake)" : format.str(); }

}  // namespace rlsim::models
