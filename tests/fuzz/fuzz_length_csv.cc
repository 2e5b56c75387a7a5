// The length-distribution CSV (workload.response_tokens: {dist: csv, file, column}): the input is
// lengths.csv, read through a fixed scenario. A distribution that loads draws only values of its
// column, within its bounds.
#include <algorithm>
#include <cstdint>

#include "sim/engine/random.h"
#include "sim/scenario/scenario.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rlsim;
  static const std::string scenario = fuzz::input_file(
      "name: fuzz\nmodel: qwen3-8b\ncluster: {device: h100-sxm, nodes: 1, devices_per_node: 8}\n"
      "workload:\n  prompts_per_step: 4\n  samples_per_prompt: 2\n  prompt_tokens: {dist: fixed, value: 16}\n"
      "  response_tokens: {dist: csv, file: lengths.csv, column: response_tokens}\n",
      "scenario.yaml");
  static const bool harness_ok = [] {  // the fixed scenario must load with a good CSV, or nothing is fuzzed
    fuzz::input_file("response_tokens\n12\n", "lengths.csv");
    if (!fuzz::accepts([] { (void)sim::load_scenario(scenario); })) fuzz::fail("the harness's scenario does not load");
    return true;
  }();
  (void)harness_ok;
  fuzz::input_file(data, size, "lengths.csv");
  sim::Scenario s;
  if (!fuzz::accepts([&] { s = sim::load_scenario(scenario); })) return 0;
  const auto& d = s.workload.response_tokens;
  if (d.samples.empty()) fuzz::fail("a csv distribution loaded with no samples");
  const auto [lo, hi] = std::minmax_element(d.samples.begin(), d.samples.end());
  sim::Rng rng(1);
  for (int i = 0; i < 16; ++i) {
    const std::int64_t v = d.sample(rng);
    if (v < *lo || v > *hi || v > d.upper_bound()) fuzz::fail("a csv draw outside its column");
  }
  return 0;
}
