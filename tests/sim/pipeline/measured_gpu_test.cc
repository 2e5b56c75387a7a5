// The rollout cost model against rates measured on real GPUs: the records under
// models/calibration/measured/ (written by its gpu_rates.py, whose docstring says what each file
// holds; its README says on what machine each was taken). Nothing in the built-in calibration was
// fitted to them: these are held-out checks of the catalog devices and of the calibration fitted
// to published RL runs (the H200 has no RL-run record and takes the H100's fitted fractions).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "sim/pipeline/rollout.h"
#include "sim/scenario/calibration.h"
#include "sim/scenario/csv_table.h"
#include "sim/scenario/scenario.h"
#include "tests/sim/scenario_text.h"

namespace rlsim::sim {
namespace {

/// One measured record: a test name, its folder under models/calibration/measured/ and the catalog
/// device it was taken on.
struct Record {
  std::string name;
  std::string folder;
  std::string device;
};

void PrintTo(const Record& r, std::ostream* os) { *os << r.folder; }

// A record's CSV as rows of column name -> field (rows with an `error` field skipped: a shape the
// kernel refused, or a case that did not fit, is no timing).
std::vector<std::map<std::string, std::string>> read_record(const Record& record, const std::string& file) {
  const std::string path = std::string(RLSIM_SOURCE_DIR) + "/models/calibration/measured/" + record.folder + "/" + file;
  const auto table = read_csv_table(path, "measured GPU record");
  std::vector<std::map<std::string, std::string>> rows;
  for (std::size_t i = 1; i < table.size(); ++i) {
    std::map<std::string, std::string> row;
    for (std::size_t c = 0; c < table[0].size() && c < table[i].size(); ++c) row[table[0][c]] = table[i][c];
    if (row["error"].empty()) rows.push_back(std::move(row));
  }
  return rows;
}

// The record's decode stack (Llama-3.1-8B, one engine of TP1 on one device) as a scenario, with the
// linears in `precision`: bf16, or fp8-tensor (E4M3 weights with a per-tensor scale, E4M3
// activations; the measured stack scaled them per tensor statically, vLLM's fp8 per token).
Scenario llama_on(const Record& record, const std::string& precision) {
  return testing::load_scenario_text(R"(name: measured decode stack
model: llama3.1-8b
cluster: {device: )" + record.device +
                                     R"(, nodes: 1, devices_per_node: 8}
workload:
  prompts_per_step: 8
  samples_per_prompt: 1
  prompt_tokens: {dist: fixed, value: 512}
  response_tokens: {dist: fixed, value: 512}
rollout: {engine: vllm, tensor_parallel: 1, precision: )" +
                                     precision + "}\n");
}

class MeasuredGpu : public ::testing::TestWithParam<Record> {};

// HBM: the largest read the record timed (a 4 GiB BF16 torch.sum) against the catalog bandwidth
// (datasheet: 3.35 TB/s H100, 4.8 TB/s H200) times the calibration's memory fraction (the H100's,
// fitted to NeMo-RL runs).
TEST_P(MeasuredGpu, HbmReadAgreesWithTheCalibratedMemoryFraction) {
  double read = 0;
  for (const auto& row : read_record(GetParam(), "hbm.csv")) {
    if (row.at("method") == "torch_sum") read = std::max(read, std::stod(row.at("gb_per_s")) * 1e9);
  }
  ASSERT_GT(read, 0);
  const Scenario s = llama_on(GetParam(), "bf16");
  const double modelled = s.cluster.device.memory_bandwidth_bytes_per_s * builtin_calibration().device(GetParam().device).memory;
  EXPECT_NEAR(modelled / read, 1.0, 0.10) << "modelled " << modelled / 1e12 << " TB/s, measured " << read / 1e12;
}

// One decode step at batch b with b sequences of `context` cached positions, replayed as a CUDA
// graph, against RolloutCostModel::decode_s. The two are not the same work item for item: the
// measured stack launches unfused PyTorch kernels (about 30 per layer, 68 us of non-GEMM time per
// layer at b = 1) and no scheduler; the model prices vLLM's fused kernels (17 us per layer) plus
// its per-step host overhead (1.27 ms). Within 25 % at every measured batch and context.
TEST_P(MeasuredGpu, DecodeStepAgreesAcrossBatchAndPrecision) {
  std::map<std::string, RolloutCostModel> models;
  models.emplace("bf16", RolloutCostModel::build(llama_on(GetParam(), "bf16")));
  models.emplace("fp8_e4m3", RolloutCostModel::build(llama_on(GetParam(), "fp8-tensor")));
  int compared = 0;
  for (const auto& row : read_record(GetParam(), "decode.csv")) {
    if (row.at("mode") != "cuda_graph") continue;
    const int b = std::stoi(row.at("batch"));
    const double ctx = std::stod(row.at("context"));
    const double measured = std::stod(row.at("seconds"));
    const double modelled = models.at(row.at("precision")).decode_s(b, b * ctx);
    EXPECT_NEAR(modelled / measured, 1.0, 0.25) << row.at("precision") << " b=" << b << " ctx=" << ctx << ": modelled "
                                                << modelled * 1e3 << " ms, measured " << measured * 1e3 << " ms";
    ++compared;
  }
  EXPECT_EQ(compared, 20);
}

// What FP8 buys a decode step, the figure rlsim exists to price: the BF16 step over the FP8 step
// at the same batch and context, modelled against measured (H100: 1.39x at b = 1 falling to 1.13x
// at b = 128 with 2,048 positions, where the BF16 KV cache dominates; H200: 1.29x to 1.12x).
// Within 10 % at every case.
TEST_P(MeasuredGpu, Fp8DecodeSpeedupAgreesAcrossBatch) {
  const RolloutCostModel bf16 = RolloutCostModel::build(llama_on(GetParam(), "bf16"));
  const RolloutCostModel fp8 = RolloutCostModel::build(llama_on(GetParam(), "fp8-tensor"));
  std::map<std::pair<int, int>, std::map<std::string, double>> steps;
  for (const auto& row : read_record(GetParam(), "decode.csv")) {
    if (row.at("mode") == "cuda_graph") {
      steps[{std::stoi(row.at("batch")), std::stoi(row.at("context"))}][row.at("precision")] = std::stod(row.at("seconds"));
    }
  }
  ASSERT_EQ(steps.size(), 10u);
  for (const auto& [key, by_precision] : steps) {
    const auto [b, ctx] = key;
    const double measured = by_precision.at("bf16") / by_precision.at("fp8_e4m3");
    const double modelled = bf16.decode_s(b, double(b) * ctx) / fp8.decode_s(b, double(b) * ctx);
    EXPECT_NEAR(modelled / measured, 1.0, 0.10)
        << "b=" << b << " ctx=" << ctx << ": modelled " << modelled << "x, measured " << measured << "x";
  }
}

INSTANTIATE_TEST_SUITE_P(Records, MeasuredGpu,
                         ::testing::Values(Record{"H100", "h100-sxm-2026-11-25", "h100-sxm"},
                                           Record{"H200", "h200-2026-11-27", "h200"}),
                         [](const ::testing::TestParamInfo<Record>& p) { return p.param.name; });

}  // namespace
}  // namespace rlsim::sim
