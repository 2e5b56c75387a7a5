#include "models/hardware/device.h"

#include <stdexcept>
#include <vector>

namespace rlsim::models {

std::optional<ComputeType> Device::effective(ComputeType want) const {
  std::vector<ComputeType> chain;
  switch (want) {
    case ComputeType::kFp4:
      chain = {ComputeType::kFp4, ComputeType::kFp8, ComputeType::kBf16, ComputeType::kFp16};
      break;
    case ComputeType::kFp8:
      chain = {ComputeType::kFp8, ComputeType::kBf16, ComputeType::kFp16};
      break;
    case ComputeType::kInt8:
      chain = {ComputeType::kInt8, ComputeType::kBf16, ComputeType::kFp16};
      break;
    case ComputeType::kBf16:
      chain = {ComputeType::kBf16, ComputeType::kFp16};
      break;
    case ComputeType::kFp16:
      chain = {ComputeType::kFp16, ComputeType::kBf16};
      break;
    case ComputeType::kFp32:
      chain = {};
      break;
  }
  chain.push_back(ComputeType::kFp32);
  for (auto c : chain) {
    if (flops_per_s.count(c)) return c;
  }
  return std::nullopt;
}

double Device::rate(ComputeType want) const {
  const auto c = effective(want);
  if (!c) throw std::logic_error("device " + name + " has no compute rate usable for " + std::string(compute_name(want)));
  return flops_per_s.at(*c);
}

}  // namespace rlsim::models
