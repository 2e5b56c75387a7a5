// `rlsim bench host`: the figures of the `host` device (models/hardware/catalog/devices/host.yaml)
// and of the rlsim runtime as a rollout engine and trainer on it, measured on this machine.
#pragma once

#include <iosfwd>
#include <string>

namespace rlsim::cli {

/// Measures, on one core (the host device is one core: `rlsim train` runs one rollout engine and
/// one trainer rank per core), in the BF16 recipe, and prints one line per figure:
///  - read bandwidth (measure_read_bandwidth, 512 MiB, 1 thread), GB/s;
///  - FP32 GEMM rate (Eigen, 512 x 512 x 512, 1 thread), GFLOP/s: the device's compute rate;
///  - decode latency of `model`'s shapes at batch 1 (8-token prompt, tokens sampled at temperature
///    1 with their log-probabilities, as the loop's rollout does): 128 tokens at the model's depth
///    and at one layer, 384 tokens at the model's depth; from them, against what the simulator
///    models of a token (RolloutCostModel::decode_s), rollout.efficiency.attention_compute (from
///    the extra time per context token), rollout.overheads.per_layer and .iteration (from the two
///    depths);
///  - the trainer's (models::TrainableModel<float>) forward + backward time on eight sequences the
///    model writes itself at 150 and at 300 tokens, and forward alone at 150: solved for the
///    matmul and attention efficiencies (training.efficiency.compute, .attention_compute; FLOPs
///    as the simulator counts them) and the forward-pass factor (.forward);
///  - the rollout engine's reload (restore, load, quantise, repack) per weight matrix
///    (weight_sync.per_matrix).
/// `repeat` runs, the best reported. Throws models::ModelFileError for a bad model file.
int bench_host(const std::string& model, int repeat, std::ostream& out);

}  // namespace rlsim::cli
