// Study YAML (`rlsim plan`): the input is the study file, beside a copy of the default scenario as
// base.yaml. A study that loads must give its first point's scenario or a ScenarioError, and its
// plan.json must serialise (every string in it valid UTF-8).
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "analysis/plan.h"
#include "sim/scenario/study.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rlsim;
  static const bool base_ready = [] {
    std::filesystem::copy_file(std::filesystem::path(RLSIM_SOURCE_DIR) / "scenarios" / "default.yaml",
                               std::filesystem::path(fuzz::work_dir()) / "base.yaml",
                               std::filesystem::copy_options::overwrite_existing);
    return true;
  }();
  (void)base_ready;
  analysis::Study st;
  if (!fuzz::accepts([&] { st = analysis::load_study(fuzz::input_file(data, size, "study.yaml")); })) return 0;
  if (st.points() > 0) fuzz::accepts([&] { (void)sim::load_scenario(st.base, st.overrides(0), "sweep"); });
  (void)analysis::plan_json(st, {}).dump();
  return 0;
}
