// A calibration file (`rlsim run|plan|validate --calibration FILE`, `rlsim calibrate --start`):
// one that parses must re-print (calibration_yaml) as a file that parses to the same text, and
// must apply to a scenario (the default one, whose load takes its efficiency and overhead
// defaults from it) without an error other than an input error.
#include <cstdint>
#include <string>

#include "sim/scenario/calibration.h"
#include "sim/scenario/scenario.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rlsim;
  const std::string text(reinterpret_cast<const char*>(data), size);
  sim::Calibration c;
  if (!fuzz::accepts([&] { c = sim::parse_calibration(text, "calibration.yaml"); })) return 0;
  const std::string printed = sim::calibration_yaml(c);
  sim::Calibration again;
  if (!fuzz::accepts([&] { again = sim::parse_calibration(printed, "printed.yaml"); })) {
    fuzz::fail("the printed calibration does not parse again:\n" + printed);
  }
  if (sim::calibration_yaml(again) != printed) fuzz::fail("the printed calibration re-prints differently:\n" + printed);
  static const std::string scenario = std::string(RLSIM_SOURCE_DIR) + "/scenarios/default.yaml";
  fuzz::accepts([&] { (void)sim::load_scenario(scenario, {}, "--set", &c); });
  return 0;
}
