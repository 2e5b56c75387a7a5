#include "models/runtime/weight_lifecycle.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

namespace rlsim::models {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The error of a lifecycle call made in a state that does not allow it, saying what to call instead.
WeightStateError state_error(const std::string& name, std::string_view call, WeightState state) {
  const char* why = state == WeightState::kTransformed ? "it holds the kernel layout; call restore_weights_for_loading first"
                    : call == "process_weights_after_loading"
                        ? "nothing has been loaded yet"
                        : "its weights are not in the kernel layout; call process_weights_after_loading first";
  return WeightStateError(fmt::format("{}: {} called in state '{}': {}", name, call, weight_state_name(state), why));
}

}  // namespace

std::string_view weight_state_name(WeightState s) {
  switch (s) {
    case WeightState::kRestored:
      return "restored";
    case WeightState::kLoaded:
      return "loaded";
    case WeightState::kTransformed:
      return "transformed";
  }
  return "?";
}

ReloadStats& ReloadStats::operator+=(const ReloadStats& o) {
  restore_s += o.restore_s, load_s += o.load_s, quantize_s += o.quantize_s, transform_s += o.transform_s;
  restore_bytes += o.restore_bytes, load_bytes += o.load_bytes, quantize_bytes += o.quantize_bytes;
  transform_bytes += o.transform_bytes;
  return *this;
}

// ---------------------------------------------------------------------------------------------
// ReloadableTensor

ReloadableTensor::ReloadableTensor(const Format& format, std::int64_t rows, std::int64_t cols)
    : format_(format), rows_(rows), cols_(cols) {
  if (rows <= 0 || cols <= 0)
    throw std::invalid_argument(fmt::format("reloadable tensor: shape [{}, {}] must be positive", rows, cols));
}

void ReloadableTensor::stage(std::int64_t row0, std::span<const float> values, ReloadStats& stats) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto n = static_cast<std::int64_t>(values.size());
  if (n % cols_ != 0 || row0 < 0 || row0 + n / cols_ > rows_ || n == 0) {
    throw std::invalid_argument(fmt::format("{} values at row {} do not fit a [{}, {}] tensor", n, row0, rows_, cols_));
  }
  if (staging_.empty()) {
    staging_.resize(static_cast<std::size_t>(rows_ * cols_));
    staged_.assign(static_cast<std::size_t>(rows_), 0);
    staged_rows_ = 0;
  }
  std::memcpy(staging_.data() + row0 * cols_, values.data(), values.size() * sizeof(float));
  for (std::int64_t r = row0; r < row0 + n / cols_; ++r) {
    staged_rows_ += staged_[static_cast<std::size_t>(r)] == 0;
    staged_[static_cast<std::size_t>(r)] = 1;
  }
  stats.load_s += seconds_since(t0);
  stats.load_bytes += 2 * values.size() * sizeof(float);
}

void ReloadableTensor::store_loader(const QuantizedTensor& q) {
  if (!allocated()) {
    // The first store fixes the layout and the blocks; PackedWeight::store_loader checks the format and shape.
    PackedWeight p = PackedWeight::reloadable(format_, rows_, cols_, q.block_rows, q.block_cols);
    p.store_loader(q);  // may throw: nothing is kept
    packed_ = std::move(p);
  } else {
    packed_.store_loader(q);
  }
  stored_ = true;
}

void ReloadableTensor::store(const QuantizedTensor& q, ReloadStats& stats) {
  const auto t0 = std::chrono::steady_clock::now();
  store_loader(q);
  stats.load_s += seconds_since(t0);
  stats.load_bytes += 2 * packed_.loader_bytes();
}

