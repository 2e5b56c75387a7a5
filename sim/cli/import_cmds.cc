#include "sim/cli/import_cmds.h"

#include <fmt/format.h>

#include <filesystem>
#include <optional>
#include <ostream>
#include <stdexcept>

#include "analysis/output_dir.h"
#include "analysis/slime_import.h"
#include "analysis/verl_import.h"
#include "sim/scenario/scenario.h"
#include "sim/scenario/yaml_file.h"

namespace rlsim::cli {
namespace {

namespace fs = std::filesystem;

// The script of the first word (when it is not an override) and the override words after it.
struct ScriptAndOverrides {
  std::string script;  // "" when only overrides were given
  std::vector<std::string> overrides;
};

ScriptAndOverrides split_args(const std::vector<std::string>& args, bool (*is_override)(const std::string&)) {
  ScriptAndOverrides s;
  s.overrides = args;
  if (!s.overrides.empty() && !is_override(s.overrides.front())) {
    s.script = s.overrides.front();
    s.overrides.erase(s.overrides.begin());
  }
  return s;
}

// Writes an imported scenario: checked by loading it (it must load), then to `o.out` or `out`;
// warnings and the keys without effect go to `err`.
int write_imported(const analysis::ImportedScenario& imp, const std::string& header, const std::string& source,
                   const std::string& command, const ImportOptions& o, std::ostream& out, std::ostream& err) {
  const std::string text = header + imp.yaml;
  {
    const fs::path probe = fs::temp_directory_path() / fmt::format("rlsim-import-{}.yaml", static_cast<const void*>(&imp));
    analysis::write_file(probe, text);
    try {
      (void)sim::load_scenario(probe.string());
    } catch (const sim::ScenarioError& e) {
      std::error_code ec;
      fs::remove(probe, ec);
      std::string what = e.what();  // named by the scenario's own line, not the probe's temporary path
      if (const auto at = what.find(probe.string()); at != std::string::npos) what.replace(at, probe.string().size(), "scenario");
      throw sim::ScenarioError(fmt::format("{}: the imported scenario does not load: {}", source, what));
    }
    std::error_code ec;
    fs::remove(probe, ec);
  }
  if (o.out.empty()) {
    out << text;
  } else {
    analysis::write_file(o.out, text);
  }
  for (const auto& w : imp.warnings) err << command << ": warning: " << w << "\n";
  if (!imp.ignored.empty())
    err << fmt::format("{}: no effect on step time, not imported: {}\n", command, fmt::join(imp.ignored, ", "));
  return 0;
}

}  // namespace

int cmd_import_verl(const ImportOptions& o, std::ostream& out, std::ostream& err) {
  (void)sim::catalog_device(o.device);  // an unknown device is bad input, with the catalog
  const auto args = split_args(o.args, [](const std::string& w) { return w.find('=') != std::string::npos; });
  analysis::VerlLaunch launch;
  const std::string source = args.script.empty() ? "command line" : args.script;
  if (!args.script.empty()) launch = analysis::parse_verl_script(sim::read_input_file(args.script, "verl script"), args.script);
  for (auto& w : analysis::parse_verl_overrides(args.overrides).overrides) launch.overrides.push_back(w);
  if (launch.overrides.empty()) throw sim::ScenarioError("rlsim import verl: no script and no KEY=VALUE overrides");
  std::optional<analysis::VerlLogLengths> lengths;
  if (!o.log.empty()) lengths = analysis::parse_verl_log(sim::read_input_file(o.log, "verl console log"), o.log);
  analysis::ImportedScenario imp;
  try {
    imp = analysis::import_verl(launch, o.device, o.model_config, source, lengths ? &*lengths : nullptr);
  } catch (const std::invalid_argument& e) {
    throw sim::ScenarioError(fmt::format("{}: {}", o.log, e.what()));
  }
  const std::string header = fmt::format("# rlsim scenario imported from a verl launch ({}, config {}) by rlsim import verl.\n",
                                         source, launch.config_name);
  return write_imported(imp, header, source, "rlsim import verl", o, out, err);
}

int cmd_import_slime(const ImportOptions& o, std::ostream& out, std::ostream& err) {
  (void)sim::catalog_device(o.device);
  if (!o.log.empty()) throw sim::ScenarioError("rlsim import slime: --log reads verl console logs only");
  const auto args = split_args(o.args, [](const std::string& w) { return w.starts_with("-"); });
  analysis::SlimeLaunch launch;
  const std::string source = args.script.empty() ? "command line" : args.script;
  if (!args.script.empty()) launch = analysis::parse_slime_script(sim::read_input_file(args.script, "slime script"), args.script);
  analysis::append_slime_args(launch, args.overrides);
  if (launch.args.empty()) throw sim::ScenarioError("rlsim import slime: no script and no --flag overrides");
  const analysis::ImportedScenario imp = analysis::import_slime(launch, o.device, o.model_config, source);
  const std::string header =
      fmt::format("# rlsim scenario imported from a slime launch ({}, {}) by rlsim import slime.\n", source, launch.entry);
  return write_imported(imp, header, source, "rlsim import slime", o, out, err);
}

}  // namespace rlsim::cli
