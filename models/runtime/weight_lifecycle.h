// The reload lifecycle of a quantised rollout engine's weights.
//
// In RL the trainer updates the weights every step and the rollout engine reloads them. A
// quantised engine keeps its weights in the layout its kernels read, not the layout its weight
// loader writes (kernels.h: the Ascend 950 MXFP8 layout transposes the codes and reshapes the
// scales; the 4-bit layout packs and tile-permutes codes and scales, as Marlin does; FP8 block
// weights are codes plus block scales in tiles). So every reload must first restore the loader's
// layout, let the loader write the new weights, then quantise (when the loader received
// high-precision weights) and transform again: vllm-ascend #7631 (restore_weights_for_rl_loading /
// process_weights_after_loading of the MXFP8 method, dense and MoE), FlashRL and slime (in-place
// updates so that CUDA-graph captured pointers stay valid).
//
// Each quantised tensor has one storage, allocated on the first load and never again; every
// conversion is an in-place copy, so the kernel buffers keep their addresses across reloads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "models/precision/quantize.h"
#include "models/runtime/kernels.h"
#include "models/runtime/model.h"

namespace rlsim::models {

/// Where a tensor is in its lifecycle.
///  - kRestored: the storage holds the loader (checkpoint) layout and may be written by a loader
///    (the state of a new tensor, and after restore_weights_for_loading());
///  - kLoaded: a loader has written weights since the last transform (not yet usable by a kernel);
///  - kTransformed: the storage holds the kernel layout (the only state a forward pass may use).
enum class WeightState { kRestored, kLoaded, kTransformed };

/// "restored", "loaded", "transformed".
std::string_view weight_state_name(WeightState s);

/// A lifecycle call made in a state that does not allow it (loading into the kernel layout,
/// transforming twice, a forward pass on weights not transformed, an MoE shard half loaded). The
/// message names the tensor, the call and the state. Nothing has been changed when it is thrown.
class WeightStateError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// Wall time (seconds) and bytes moved (read + written, scratch copies included) of each reload
/// stage, summed over the tensors a call touched.
///  - restore: kernel layout -> loader layout, in place;
///  - load: the weight loader's copy of the new high-precision weights (or pre-quantised tensors);
///  - quantize: high-precision weights -> codes and scales in the loader layout;
///  - transform: loader layout -> kernel layout, in place.
/// The prefill GEMM reads the kernel layout too (gemm.h): no FP32 copy of any weight is kept.
struct ReloadStats {
  double restore_s = 0, load_s = 0, quantize_s = 0, transform_s = 0;
  std::size_t restore_bytes = 0, load_bytes = 0, quantize_bytes = 0, transform_bytes = 0;
  ReloadStats& operator+=(const ReloadStats& o);
};

/// One tensor's storage through reloads: high-precision rows staged by the loader, the quantised
/// tensor in a PackedWeight (loader or kernel layout).
/// The building block of QuantizedLinear and QuantizedExpertGroup; it keeps no state of its own.
class ReloadableTensor {
 public:
  ReloadableTensor() = default;
  /// A [rows, cols] tensor in `format` (cols: the reduction dimension). Throws
  /// std::invalid_argument for non-positive sizes.
  ReloadableTensor(const Format& format, std::int64_t rows, std::int64_t cols);

  std::int64_t rows() const { return rows_; }
  std::int64_t cols() const { return cols_; }
  const Format& format() const { return format_; }
  /// Copies high-precision rows [row0, row0 + values.size() / cols) (the loader's copy). Throws
  /// std::invalid_argument when they do not fit.
  void stage(std::int64_t row0, std::span<const float> values, ReloadStats& stats);
  /// Stores a pre-quantised tensor (a quantised checkpoint) in the loader layout.
  void store(const QuantizedTensor& q, ReloadStats& stats);
  /// Rows staged since the last quantize(); all, none or some.
  std::int64_t staged_rows() const { return staged_rows_; }
  /// Rows loaded since the last transform(): all once quantised or stored, else the staged rows.
  std::int64_t loaded_rows() const { return stored_ ? rows_ : staged_rows_; }
  /// Whether the storage exists (a first store or quantize() happened).
  bool allocated() const { return packed_.rows() > 0; }
  /// Quantises the staged rows (all must be staged) into the loader layout; the first call
  /// allocates the storage and fixes the shapes. Frees the staging. Throws std::invalid_argument,
  /// storing nothing, for a NaN or infinite value (a corrupt update must not become codes: INT4
  /// would turn a NaN into 0 silently) or values that do not fit the layout.
  void quantize(ReloadStats& stats);
  void transform(ReloadStats& stats);  // loader -> kernel layout
  void restore(ReloadStats& stats);    // kernel -> loader layout
  const PackedWeight& packed() const { return packed_; }
  /// Storage addresses: codes, scales.
  void buffers(std::vector<const void*>& out) const;

