// The output writers (analysis/output_dir): every write of `rlsim run`, `plan`, `drift` and
// `verify --out` fails in turn (ENOSPC, then EIO) through an injected file system, and the
// destination must then hold the previous output, byte for byte, with nothing left beside it;
// a write that succeeds must leave the complete new output. Also: the streamed trace.json is
// valid JSON, and its cap on engine iterations is kept and reported.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "analysis/drift.h"
#include "analysis/output_dir.h"
#include "analysis/plan.h"
#include "analysis/report.h"
#include "analysis/verify_outputs.h"
#include "models/graph/build.h"
#include "models/runtime/model.h"
#include "sim/scenario/scenario.h"

namespace rlsim::analysis {
namespace {

namespace fs = std::filesystem;

// Counts every operation on files and directories and fails the `fail_at`-th (1-based; 0: none)
// with `code`, as the operating system would: OutputError with strerror(code).
class FaultyFileSystem final : public FileSystem {
 public:
  FaultyFileSystem(int fail_at, int code) : fail_at_(fail_at), code_(code) {}

  std::unique_ptr<WritableFile> create(const fs::path& path) override {
    tick(path);
    return std::make_unique<File>(*this, path, system_file_system().create(path));
  }
  void create_directories(const fs::path& dir) override {
    tick(dir);
    system_file_system().create_directories(dir);
  }
  void rename(const fs::path& from, const fs::path& to) override {
    tick(to);
    system_file_system().rename(from, to);
  }
  void remove_all(const fs::path& path) override {
    tick(path);
    system_file_system().remove_all(path);
  }
  bool exists(const fs::path& path) override {
    tick(path);
    return system_file_system().exists(path);
  }
  int operations() const { return count_; }
  bool fired() const { return fail_at_ > 0 && count_ >= fail_at_; }

 private:
  class File final : public WritableFile {
   public:
    File(FaultyFileSystem& fs, fs::path path, std::unique_ptr<WritableFile> real)
        : fs_(fs), path_(std::move(path)), real_(std::move(real)) {}
    void append(std::string_view data) override {
      fs_.tick(path_);
      real_->append(data);
    }
    void close() override {
      fs_.tick(path_);
      real_->close();
    }

   private:
    FaultyFileSystem& fs_;
    fs::path path_;
    std::unique_ptr<WritableFile> real_;
  };

  void tick(const fs::path& path) {
    if (++count_ == fail_at_) output_failed(path, std::strerror(code_));
  }

