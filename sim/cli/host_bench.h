// `rlsim bench host`: the figures of the `host` device (models/hardware/catalog/devices/host.yaml)
// and of the rlsim runtime as a rollout engine and trainer on it, measured on this machine.
#pragma once

#include <iosfwd>
#include <string>

namespace rlsim::cli {

/// Measures, on one core (the host device is one core: `rlsim train` runs one rollout engine and
/// one trainer rank per core) and prints one line per figure:
///  - read bandwidth (measure_read_bandwidth, 512 MiB, 1 thread), GB/s;
///  - FP32 GEMM rate (Eigen, 512 x 512 x 512, 1 thread), GFLOP/s: the device's compute rate;
///  - decode latency of `model`'s shapes (FP32 runtime, batch 1, 8-token prompt then 128 tokens)
///    with all its layers and with one, giving the engine overheads the simulator adds to the
///    modelled matmul time (2 x parameters / GEMM rate): per layer ((t_L - t_1) / (L - 1) minus a
///    layer's matmul time) and per iteration (t_1 minus one layer's cost minus the embedding and
///    classifier matmul time);
///  - the trainer's (models::TrainableModel<float>) achieved FLOP rate on a 136-token sequence,
///    forward alone and forward + backward (FLOPs as the simulator counts them: 2 x matmul
///    parameters x tokens per forward, x3 with the backward, plus causal attention), and those
///    rates as fractions of the GEMM rate: training.efficiency.compute and .forward.
/// `repeat` runs, the best reported. Throws models::ModelFileError for a bad model file.
int bench_host(const std::string& model, int repeat, std::ostream& out);

}  // namespace rlsim::cli
