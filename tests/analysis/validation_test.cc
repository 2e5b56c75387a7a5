// Validation records and calibration: the repository's records are in band with the built-in
// calibration (the acceptance of `rlsim validate`), records and calibration files are read with
// file:line:column errors, the comparison and its statistics are exact on hand-made inputs, and
// the fit recovers a parameter that generated the published figures.
#include "analysis/validation.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "analysis/calibrate.h"
#include "sim/scenario/calibration.h"

namespace rlsim::analysis {
namespace {

namespace fs = std::filesystem;

fs::path scenario_dir() { return fs::path(RLSIM_SOURCE_DIR) / "scenarios"; }

std::vector<ValidationRecord> repository(const sim::Calibration& c) {
  std::vector<ValidationRecord> out;
  for (const auto& f : repository_records(scenario_dir())) out.push_back(load_record(f, c));
  return out;
}

// A scratch record file: a small colocated Qwen3-8B run (`sequences` prompts of 8 samples) and the
// given validation block, which starts at line 15.
std::string write_record(const std::string& name, const std::string& validation, int prompts = 16) {
  const fs::path dir = fs::temp_directory_path() / "rlsim_validation_test";
  fs::create_directories(dir);
  const fs::path p = dir / (name + ".yaml");
  std::ofstream(p) << R"(name: scratch record
seed: 1
steps: 2
model: qwen3-8b
cluster: {device: h100-sxm, nodes: 1, devices_per_node: 8}
workload:
  prompts_per_step: )"
                   << prompts << R"(
  samples_per_prompt: 8
  prompt_tokens: {dist: fixed, value: 200}
  response_tokens: {dist: lognormal, mean: 1500, sigma: 0.5, max: 4096}
rollout: {memory_utilization: 0.6}
)" << validation;
  return p.string();
}

std::string load_error(const std::string& path) {
  try {
    (void)load_record(path, sim::builtin_calibration());
  } catch (const sim::ScenarioError& e) {
    return e.what();
  }
  return "";
}

// Acceptance of issue 19: every figure of every repository record in its band with the built-in
// calibration; step time |error| median <= 15 %, worst <= 30 %.
TEST(Validation, RepositoryRecordsAreInBandWithTheBuiltInCalibration) {
  const auto records = repository(sim::builtin_calibration());
  ASSERT_GE(records.size(), 10u);
  const auto outcomes = compare(records, simulate_records(records, nullptr, 2));
  for (const auto& o : outcomes) {
    EXPECT_TRUE(o.in_band) << o.record << " " << o.figure << ": predicted " << o.predicted << ", published " << o.published;
  }
  const auto st = validation_stats(outcomes);
  std::cout << "[ figure ] step time |error| median " << 100 * st.step_median << " %, worst " << 100 * st.step_worst << " %\n";
  EXPECT_LE(st.step_median, 0.15);
  EXPECT_LE(st.step_worst, 0.30);
  EXPECT_EQ(st.out_of_band, 0u);
}

TEST(Validation, BadRecordsNameFileLineAndWhatWasExpected) {
  struct Case {
    const char* name;
    const char* figure;  // the one figure of the record's validation block (line 15)
    const char* expected;
  };
  for (const Case& c : {Case{"unknown_figure", "{figure: step_tme, published: 10 s, tolerance: 0.3}", "step_time"},
                        Case{"unitless", "{figure: step_time, published: 10, tolerance: 0.3}", "has no unit"},
                        Case{"tolerance", "{figure: step_time, published: 10 s, tolerance: 1.5}", "must be in"}}) {
    const std::string path =
        write_record(c.name, std::string("validation:\n  source: test\n  figures:\n    - ") + c.figure + "\n");
    const std::string error = load_error(path);
    EXPECT_NE(error.find(std::string(c.name) + ".yaml:15:"), std::string::npos) << error;
    EXPECT_NE(error.find(c.expected), std::string::npos) << error;
  }
  const std::string empty = write_record("empty", "validation:\n  source: test\n  figures: []\n");
  EXPECT_NE(load_error(empty).find("empty.yaml:"), std::string::npos) << load_error(empty);
}

TEST(Validation, RatioToARecordNotLoadedIsAnError) {
  const std::string p = write_record("ratio", R"(validation:
  source: test
  figures:
    - {figure: step_time, ratio_to: no-such-record, published: 0.5, tolerance: 0.3}
)");
  const std::vector<ValidationRecord> records{load_record(p, sim::builtin_calibration())};
  EXPECT_THROW((void)compare(records, simulate_records(records, nullptr, 1)), sim::ScenarioError);
}

