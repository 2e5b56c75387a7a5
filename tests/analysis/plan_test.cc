// Capacity planning (analysis/plan): study files, point enumeration, ranking and the Pareto front
// against brute force, determinism across job counts, and the ready studies of scenarios/ with the
// findings they exist to show.
#include "analysis/plan.h"

#include <csv.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>

#include "analysis/plots.h"
#include "analysis/report.h"
#include "sim/pipeline/pipeline.h"

namespace rlsim {
namespace {

namespace fs = std::filesystem;
using analysis::PointResult;
using analysis::Study;

fs::path scenario_dir() { return fs::path(RLSIM_SOURCE_DIR) / "scenarios"; }

// A study file in a fresh temporary folder beside a copy of the default scenario as base.yaml.
class PlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rlsim_plan_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                        "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy_file(scenario_dir() / "default.yaml", dir_ / "base.yaml");
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& text, const std::string& name = "study.yaml") {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }

  // The message of the sim::ScenarioError that load_study throws for `text`.
  std::string study_error(const std::string& text) {
    try {
      analysis::load_study(write(text));
    } catch (const sim::ScenarioError& e) {
      return e.what();
    }
    return "(no error)";
  }

  fs::path dir_;
};

// Rows of a CSV text, parsed by libcsv.
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  struct State {
    std::vector<std::vector<std::string>> rows{{}};
  } st;
  csv_parser p;
  csv_init(&p, CSV_STRICT | CSV_APPEND_NULL);
  auto field = [](void* s, std::size_t n, void* data) {
    static_cast<State*>(data)->rows.back().emplace_back(static_cast<const char*>(s), n);
  };
  auto row = [](int, void* data) { static_cast<State*>(data)->rows.emplace_back(); };
  csv_parse(&p, text.data(), text.size(), field, row, &st);
  csv_fini(&p, field, row, &st);
  csv_free(&p);
  st.rows.pop_back();
  return st.rows;
}

