// Scenario YAML with --set overrides: the input is the file's text; the lines after a line
// "#--set" are overrides (dotted.key=value). A scenario that loads must re-print (resolved_yaml)
// as a file that loads to the same resolved text.
#include <cstdint>
#include <string>
#include <vector>

#include "sim/scenario/scenario.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rlsim;
  std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> overrides;
  if (const auto at = text.find("\n#--set\n"); at != std::string::npos) {
    std::string rest = text.substr(at + 8);
    text.resize(at + 1);
    std::size_t start = 0;
    while (start < rest.size()) {
      const std::size_t nl = rest.find('\n', start);
      overrides.push_back(rest.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
      start = nl == std::string::npos ? rest.size() : nl + 1;
    }
  }
  sim::Scenario s;
  if (!fuzz::accepts([&] { s = sim::load_scenario(fuzz::input_file(text, "scenario.yaml"), overrides); })) return 0;
  const std::string printed = sim::resolved_yaml(s);
  sim::Scenario again;
  if (!fuzz::accepts([&] { again = sim::load_scenario(fuzz::input_file(printed, "resolved.yaml")); })) {
    fuzz::fail("the resolved scenario does not load again:\n" + printed);
  }
  if (sim::resolved_yaml(again) != printed) fuzz::fail("the resolved scenario re-prints differently:\n" + printed);
  return 0;
}
