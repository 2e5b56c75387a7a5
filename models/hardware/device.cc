#include "models/hardware/device.h"

#include <stdexcept>

namespace rlsim::models {

std::optional<ComputeType> Device::effective(ComputeType want) const {
  // The type itself, its fallbacks (ComputeTraits), then FP32.
  if (flops_per_s.count(want)) return want;
  const ComputeTraits& t = traits(want);
  for (int i = 0; i < t.fallbacks; ++i) {
    if (flops_per_s.count(t.fallback[static_cast<std::size_t>(i)])) return t.fallback[static_cast<std::size_t>(i)];
  }
  if (flops_per_s.count(ComputeType::kFp32)) return ComputeType::kFp32;
  return std::nullopt;
}

double Device::rate(ComputeType want) const {
  const auto c = effective(want);
  if (!c) throw std::logic_error("device " + name + " has no compute rate usable for " + std::string(compute_name(want)));
  return flops_per_s.at(*c);
}

}  // namespace rlsim::models