// Published figures are means over long runs: the first simulated step (an off-policy pipeline's
// fill) is left out when there are others.
TEST(Validation, SimulatedFiguresAreSteadyStateMeans) {
  sim::SimResult r;
  for (int i = 0; i < 3; ++i) {
    sim::StepRecord st;
    st.step = i;
    st.start = sim::to_ns(10.0 * i);
    st.end = st.start + sim::to_ns(i == 0 ? 9.0 : (i == 1 ? 4.0 : 6.0));
    st.phase_s[sim::Phase::kRollout] = i == 0 ? 8.0 : 2.0;
    r.steps.push_back(st);
  }
  const auto f = simulated_figures(r);
  EXPECT_DOUBLE_EQ(f.at("step_time"), 5.0);
  EXPECT_DOUBLE_EQ(f.at("phase.rollout"), 2.0);
  EXPECT_DOUBLE_EQ(f.at("rollout_share"), 0.4);
  r.steps.resize(1);
  EXPECT_DOUBLE_EQ(simulated_figures(r).at("step_time"), 9.0);
}

TEST(Validation, StatisticsOverStepAndTimeFigures) {
  std::vector<FigureOutcome> o(4);
  const double errors[] = {0.10, -0.30, 0.05, 0.50};
  const char* figures[] = {"step_time", "step_time", "phase.rollout", "step_time"};
  for (int i = 0; i < 4; ++i) {
    o[i].figure = figures[i];
    o[i].error = errors[i];
    o[i].is_time = true;
    o[i].tolerance = 0.3;
    o[i].in_band = std::abs(errors[i]) <= 0.3;
  }
  const auto st = validation_stats(o);
  EXPECT_EQ(st.figures, 4u);
  EXPECT_EQ(st.out_of_band, 1u);
  EXPECT_DOUBLE_EQ(st.step_median, 0.30);  // |0.10|, |0.30|, |0.50|
  EXPECT_DOUBLE_EQ(st.step_worst, 0.50);
  EXPECT_DOUBLE_EQ(st.time_median, (0.10 + 0.30) / 2);  // |0.05|, |0.10|, |0.30|, |0.50|
}

TEST(Calibration, WrittenFileReadsBackTheSameValues) {
  sim::Calibration c = sim::builtin_calibration();
  c.devices["h20"].compute = 0.123456;
  c.megatron.forward = 0.654321;
  c.vllm.per_sequence_s = 3.5e-6;
  c.moe_half_width = 321;
  c.sglang.sync_quantize_per_matrix_s = 1.5e-3;
  c.step_overhead_s = 7.25;
  const sim::Calibration back = sim::parse_calibration(sim::calibration_yaml(c, {"a header"}), "back.yaml");
  EXPECT_NEAR(back.devices.at("h20").compute, 0.123456, 1e-9);
  EXPECT_NEAR(back.megatron.forward, 0.654321, 1e-9);
  EXPECT_NEAR(back.vllm.per_sequence_s, 3.5e-6, 1e-12);
  EXPECT_NEAR(back.moe_half_width, 321, 1e-9);
  EXPECT_NEAR(back.sglang.sync_quantize_per_matrix_s, 1.5e-3, 1e-12);
  EXPECT_NEAR(back.step_overhead_s, 7.25, 1e-9);
}

