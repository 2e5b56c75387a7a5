// A scenario given as YAML text in a test, loaded through the real loader (load_scenario reads a
// file, so the text goes to a temporary file first, named by the process so that tests running in
// parallel processes do not collide).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sim/scenario/scenario.h"

namespace rlsim::sim::testing {

/// load_scenario of `yaml` with `overrides`; throws what load_scenario throws (ScenarioError
/// naming the temporary file).
inline Scenario load_scenario_text(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  namespace fs = std::filesystem;
  const fs::path p = fs::temp_directory_path() / ("rlsim_test_scenario_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(p) << yaml;
  struct Remove {
    fs::path p;
    ~Remove() { fs::remove(p); }
  } remove{p};
  return load_scenario(p.string(), overrides);
}

}  // namespace rlsim::sim::testing