  int fail_at_, code_;
  int count_ = 0;
};

// Every file under `root` (hidden ones too) by relative path, with its bytes.
std::map<std::string, std::string> snapshot(const fs::path& root) {
  std::map<std::string, std::string> out;
  if (!fs::exists(root)) return out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    const std::string rel = fs::relative(e.path(), root).string();
    if (e.is_directory()) {
      out[rel + "/"] = "";
    } else {
      std::ifstream in(e.path(), std::ios::binary);
      std::ostringstream s;
      s << in.rdbuf();
      out[rel] = s.str();
    }
  }
  return out;
}

// The paths whose bytes differ between two snapshots (gtest's own diff of megabyte strings would
// take minutes), "" when none do.
std::string differences(const std::map<std::string, std::string>& a, const std::map<std::string, std::string>& b) {
  std::string out;
  for (const auto& [k, v] : a) {
    const auto it = b.find(k);
    if (it == b.end()) {
      out += " -" + k;
    } else if (it->second != v) {
      out += " ~" + k;
    }
  }
  for (const auto& [k, v] : b) {
    if (a.find(k) == a.end()) out += " +" + k;
  }
  return out;
}

// Without the ".NAME.old" a swallowed failure to remove the replaced output may leave beside it
// (the next write removes it): the output itself is complete either way.
std::map<std::string, std::string> without_old(std::map<std::string, std::string> m) {
  for (auto it = m.begin(); it != m.end();) {
    bool old = false;  // the leftover itself, or anything in it
    for (const auto& part : fs::path(it->first)) {
      const std::string name = part.string();
      old = old || (name.size() > 4 && name[0] == '.' && name.compare(name.size() - 4, 4, ".old") == 0);
    }
    it = old ? m.erase(it) : std::next(it);
  }
  return m;
}

// `write(false)` writes the previous output under `root`, `write(true)` the new one. Fails each
// operation of the new write in turn with ENOSPC and EIO; `*ops` is how many operations it has.
void expect_all_or_nothing(const fs::path& root, const std::function<void(bool)>& write, int* ops_out) {
  fs::remove_all(root);
  fs::create_directories(root);
  write(true);
  const auto fresh = snapshot(root);
  write(false);
  const auto previous = snapshot(root);
  EXPECT_NE(differences(fresh, previous), "") << "the two outputs must differ for the test to tell them apart";
  FaultyFileSystem counter(0, 0);
  {
    const ScopedFileSystem use(counter);
    write(true);
  }
  const int ops = counter.operations();
  *ops_out = ops;
  std::printf("[ fault injection ] %d operations, each failed in turn with ENOSPC and with EIO\n", ops);
  EXPECT_EQ(differences(snapshot(root), fresh), "");
  for (const int code : {ENOSPC, EIO}) {
    for (int n = 1; n <= ops; ++n) {
      write(false);
      ASSERT_EQ(differences(snapshot(root), previous), "");
      FaultyFileSystem faulty(n, code);
      bool failed = false;
      try {
        const ScopedFileSystem use(faulty);
        write(true);
      } catch (const OutputError& e) {
        failed = true;
        EXPECT_NE(std::string(e.what()).find(std::strerror(code)), std::string::npos) << e.what();
      }
      ASSERT_TRUE(faulty.fired()) << "operation " << n << " of " << ops << " was not reached";
      if (failed) {
        ASSERT_EQ(differences(snapshot(root), previous), "")
            << "operation " << n << " of " << ops << " failed with " << std::strerror(code);
      } else {
        ASSERT_EQ(differences(without_old(snapshot(root)), fresh), "")
            << "operation " << n << " failed silently but left no new output";
      }
    }
  }
}

fs::path scratch(const std::string& name) {
  return fs::temp_directory_path() /
         ("rlsim_output_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" + name);
}

fs::path scenarios() { return fs::path(RLSIM_SOURCE_DIR) / "scenarios"; }

// A tiny run: 2 steps of 3 prompts x 2 samples, five engine iterations traced.
sim::Scenario tiny_run(int seed) {
  sim::Scenario s = sim::load_scenario((scenarios() / "default.yaml").string(),
                                       {"steps=2", "workload.prompts_per_step=3", "workload.samples_per_prompt=2",
                                        "workload.response_tokens={dist: uniform, min: 8, max: 64}",
                                        "seed=" + std::to_string(seed), "output.trace_max_iterations=5"});
  s.output.plots = false;
  return s;
}

TEST(FaultInjection, RunOutputsAreAllOrNothing) {
  const fs::path root = scratch("run");
  const sim::Scenario a = tiny_run(1), b = tiny_run(2);
  int ops = 0;
  expect_all_or_nothing(
      root, [&](bool fresh) { run_to_directory((root / "out").string(), fresh ? b : a, PrecisionFlowVerdict{}); }, &ops);
  EXPECT_GT(ops, 20);  // six files, each created, appended to and closed; the directory swap
  fs::remove_all(root);
}

TEST(FaultInjection, PlanOutputsAreAllOrNothing) {
  const fs::path root = scratch("plan");
  fs::create_directories(root);
  fs::copy_file(scenarios() / "default.yaml", root / "base.yaml");
  std::ofstream(root / "study.yaml") << "base: base.yaml\nsweep:\n  rollout.tensor_parallel: [1, 2]\n";
  Study st = load_study((root / "study.yaml").string());
  st.plots = false;
  VerifyCache cache;
  std::vector<PointResult> both = {evaluate_point(st, 0, cache), evaluate_point(st, 1, cache)};
  rank_points(st, both);
  std::vector<PointResult> one = {both[0]};
  const fs::path out = root / "results";
  int ops = 0;
  expect_all_or_nothing(
      out,
      [&](bool fresh) {
        std::vector<std::string> warnings;
        write_plan_outputs((out / "plan").string(), st, fresh ? both : one, &warnings);
      },
      &ops);
  EXPECT_GT(ops, 8);
  fs::remove_all(root);
}

TEST(FaultInjection, DriftOutputsAreAllOrNothing) {
  const models::ModelWeights w =
      models::load_llama2c((fs::path(RLSIM_SHARED_DIR) / "models/stories260K/stories260K.bin").string());
  DriftOptions o;
  o.pairs = {parse_drift_pair("fp32:bf16")};
  o.lengths = {4, 8};
  o.prompts = {{1, 403, 407, 261}};
  o.samples = 2;
  o.bootstrap = 20;
  const auto first = run_drift(w, o, nullptr);
  o.seed = 2;
  const auto second = run_drift(w, o, nullptr);
  const fs::path root = scratch("drift");
  int ops = 0;
  expect_all_or_nothing(
      root, [&](bool fresh) { write_drift_outputs(root / "drift", fresh ? second : first, false); }, &ops);
  EXPECT_GT(ops, 8);
  fs::remove_all(root);
}

TEST(FaultInjection, VerifyOutputsAreAllOrNothing) {
  const sim::Scenario s = sim::load_scenario((scenarios() / "verify-qwen3-8b-bf16-train-fp8-block-rollout.yaml").string());
  const auto train = models::build_precision_graph(s.model, s.training.precision, models::GraphSide::kTraining);
  const auto infer_fp8 = models::build_precision_graph(s.model, rollout_recipe(s), models::GraphSide::kInference);
  const auto infer_bf16 = models::build_precision_graph(s.model, s.training.precision, models::GraphSide::kInference);
  const models::VerifyResult mismatched = models::verify(train, infer_fp8, {});
  const models::VerifyResult matched = models::verify(train, infer_bf16, {});
  const fs::path root = scratch("verify");
  VerifyOutputPaths paths;
  paths.json = (root / "verdict.json").string();
  paths.dot_dir = (root / "dot").string();
  paths.graphml_dir = (root / "graphml").string();
  paths.title = "test";
  int ops = 0;
  expect_all_or_nothing(
      root, [&](bool fresh) { write_verify_outputs(paths, fresh ? matched : mismatched, train, fresh ? infer_bf16 : infer_fp8); },
      &ops);
  EXPECT_GT(ops, 15);  // five files, each created, appended, closed and renamed into place
  fs::remove_all(root);
}

// (engine iterations, phase spans) of a trace: complete events on an engine's track, and the rest.
std::pair<int, int> count_spans(const nlohmann::json& trace) {
  std::map<int, std::string> tracks;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") tracks[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
  }
  int iterations = 0, phases = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    (tracks.at(e["tid"].get<int>()).rfind("rollout engine ", 0) == 0 ? iterations : phases) += 1;
  }
  return {iterations, phases};
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// The streamed trace is one JSON document; engine iterations past the cap are left out and
// counted in a warning, phases never are.
TEST(StreamedTrace, IsValidJsonAndKeepsItsCap) {
  const fs::path root = scratch("trace");
  sim::Scenario s = tiny_run(1);
  const RunSummary u = run_to_directory((root / "out").string(), s, PrecisionFlowVerdict{});
  const auto [iterations, phases] = count_spans(read_json(root / "out" / "trace.json"));
  EXPECT_EQ(iterations, 5);
  EXPECT_GE(phases, 2 * 3);  // every step's rollout, training and sync phases
  bool warned = false;
  for (const auto& w : u.warnings)
    warned = warned || w.find("trace.json holds the first 5 engine iterations") != std::string::npos;
  EXPECT_TRUE(warned);
  // Uncapped: the same phases, more iterations, no warning.
  s.output.trace_max_iterations = 1'000'000;
  const RunSummary all = run_to_directory((root / "out").string(), s, PrecisionFlowVerdict{});
  const auto [iterations_all, phases_all] = count_spans(read_json(root / "out" / "trace.json"));
  EXPECT_EQ(phases_all, phases);
  EXPECT_GT(iterations_all, 5);
  for (const auto& w : all.warnings) EXPECT_EQ(w.find("trace.json holds"), std::string::npos) << w;
  fs::remove_all(root);
}

}  // namespace
}  // namespace rlsim::analysis