TEST_F(PlanTest, EnumeratesTheCartesianProductLastKeyFastest) {
  const Study st = analysis::load_study(write(R"(base: base.yaml
sweep:
  cluster.nodes: [1, 2]
  rollout.precision: [bf16, fp8-block, int4-w4a16-g32]
  pair:
    rollout.tensor_parallel: [1, 2]
    rollout.max_num_seqs: [64, 128]
)"));
  ASSERT_EQ(st.points(), 12u);
  EXPECT_EQ(st.columns(),
            (std::vector<std::string>{"cluster.nodes", "rollout.precision", "rollout.tensor_parallel", "rollout.max_num_seqs"}));
  EXPECT_EQ(st.coordinates(0), (std::vector<std::size_t>{0, 0, 0}));
  EXPECT_EQ(st.coordinates(1), (std::vector<std::size_t>{0, 0, 1}));
  EXPECT_EQ(st.coordinates(2), (std::vector<std::size_t>{0, 1, 0}));
  EXPECT_EQ(st.coordinates(11), (std::vector<std::size_t>{1, 2, 1}));
  EXPECT_EQ(st.overrides(7), (std::vector<std::string>{"cluster.nodes=2", "rollout.precision=bf16", "rollout.tensor_parallel=2",
                                                       "rollout.max_num_seqs=128"}));
  EXPECT_EQ(analysis::point_settings(st, 7),
            "cluster.nodes=2 rollout.precision=bf16 rollout.tensor_parallel=2 rollout.max_num_seqs=128");
  // Every point is distinct.
  std::set<std::vector<std::string>> seen;
  for (std::size_t i = 0; i < st.points(); ++i) seen.insert(st.overrides(i));
  EXPECT_EQ(seen.size(), 12u);
  // Defaults: step-time objective, fits-memory constraint, the first two varying axes in the heatmap.
  EXPECT_EQ(st.objective, analysis::Objective::kStepTime);
  EXPECT_TRUE(st.constraints.fits_memory);
  EXPECT_EQ(st.heatmap, (std::vector<std::string>{"cluster.nodes", "rollout.precision"}));
  EXPECT_EQ(st.out_dir, "out/study");
  EXPECT_EQ(st.base, (dir_ / "base.yaml").string());
}

TEST_F(PlanTest, ReadsObjectiveConstraintsPlotsAndOutput) {
  const Study st = analysis::load_study(write(R"(name: my study
base: base.yaml
sweep:
  cluster.device: [h100-sxm]
  cluster.nodes: [1, 2]
objective: device_hours_per_step
constraints: {fits_memory: false, max_step_time: 15 min, max_device_hours_per_step: 2.5, max_devices: 64, precision_consistent: true}
plots: {heatmap: [cluster.nodes]}
output: {dir: elsewhere, plots: false}
)"));
  EXPECT_EQ(st.name, "my study");
  EXPECT_EQ(st.objective, analysis::Objective::kDeviceHoursPerStep);
  EXPECT_FALSE(st.constraints.fits_memory);
  EXPECT_DOUBLE_EQ(*st.constraints.max_step_time_s, 900.0);
  EXPECT_DOUBLE_EQ(*st.constraints.max_device_hours_per_step, 2.5);
  EXPECT_EQ(*st.constraints.max_devices, 64);
  EXPECT_TRUE(st.constraints.precision_consistent);
  EXPECT_EQ(st.heatmap, (std::vector<std::string>{"cluster.nodes", "cluster.nodes"}));
  EXPECT_EQ(st.out_dir, "elsewhere");
  EXPECT_FALSE(st.plots);
}

TEST_F(PlanTest, BadStudiesNameFileLineAndWhatWasExpected) {
  const std::string head = "base: base.yaml\n";
  EXPECT_NE(
      study_error(head + "sweep:\n  cluster.nodes: [1, 2]\nobjectiv: step_time\n").find("study.yaml:4:1: unknown key 'objectiv'"),
      std::string::npos);
  EXPECT_NE(
      study_error(head + "sweep:\n  cluster.nodes: []\n").find("study.yaml:3:18: sweep 'cluster.nodes' must be a non-empty list"),
      std::string::npos);
  EXPECT_NE(study_error(head + "sweep:\n  cluster.nodes: 2\n").find("must be a non-empty list"), std::string::npos);
  EXPECT_NE(study_error(head + "sweep:\n  cluster.nodes: [1, 2, 1]\n")
                .find("study.yaml:3:25: sweep 'cluster.nodes': the value 1 appears twice"),
            std::string::npos);
  EXPECT_NE(study_error(head + "sweep:\n  rollout.precision: [bf16]\n  rollout.precision.kv_cache: [bf16]\n")
                .find("lies inside 'rollout.precision'"),
            std::string::npos);
  EXPECT_NE(study_error(head + "sweep:\n  cluster.nodes: [1]\n  g: {cluster.nodes: [2]}\n")
                .find("study.yaml:4:7: sweep: 'cluster.nodes' is swept twice"),
            std::string::npos);
  EXPECT_NE(study_error(head + "sweep:\n  g: {cluster.nodes: [1, 2], rollout.tensor_parallel: [1]}\n")
                .find("has 1 values but 'cluster.nodes' has 2"),
            std::string::npos);
  EXPECT_NE(study_error(head + "sweep:\n  g: {cluster.nodes: [1, 1], steps: [2, 2]}\n").find("setting 1 appears twice"),
            std::string::npos);
  EXPECT_NE(study_error(head + "sweep:\n  cluster..nodes: [1]\n").find("is not a dotted scenario key"), std::string::npos);
  EXPECT_NE(study_error(head + "sweep:\n  cluster.nodes: [1]\nobjective: speed\n")
                .find("study.yaml:4:12: 'objective': unknown value 'speed'"),
            std::string::npos);
  EXPECT_NE(study_error(head + "sweep:\n  cluster.nodes: [1]\nconstraints: {max_step_time: 900}\n")
                .find("study.yaml:4:30: 'constraints.max_step_time'"),
            std::string::npos);
  EXPECT_NE(
      study_error(head + "sweep:\n  cluster.nodes: [1]\nconstraints: {fits: true}\n").find("unknown key 'constraints.fits'"),
      std::string::npos);
  EXPECT_NE(study_error(head + "sweep:\n  cluster.nodes: [1]\nplots: {heatmap: [cluster.devices]}\n")
                .find("plots.heatmap: 'cluster.devices' is not a sweep key or group"),
            std::string::npos);
  EXPECT_NE(study_error("base: nowhere.yaml\nsweep:\n  cluster.nodes: [1]\n")
                .find("study.yaml:1:7: base scenario 'nowhere.yaml' not found"),
            std::string::npos);
  EXPECT_NE(study_error("sweep:\n  cluster.nodes: [1]\n").find("missing required key 'base'"), std::string::npos);
  EXPECT_NE(study_error(head).find("missing 'sweep'"), std::string::npos);
  EXPECT_NE(study_error(head + "sweep: {a.b: [1, 2]\n").find("YAML syntax error"), std::string::npos);
  // 100 x 100 x 101 = 1,010,000 points: over the limit.
  std::string big = head + "sweep:\n";
  for (const char* k : {"a.x", "a.y", "a.z"}) {
    big += std::string("  ") + k + ": [";
    for (int i = 0; i < (std::string(k) == "a.z" ? 101 : 100); ++i) big += (i ? ", " : "") + std::to_string(i);
    big += "]\n";
  }
  EXPECT_NE(study_error(big).find("1010000 points; at most 1000000"), std::string::npos);
}

TEST_F(PlanTest, InvalidPointsAreRecordedWithTheOverrideThatFailed) {
  const Study st = analysis::load_study(write("base: base.yaml\nsweep:\n  rollout.tensor_parallel: [1, 3]\n"));
  analysis::VerifyCache cache;
  const PointResult ok = analysis::evaluate_point(st, 0, cache);
  const PointResult bad = analysis::evaluate_point(st, 1, cache);
  EXPECT_TRUE(ok.valid);
  EXPECT_FALSE(bad.valid);
  EXPECT_NE(bad.error.find("sweep rollout.tensor_parallel=3: rollout.tensor_parallel (3) must divide the 8 rollout devices"),
            std::string::npos)
      << bad.error;
  std::vector<PointResult> all = {ok, bad};
  analysis::rank_points(st, all);
  EXPECT_EQ(all[0].rank, 1);
  EXPECT_EQ(all[1].rank, 0);
  EXPECT_EQ(all[1].violations, std::vector<std::string>{"invalid"});
  const auto rows = parse_csv(analysis::results_csv(st, all));
  ASSERT_EQ(rows.size(), 3u);
  const auto& h = rows[0];
  auto col = [&](const std::string& name) { return static_cast<std::size_t>(std::find(h.begin(), h.end(), name) - h.begin()); };
  EXPECT_EQ(rows[2][col("status")], "invalid");
  EXPECT_EQ(rows[2][col("fits")], "false");
  EXPECT_EQ(rows[2][col("step_time_s")], "");
  EXPECT_EQ(rows[2][col("error")], bad.error);
  EXPECT_EQ(rows[1][col("rollout.tensor_parallel")], "1");
}

TEST_F(PlanTest, AnUnknownSweptKeyIsAnErrorOfTheStudy) {
  const Study st = analysis::load_study(write("base: base.yaml\nsweep:\n  rollout.precison: [bf16, fp8-block]\n"));
  analysis::VerifyCache cache;
  EXPECT_THROW(analysis::evaluate_point(st, 0, cache), sim::ScenarioKeyError);
  EXPECT_THROW(analysis::evaluate_points(st, {0, 1}, 2), sim::ScenarioKeyError);
}

TEST_F(PlanTest, APointReadsAsRlsimRunOfItsScenario) {
  const Study st = analysis::load_study(
      write("base: base.yaml\nsweep:\n  cluster.device: [h200]\n  rollout.precision: [bf16, int4-w4a16-g32]\n"));
  analysis::VerifyCache cache;
  const PointResult p = analysis::evaluate_point(st, 1, cache);
  const sim::Scenario s =
      sim::load_scenario((dir_ / "base.yaml").string(), {"cluster.device=h200", "rollout.precision=int4-w4a16-g32"});
  sim::NullSink sink;
  sim::SimResult r = sim::simulate(s, sink);
  const auto j = analysis::summary_json(analysis::summarize(s, r, analysis::check_precision_flow(s)));
  EXPECT_EQ(p.step_time_s, j["step_time_s"]["mean"].get<double>());
  EXPECT_EQ(p.phase_s[0], j["phases_s"]["rollout"].get<double>());
  EXPECT_EQ(p.peak_training_bytes, j["peak_memory_bytes"]["training"].get<double>());
  EXPECT_EQ(p.verify, "inconsistent");  // BF16 training, INT4 rollout
  EXPECT_EQ(p.verify, j["verify"]["verdict"].get<std::string>());
  EXPECT_EQ(p.devices, 8);
  EXPECT_DOUBLE_EQ(p.device_hours_per_step, p.step_time_s * 8 / 3600);
  // Round trip through the MPI payload is exact.
  const PointResult q = analysis::point_from_json(nlohmann::json::parse(analysis::point_to_json(p).dump()));
  EXPECT_EQ(analysis::point_to_json(q), analysis::point_to_json(p));
  EXPECT_EQ(q.step_time_s, p.step_time_s);
}

PointResult synthetic_point(std::size_t index, double step, double devices, bool fits = true) {
  PointResult p;
  p.index = index;
  p.valid = true;
  p.steps = 1;
  p.fits = fits;
  p.oom_role = fits ? "" : "training";
  p.step_time_s = step;
  p.devices = static_cast<int>(devices);
  p.device_hours_per_step = step * devices / 3600;
  p.phase_s.assign(sim::kPhases.size(), 0.0);
  p.verify = "consistent";
  return p;
}

TEST_F(PlanTest, RanksByObjectiveUnderConstraints) {
  Study st = analysis::load_study(write("base: base.yaml\nsweep:\n  cluster.nodes: [1, 2, 3, 4, 5]\n"));
  // step 100 s on 8 devices; 60 s on 16; 60 s on 24; 50 s on 64 (too slow for nothing, but OOM); 500 s on 4.
  std::vector<PointResult> r = {synthetic_point(0, 100, 8), synthetic_point(1, 60, 16), synthetic_point(2, 60, 24),
                                synthetic_point(3, 50, 64, false), synthetic_point(4, 500, 4)};
  st.constraints.max_step_time_s = 400;
  analysis::rank_points(st, r);
  EXPECT_EQ(r[1].rank, 1);  // 60 s, fewer device-hours than point 2 (the tie-break)
  EXPECT_EQ(r[2].rank, 2);
  EXPECT_EQ(r[0].rank, 3);
  EXPECT_EQ(r[3].rank, 0);
  EXPECT_EQ(r[3].violations, std::vector<std::string>{"fits_memory"});
  EXPECT_EQ(r[4].violations, std::vector<std::string>{"max_step_time"});
  EXPECT_EQ(analysis::recommended(r)->index, 1u);
  st.objective = analysis::Objective::kDeviceHoursPerStep;
  analysis::rank_points(st, r);
  EXPECT_EQ(r[0].rank, 1);  // 0.222 device-hours
  EXPECT_EQ(r[1].rank, 2);  // 0.267
  EXPECT_EQ(r[2].rank, 3);  // 0.4
  st.constraints.max_devices = 10;
  st.constraints.max_step_time_s.reset();
  analysis::rank_points(st, r);
  EXPECT_EQ(r[0].rank, 1);  // 0.222 device-hours on 8 devices
  EXPECT_EQ(r[4].rank, 2);  // 0.556 on 4 (no longer over the step-time limit)
  EXPECT_EQ(r[1].violations, std::vector<std::string>{"max_devices"});
  r[4].verify = "inconsistent";
  st.constraints.precision_consistent = true;
  analysis::rank_points(st, r);
  EXPECT_EQ(r[0].rank, 1);
  EXPECT_EQ(r[4].rank, 0);
  EXPECT_EQ(r[4].violations, std::vector<std::string>{"precision_consistent"});
  // Nothing meets: no recommendation.
  st.constraints.max_devices = 1;
  analysis::rank_points(st, r);
  EXPECT_EQ(analysis::recommended(r), nullptr);
  std::ostringstream table;
  analysis::print_ranking(table, st, r, 20);
  EXPECT_NE(table.str().find("recommended: none"), std::string::npos);
}

TEST_F(PlanTest, ParetoFrontMatchesBruteForce) {
  const Study st = analysis::load_study(write("base: base.yaml\nsweep:\n  cluster.nodes: [1]\n"));
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<PointResult> r;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      // Coarse values so that ties in either metric and duplicates occur.
      const double step = 10.0 * static_cast<double>(1 + rng() % 8);
      const double dev = 8.0 * static_cast<double>(1 + rng() % 6);
      r.push_back(synthetic_point(static_cast<std::size_t>(i), step, dev, rng() % 5 != 0));
    }
    analysis::rank_points(st, r);
    for (const auto& p : r) {
      bool dominated = false;
      for (const auto& q : r) {
        if (!q.fits) continue;
        const bool no_worse = q.step_time_s <= p.step_time_s && q.device_hours_per_step <= p.device_hours_per_step;
        const bool better = q.step_time_s < p.step_time_s || q.device_hours_per_step < p.device_hours_per_step;
        dominated = dominated || (no_worse && better);
      }
      EXPECT_EQ(p.pareto, p.fits && !dominated) << "trial " << trial << " point " << p.index;
    }
  }
}

