// Device specifications and links. Catalog entries live in catalog/devices/*.yaml (each number
// with its public source); scenario files may define devices inline with the same fields.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "models/precision/format.h"

namespace rlsim::models {

/// A point-to-point link as seen by one device: unidirectional bandwidth and per-message latency.
struct Link {
  double bandwidth_bytes_per_s = 0;
  double latency_s = 0;
};

/// One accelerator.
struct Device {
  std::string name;
  double memory_bytes = 0;
  double memory_bandwidth_bytes_per_s = 0;
  std::map<ComputeType, double> flops_per_s;  // dense tensor-core rates by compute type
  Link intra_node;                            // scale-up (NVLink / Ascend UB), per direction
  Link inter_node;                            // scale-out per device (one NIC per device)
  Link host_link;                             // device <-> host memory (PCIe), for offload
  /// How the devices of a node (scale-up domain) are connected, as the catalog file states it:
  /// nvswitch, pcie (no scale-up fabric: intra_node is the PCIe path), infinity-fabric (AMD's full
  /// mesh: intra_node is the sum of the links a collective uses), hccs, ub (Huawei's HCCS and
  /// Unified Bus), shared-memory (the host's cores); "unspecified" for an inline device without
  /// it. Descriptive: timings use the links' numbers, which the catalog sets for the topology.
  std::string topology = "unspecified";
  std::string source;

  /// The compute type a GEMM requested as `want` actually runs on: `want` if the device has a
  /// rate for it, else the next wider type it has (fp4 -> fp8 -> bf16 -> fp16 -> fp32; int8 ->
  /// bf16). Returns nullopt when the device lists none of them.
  std::optional<ComputeType> effective(ComputeType want) const;

  /// Dense FLOP/s for `want` after fallback (see effective()); throws std::logic_error when the
  /// device has no usable rate (the loader rejects such devices).
  double rate(ComputeType want) const;
};

}  // namespace rlsim::models