void ReloadableTensor::quantize(ReloadStats& stats) {
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < staging_.size(); ++i) {
    if (!std::isfinite(staging_[i])) {
      throw std::invalid_argument(fmt::format("loaded weight ({}, {}) is {}: refused before quantisation",
                                              static_cast<std::int64_t>(i) / cols_, static_cast<std::int64_t>(i) % cols_,
                                              staging_[i]));
    }
  }
  QuantizedTensor q = models::quantize(format_, rows_, cols_, std::span<const float>(staging_));
  store_loader(q);
  stats.quantize_bytes += staging_.size() * sizeof(float) + packed_.loader_bytes();
  std::vector<float>().swap(staging_);
  std::vector<std::uint8_t>().swap(staged_);
  staged_rows_ = 0;
  stats.quantize_s += seconds_since(t0);
}

void ReloadableTensor::transform(ReloadStats& stats) {
  const auto t0 = std::chrono::steady_clock::now();
  stats.transform_bytes += packed_.loader_to_kernel();
  stats.transform_s += seconds_since(t0);
  stored_ = false;
}

void ReloadableTensor::restore(ReloadStats& stats) {
  const auto t0 = std::chrono::steady_clock::now();
  stats.restore_bytes += packed_.kernel_to_loader();
  stats.restore_s += seconds_since(t0);
}

void ReloadableTensor::buffers(std::vector<const void*>& out) const {
  out.push_back(packed_.code_storage());
  out.push_back(packed_.scale_storage());
}

// ---------------------------------------------------------------------------------------------
// QuantizedLinear

QuantizedLinear::QuantizedLinear(std::string name, const Format& weight, std::int64_t rows, std::int64_t cols)
    : name_(std::move(name)), t_(weight, rows, cols) {}

void QuantizedLinear::require(bool ok, std::string_view call) const {
  if (!ok) throw state_error(name_, call, state_);
}

void QuantizedLinear::load_weight(std::span<const float> values, ReloadStats& stats) {
  require(state_ != WeightState::kTransformed, "load_weight");
  if (static_cast<std::int64_t>(values.size()) != rows() * cols()) {
    throw std::invalid_argument(
        fmt::format("{}: load_weight of {} values, expected [{}, {}]", name_, values.size(), rows(), cols()));
  }
  t_.stage(0, values, stats);
  state_ = WeightState::kLoaded;
}

void QuantizedLinear::load_quantized(const QuantizedTensor& q, ReloadStats& stats) {
  require(state_ != WeightState::kTransformed, "load_quantized");
  try {
    t_.store(q, stats);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("{}: {}", name_, e.what()));
  }
  state_ = WeightState::kLoaded;
}

void QuantizedLinear::process_weights_after_loading(ReloadStats& stats) {
  require(state_ == WeightState::kLoaded || (state_ == WeightState::kRestored && ever_transformed_),
          "process_weights_after_loading");
  if (t_.staged_rows() > 0) {
    try {
      t_.quantize(stats);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("{}: {}", name_, e.what()));
    }
  }
  t_.transform(stats);
  state_ = WeightState::kTransformed;
  ever_transformed_ = true;
}

void QuantizedLinear::restore_weights_for_loading(ReloadStats& stats) {
  if (state_ != WeightState::kTransformed) return;  // already the loader layout
  t_.restore(stats);
  state_ = WeightState::kRestored;
}

const PackedWeight& QuantizedLinear::packed() const {
  if (state_ != WeightState::kTransformed) require(false, "a forward pass");
  return t_.packed();
}

// ---------------------------------------------------------------------------------------------
// QuantizedExpertGroup

QuantizedExpertGroup::QuantizedExpertGroup(std::string name, const Format& weight, int experts, std::int64_t dim,
                                           std::int64_t expert_hidden)
    : name_(std::move(name)), dim_(dim), hidden_(expert_hidden) {
  if (experts <= 0) throw std::invalid_argument(fmt::format("{}: {} experts (expected at least 1)", name_, experts));
  for (int e = 0; e < experts; ++e) {
    w13_.emplace_back(weight, 2 * expert_hidden, dim);
    w2_.emplace_back(weight, dim, expert_hidden);
  }
}

void QuantizedExpertGroup::require(bool ok, std::string_view call) const {
  if (!ok) throw state_error(name_, call, state_);
}