TEST_F(PlanTest, ResultsDoNotDependOnTheJobCount) {
  const Study st = analysis::load_study(write(R"(base: base.yaml
sweep:
  cluster.device: [h100-sxm, h200]
  cluster.nodes: [1, 2]
  rollout.precision: [bf16, fp8-block, int4-w4a16-g32]
  rollout.tensor_parallel: [1, 3, 8]
constraints: {max_step_time: 300 s}
)"));
  st.points();
  std::vector<std::size_t> all(st.points());
  std::iota(all.begin(), all.end(), std::size_t{0});
  auto csv = [&](int jobs) {
    auto r = analysis::evaluate_points(st, all, jobs);
    analysis::rank_points(st, r);
    return analysis::results_csv(st, r);
  };
  const std::string one = csv(1);
  EXPECT_EQ(csv(2), one);
  EXPECT_EQ(csv(5), one);
  // The points split as MPI ranks split them (every second point), gathered, give the same CSV.
  std::vector<std::size_t> even, odd;
  for (std::size_t i : all) (i % 2 ? odd : even).push_back(i);
  auto a = analysis::evaluate_points(st, even, 1);
  auto b = analysis::evaluate_points(st, odd, 2);
  std::vector<PointResult> merged(st.points());
  for (auto& p : a) merged[p.index] = analysis::point_from_json(analysis::point_to_json(p));
  for (auto& p : b) merged[p.index] = analysis::point_from_json(analysis::point_to_json(p));
  analysis::rank_points(st, merged);
  EXPECT_EQ(analysis::results_csv(st, merged), one);
  // TP 3 does not divide 8 devices: 1/3 of the points are invalid and recorded.
  const auto rows = parse_csv(one);
  EXPECT_EQ(std::count_if(rows.begin() + 1, rows.end(), [](const auto& row) { return row[4] == "3"; }), 12);
  EXPECT_EQ(std::count_if(rows.begin() + 1, rows.end(), [](const auto& row) { return row[5] == "invalid"; }), 12);
}

// The ready studies of scenarios/ ---------------------------------------------------------------

std::vector<PointResult> run_study(const Study& st) {
  std::vector<std::size_t> all(st.points());
  std::iota(all.begin(), all.end(), std::size_t{0});
  auto r = analysis::evaluate_points(st, all, 2);
  analysis::rank_points(st, r);
  return r;
}

// The point whose settings contain every "key=value" of `want`.
const PointResult& find(const Study& st, const std::vector<PointResult>& r, const std::vector<std::string>& want) {
  for (const auto& p : r) {
    std::string s = " ";  // built stepwise: GCC 12 warns (-Wrestrict, false positive) on " " + string&&
    s += analysis::point_settings(st, p.index);
    s += " ";
    if (std::all_of(want.begin(), want.end(), [&](const std::string& w) { return s.find(" " + w + " ") != std::string::npos; }))
      return p;
  }
  throw std::runtime_error("no such point");
}

TEST(ReadyStudies, KimiK2Int4OnOneNodeBeatsFp8OnTwo) {
  // Reduced: one RL step per point (the study's base runs two).
  Study st = analysis::load_study((scenario_dir() / "study-kimi-k2-rollout-h200.yaml").string());
  st.sets = {"steps=1"};
  ASSERT_EQ(st.points(), 9u);
  const auto r = run_study(st);
  const auto& int4_1 = find(st, r, {"rollout.precision=int4-w4a16-g32", "rollout.tensor_parallel=8"});
  const auto& fp8_1 = find(st, r, {"rollout.precision=fp8-block", "rollout.tensor_parallel=8"});
  const auto& fp8_2 = find(st, r, {"rollout.precision=fp8-block", "rollout.tensor_parallel=16"});
  const auto& bf16_2 = find(st, r, {"rollout.precision=bf16", "rollout.tensor_parallel=16"});
  const auto& bf16_4 = find(st, r, {"rollout.precision=bf16", "rollout.tensor_parallel=32"});
  // ~1 TB of FP8 weights do not fit 8 x 141 GB at 0.85 utilisation; 2 TB of BF16 need four nodes.
  EXPECT_FALSE(fp8_1.fits);
  EXPECT_EQ(fp8_1.oom_role, "rollout");
  EXPECT_FALSE(bf16_2.fits);
  EXPECT_TRUE(bf16_4.fits);
  EXPECT_TRUE(int4_1.fits);
  EXPECT_TRUE(fp8_2.fits);
  // The slime finding: INT4 on one node rolls out faster than FP8 on two.
  EXPECT_LT(int4_1.phase_s[0], fp8_2.phase_s[0]);
  EXPECT_LT(int4_1.step_time_s, fp8_2.step_time_s);
  EXPECT_EQ(analysis::recommended(r)->index, int4_1.index);
  EXPECT_EQ(int4_1.verify, "consistent");   // INT4 QAT training, INT4 rollout
  EXPECT_EQ(fp8_2.verify, "inconsistent");  // BF16 training, FP8 rollout
  EXPECT_EQ(std::count_if(r.begin(), r.end(), [](const PointResult& p) { return p.fits; }), 6);
}

TEST(ReadyStudies, Qwen3H200VersusAscend950FollowsHbmBandwidth) {
  const Study st = analysis::load_study((scenario_dir() / "study-qwen3-8b-h200-vs-ascend-950.yaml").string());
  ASSERT_EQ(st.points(), 36u);
  const auto r = run_study(st);
  for (const char* prec : {"bf16", "fp8-block", "mxfp8", "int4-w4a16-g32"}) {
    for (const char* nodes : {"1", "2", "4"}) {
      const std::string p = std::string("rollout.precision=") + prec, n = std::string("cluster.nodes=") + nodes;
      const auto& h200 = find(st, r, {"cluster.device=h200", p, n});
      const auto& dt = find(st, r, {"cluster.device=ascend-950dt", p, n});
      const auto& pr = find(st, r, {"cluster.device=ascend-950pr", p, n});
      ASSERT_TRUE(h200.fits && dt.fits && pr.fits) << prec << " " << nodes;
      // Decode is bound by HBM bandwidth: 4.8 > 4.0 > 1.6 TB/s.
      EXPECT_LT(h200.phase_s[0], dt.phase_s[0]) << prec << " " << nodes;
      EXPECT_LT(dt.phase_s[0], pr.phase_s[0]) << prec << " " << nodes;
    }
  }
  // More nodes: faster steps, more device-hours (the rollout does not scale perfectly).
  const auto& one = find(st, r, {"cluster.device=h200", "rollout.precision=fp8-block", "cluster.nodes=1"});
  const auto& four = find(st, r, {"cluster.device=h200", "rollout.precision=fp8-block", "cluster.nodes=4"});
  EXPECT_LT(four.step_time_s, one.step_time_s);
  EXPECT_GT(four.device_hours_per_step, one.device_hours_per_step);
  // Objective device-hours: the recommendation is on one node.
  const PointResult* best = analysis::recommended(r);
  ASSERT_NE(best, nullptr);
  EXPECT_EQ(best->devices, 8);
  EXPECT_TRUE(best->pareto);
}

TEST(ReadyStudies, RolloutShareGrowsWithMaxResponseLength) {
  const Study st = analysis::load_study((scenario_dir() / "study-rollout-length-qwen3-8b.yaml").string());
  ASSERT_EQ(st.points(), 8u);
  const auto r = run_study(st);
  for (const char* prec : {"bf16", "fp8-block"}) {
    double share = 0, step = 0;
    for (const char* len : {"4096", "8192", "16384", "32768"}) {
      const auto& p = find(st, r, {std::string("workload.response_tokens.max=") + len, std::string("rollout.precision=") + prec});
      ASSERT_TRUE(p.fits);
      EXPECT_GT(p.rollout_share, share) << prec << " " << len;
      EXPECT_GT(p.step_time_s, step) << prec << " " << len;
      share = p.rollout_share;
      step = p.step_time_s;
    }
    // At 32K the rollout dominates the step: about 70 % of a DAPO step at 20K (ANCHORS.md,
    // off-policy blog), more at 32K; the bound leaves room for the assumed length distribution.
    EXPECT_GT(share, 0.6);
  }
}

TEST_F(PlanTest, WritesEveryOutputAtOnce) {
  Study st =
      analysis::load_study(write("base: base.yaml\nsweep:\n  cluster.nodes: [1, 2]\n  rollout.precision: [bf16, fp8-block]\n"));
  const auto r = run_study(st);
  std::vector<std::string> warnings;
  const fs::path out = dir_ / "out";
  analysis::write_plan_outputs(out.string(), st, r, &warnings);
  EXPECT_TRUE(fs::is_regular_file(out / "results.csv"));
  EXPECT_FALSE(fs::exists(dir_ / ".out.tmp"));
  const auto j = nlohmann::json::parse(std::ifstream(out / "plan.json"));
  EXPECT_EQ(j["points"]["total"].get<int>(), 4);
  EXPECT_EQ(j["recommended"]["point"].get<std::size_t>(), analysis::recommended(r)->index);
  EXPECT_EQ(j["recommended"]["settings"]["rollout.precision"].get<std::string>(),
            st.sweep[1].values[st.coordinates(analysis::recommended(r)->index)[1]][0]);
  if (analysis::gnuplot_available()) {
    EXPECT_TRUE(warnings.empty()) << warnings.front();
    for (const char* png : {"step_time_heatmap.png", "fit_map.png", "pareto.png"})
      EXPECT_GT(fs::file_size(out / png), 1000u) << png;
  }
}

}  // namespace
}  // namespace rlsim
