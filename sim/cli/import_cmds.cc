#include "sim/cli/import_cmds.h"

#include <fmt/format.h>

#include <filesystem>
#include <optional>
#include <ostream>
#include <stdexcept>

#include "analysis/output_dir.h"
#include "analysis/verl_import.h"
#include "sim/scenario/scenario.h"
#include "sim/scenario/yaml_file.h"

namespace rlsim::cli {

namespace fs = std::filesystem;

int cmd_import_verl(const ImportVerlOptions& o, std::ostream& out, std::ostream& err) {
  (void)sim::catalog_device(o.device);  // an unknown device is bad input, with the catalog
  analysis::VerlLaunch launch;
  std::vector<std::string> overrides = o.args;
  std::string source = "command line";
  if (!overrides.empty() && overrides.front().find('=') == std::string::npos) {
    source = overrides.front();
    launch = analysis::parse_verl_script(sim::read_input_file(source, "verl script"), source);
    overrides.erase(overrides.begin());
  }
  for (auto& w : analysis::parse_verl_overrides(overrides).overrides) launch.overrides.push_back(w);
  if (launch.overrides.empty()) throw sim::ScenarioError("rlsim import verl: no script and no KEY=VALUE overrides");
  std::optional<analysis::VerlLogLengths> lengths;
  if (!o.log.empty()) lengths = analysis::parse_verl_log(sim::read_input_file(o.log, "verl console log"), o.log);
  analysis::VerlImport imp;
  try {
    imp = analysis::import_verl(launch, o.device, o.model_config, source, lengths ? &*lengths : nullptr);
  } catch (const std::invalid_argument& e) {
    throw sim::ScenarioError(fmt::format("{}: {}", o.log, e.what()));
  }
  const std::string text = fmt::format("# rlsim scenario imported from a verl launch ({}, config {}) by rlsim import verl.\n",
                                       source, launch.config_name) +
                           imp.yaml;
  // The scenario must load: write it where the loader can read it, then to its destination.
  {
    const fs::path probe = fs::temp_directory_path() / fmt::format("rlsim-import-{}.yaml", static_cast<const void*>(&imp));
    analysis::write_file(probe, text);
    try {
      (void)sim::load_scenario(probe.string());
    } catch (const sim::ScenarioError& e) {
      std::error_code ec;
      fs::remove(probe, ec);
      throw sim::ScenarioError(fmt::format("{}: the imported scenario does not load: {}", source, e.what()));
    }
    std::error_code ec;
    fs::remove(probe, ec);
  }
  if (o.out.empty()) {
    out << text;
  } else {
    analysis::write_file(o.out, text);
  }
  for (const auto& w : imp.warnings) err << "rlsim import verl: warning: " << w << "\n";
  if (!imp.ignored.empty())
    err << fmt::format("rlsim import verl: no effect on step time, not imported: {}\n", fmt::join(imp.ignored, ", "));
  return 0;
}

}  // namespace rlsim::cli