TEST(Calibration, BadFilesNameLineAndColumn) {
  auto error = [](const std::string& text) {
    try {
      (void)sim::parse_calibration(text, "cal.yaml");
    } catch (const sim::ScenarioError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error("devices:\n  h20: {memroy: 0.5}\n").find("cal.yaml:2:"), std::string::npos);
  EXPECT_NE(error("devices:\n  h20: {memory: 1.5}\n").find("cal.yaml:2:"), std::string::npos);
  EXPECT_NE(error("devices:\n  no-such-gpu: {memory: 0.5}\n").find("cal.yaml:2:"), std::string::npos);
  EXPECT_NE(error("step_overhead: 5\n").find("cal.yaml:1:"), std::string::npos);
}

// The fit finds the optimum of its objective: publish a record's step time as simulated with a
// step overhead of 20 s and fit only the step overhead from its prior p. The step is x + c (c the
// phases, which the overhead does not move), so the objective is
//   (ln((x + c) / (20 + c)) / 0.15)^2 + (ln(x / p) / 0.7)^2,
// whose minimum a fine scan finds independently of Levenberg-Marquardt.
TEST(Calibration, FitRecoversTheParameterThatGeneratedTheFigures) {
  sim::Calibration truth = sim::builtin_calibration();
  truth.step_overhead_s = 20.0;
  const std::string p = write_record("recover", R"(validation:
  source: test
  figures:
    - {figure: step_time, published: 1 s, tolerance: 0.3}
)",
                                     1);
  std::vector<ValidationRecord> records{load_record(p, truth)};
  const auto sims = simulate_records(records, &truth, 1);
  records[0].figures[0].published = sims[0].at("step_time");
  auto params = calibration_parameters(records);
  params.erase(
      std::remove_if(params.begin(), params.end(), [](const CalibrationParameter& q) { return q.name != "step_overhead"; }),
      params.end());
  ASSERT_EQ(params.size(), 1u);
  CalibrateOptions o;
  o.leave_one_out = false;
  const auto fit = calibrate(records, params, sim::builtin_calibration(), o);
  const double c = records[0].figures[0].published - 20.0, prior = params[0].prior;
  double best = prior, best_cost = INFINITY;
  for (double x = 1.0; x <= 40.0; x += 1e-3) {
    const double cost = std::pow(std::log((x + c) / (20 + c)) / 0.15, 2) + std::pow(std::log(x / prior) / 0.7, 2);
    if (cost < best_cost) best_cost = cost, best = x;
  }
  std::cout << "[ figure ] fitted step overhead " << fit.values[0] << " s (scan " << best << " s, truth 20 s, prior " << prior
            << " s)\n";
  EXPECT_NEAR(fit.values[0], best, 0.02 * best);
  EXPECT_GT(fit.values[0], prior + 0.5 * (20 - prior));  // moved most of the way from the prior
}

// calibrate reuses a record's simulation while the calibration_inputs it reads are unchanged:
// every fitted parameter must be among the inputs of the records that use it, or a stale
// simulation would stand in for a new one.
TEST(Calibration, EveryFittedParameterIsACalibrationInput) {
  const auto records = repository(sim::builtin_calibration());
  const sim::Calibration base = sim::builtin_calibration();
  for (const auto& p : calibration_parameters(records)) {
    sim::Calibration moved = base;
    double& v = p.ref(moved);
    v = v * 0.9 + p.lower * 0.1 + 1e-9;
    bool seen = false;
    for (const auto& r : records)
      seen = seen || sim::calibration_inputs(base, r.scenario) != sim::calibration_inputs(moved, r.scenario);
    EXPECT_TRUE(seen) << p.name << " moves no record's calibration_inputs";
  }
}

// Leave-one-out predicts each record from a refit without it: two records whose step times were
// generated with step overheads of 10 s and 40 s pull the fitted overhead between them, and each
// one, left out, is predicted with the other's value, further from its own figure.
TEST(Calibration, LeaveOneOutPredictsEachRecordWithoutIt) {
  std::vector<ValidationRecord> records;
  for (const double overhead : {10.0, 40.0}) {
    sim::Calibration truth = sim::builtin_calibration();
    truth.step_overhead_s = overhead;
    const std::string p = write_record(fmt::format("loo_{}", static_cast<int>(overhead)), R"(validation:
  source: test
  figures:
    - {figure: step_time, published: 1 s, tolerance: 0.3}
)",
                                       1);
    records.push_back(load_record(p, truth));
    records.back().figures[0].published = simulate_records({records.back()}, &truth, 1)[0].at("step_time");
  }
  auto params = calibration_parameters(records);
  params.erase(
      std::remove_if(params.begin(), params.end(), [](const CalibrationParameter& q) { return q.name != "step_overhead"; }),
      params.end());
  const auto fit = calibrate(records, params, sim::builtin_calibration(), CalibrateOptions{});
  ASSERT_EQ(fit.loo.size(), 2u);
  EXPECT_GT(fit.values[0], 10.0);
  EXPECT_LT(fit.values[0], 40.0);
  // The 10 s record, left out, is predicted with the fit to the 40 s one: too slow; and the other way.
  EXPECT_GT(fit.loo[0].error, fit.outcomes[0].error + 0.05);
  EXPECT_LT(fit.loo[1].error, fit.outcomes[1].error - 0.05);
}

}  // namespace
}  // namespace rlsim::analysis