 private:
  void store_loader(const QuantizedTensor& q);  // allocates on the first call
  Format format_{Element::kFp32, {}};
  std::int64_t rows_ = 0, cols_ = 0;
  std::vector<float> staging_;        // [rows, cols] while rows are being loaded
  std::vector<std::uint8_t> staged_;  // per row: loaded since the last quantize()
  std::int64_t staged_rows_ = 0;
  bool stored_ = false;  // quantised or stored since the last transform()
  PackedWeight packed_;
};

/// The weight of one linear layer [out_features, in_features] through reloads, with its state.
///
/// Calls and states (WeightStateError otherwise, with nothing changed):
///  - load_weight / load_quantized: in kRestored or kLoaded -> kLoaded (the loader's copy; a
///    tensor in the kernel layout cannot be written: the shape mismatch that crashes a reload
///    without restore);
///  - process_weights_after_loading: in kLoaded (quantises the loaded weights when they were high
///    precision, then transforms) or kRestored after a first transform (transforms the restored
///    layout back: a partial reload left this tensor as it was) -> kTransformed; in kTransformed,
///    or before anything was ever loaded, an error;
///  - restore_weights_for_loading: kTransformed -> kRestored; in kRestored or kLoaded a no-op (the
///    storage already holds the loader layout), so restoring twice is harmless.
/// The shapes (rows, cols, scale blocks, layout) are fixed by the first process call; a later
/// load of another shape is std::invalid_argument.
class QuantizedLinear {
 public:
  QuantizedLinear() = default;
  /// `name` appears in error messages.
  QuantizedLinear(std::string name, const Format& weight, std::int64_t rows, std::int64_t cols);

  const std::string& name() const { return name_; }
  WeightState state() const { return state_; }
  std::int64_t rows() const { return t_.rows(); }
  std::int64_t cols() const { return t_.cols(); }

  /// The loader's copy of high-precision weights [rows, cols] row-major.
  void load_weight(std::span<const float> values, ReloadStats& stats);
  /// The loader's copy of a pre-quantised tensor (codes and scales of this weight's format).
  void load_quantized(const QuantizedTensor& q, ReloadStats& stats);
  void process_weights_after_loading(ReloadStats& stats);
  void restore_weights_for_loading(ReloadStats& stats);

  /// The kernel-layout weight; WeightStateError unless kTransformed.
  const PackedWeight& packed() const;
  /// The loader-layout bytes while restored or loaded (tests: restore is the exact inverse).
  std::vector<std::uint8_t> loader_image() const { return t_.packed().loader_image(); }
  void buffers(std::vector<const void*>& out) const { t_.buffers(out); }

 private:
  void require(bool ok, std::string_view call) const;
  std::string name_;
  WeightState state_ = WeightState::kRestored;
  bool ever_transformed_ = false;
  ReloadableTensor t_;
};

/// The expert shards a checkpoint holds per expert: gate_proj (w1) and up_proj (w3) become the two
/// halves of the fused w13 weight, down_proj is w2 (vLLM FusedMoE naming).
enum class ExpertShard { kW1, kW3, kW2 };

/// The routed experts of one MoE layer through reloads, one state for the group: the four tensors
/// w13 weight and scale [experts, 2 * expert_hidden, dim] and w2 weight and scale [experts, dim,
/// expert_hidden], each expert's slice a ReloadableTensor (w13 quantised as one [2 I, dim] tensor
/// per expert, as vLLM's FusedMoE quantises it). Calls and states as QuantizedLinear; in addition
/// process_weights_after_loading is an error when an expert was loaded only in part (a w13 half,
/// or w13 without w2), naming the expert and the shard.
class QuantizedExpertGroup {
 public:
  QuantizedExpertGroup() = default;
  QuantizedExpertGroup(std::string name, const Format& weight, int experts, std::int64_t dim, std::int64_t expert_hidden);

  const std::string& name() const { return name_; }
  WeightState state() const { return state_; }
  int experts() const { return static_cast<int>(w13_.size()); }

  /// The loader's copy of one shard of one expert: w1 / w3 [expert_hidden, dim], w2 [dim,
  /// expert_hidden], row-major. Throws std::invalid_argument for an expert out of range or a
  /// wrong size.
  void load_expert(int expert, ExpertShard shard, std::span<const float> values, ReloadStats& stats);
  void process_weights_after_loading(ReloadStats& stats);
  void restore_weights_for_loading(ReloadStats& stats);

  /// Kernel-layout weights of an expert; WeightStateError unless kTransformed.
  const PackedWeight& w13(int expert) const;
  const PackedWeight& w2(int expert) const;
  void buffers(std::vector<const void*>& out) const;

 private:
  void require(bool ok, std::string_view call) const;
  std::string name_;
  WeightState state_ = WeightState::kRestored;
  bool ever_transformed_ = false;
  std::int64_t dim_ = 0, hidden_ = 0;
  std::vector<ReloadableTensor> w13_, w2_;
};

}  // namespace rlsim::models