void QuantizedExpertGroup::load_expert(int expert, ExpertShard shard, std::span<const float> values, ReloadStats& stats) {
  require(state_ != WeightState::kTransformed, "load_expert");
  if (expert < 0 || expert >= experts())
    throw std::invalid_argument(fmt::format("{}: expert {} out of range [0, {})", name_, expert, experts()));
  const std::int64_t expected = dim_ * hidden_;
  if (static_cast<std::int64_t>(values.size()) != expected) {
    throw std::invalid_argument(
        fmt::format("{}: expert {} shard of {} values, expected {}", name_, expert, values.size(), expected));
  }
  const auto e = static_cast<std::size_t>(expert);
  switch (shard) {
    case ExpertShard::kW1:
      w13_[e].stage(0, values, stats);
      break;
    case ExpertShard::kW3:
      w13_[e].stage(hidden_, values, stats);
      break;
    case ExpertShard::kW2:
      w2_[e].stage(0, values, stats);
      break;
  }
  state_ = WeightState::kLoaded;
}

void QuantizedExpertGroup::process_weights_after_loading(ReloadStats& stats) {
  require(state_ == WeightState::kLoaded || (state_ == WeightState::kRestored && ever_transformed_),
          "process_weights_after_loading");
  // Every expert is loaded whole or not at all (a first load: all of them), checked before anything changes.
  for (std::size_t e = 0; e < w13_.size(); ++e) {
    const std::int64_t a = w13_[e].loaded_rows(), b = w2_[e].loaded_rows();
    const bool none = a == 0 && b == 0, whole = a == w13_[e].rows() && b == w2_[e].rows();
    if ((!none && !whole) || (none && !w13_[e].allocated())) {
      const char* missing = a == 0 ? "w1 and w3" : a < w13_[e].rows() ? "one half of w13 (w1 or w3)" : "w2";
      throw WeightStateError(
          fmt::format("{}: process_weights_after_loading with expert {} loaded in part: {} not loaded", name_, e, missing));
    }
  }
  // Quantise every expert first (it may throw on a NaN: the group stays loaded, every tensor in the
  // loader layout, so a later process is safe), then transform them all (which cannot fail).
  for (std::size_t e = 0; e < w13_.size(); ++e) {
    for (ReloadableTensor* t : {&w13_[e], &w2_[e]}) {
      if (t->staged_rows() > 0) {
        try {
          t->quantize(stats);
        } catch (const std::invalid_argument& ex) {
          throw std::invalid_argument(fmt::format("{}: expert {}: {}", name_, e, ex.what()));
        }
      }
    }
  }
  for (std::size_t e = 0; e < w13_.size(); ++e) {
    w13_[e].transform(stats);
    w2_[e].transform(stats);
  }
  state_ = WeightState::kTransformed;
  ever_transformed_ = true;
}

void QuantizedExpertGroup::restore_weights_for_loading(ReloadStats& stats) {
  if (state_ != WeightState::kTransformed) return;
  for (std::size_t e = 0; e < w13_.size(); ++e) {
    w13_[e].restore(stats);
    w2_[e].restore(stats);
  }
  state_ = WeightState::kRestored;
}

const PackedWeight& QuantizedExpertGroup::w13(int expert) const {
  if (state_ != WeightState::kTransformed) require(false, "a forward pass");
  return w13_.at(static_cast<std::size_t>(expert)).packed();
}

const PackedWeight& QuantizedExpertGroup::w2(int expert) const {
  if (state_ != WeightState::kTransformed) require(false, "a forward pass");
  return w2_.at(static_cast<std::size_t>(expert)).packed();
}

void QuantizedExpertGroup::buffers(std::vector<const void*>& out) const {
  for (std::size_t e = 0; e < w13_.size(); ++e) {
    w13_[e].buffers(out);
    w2_[e].buffers(out);
  }
}

}  // namespace rlsim::models
