#include "sim/cli/import_cmds.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <ostream>
#include <sstream>
#include <stdexcept>

#include "analysis/verl_import.h"
#include "sim/scenario/scenario.h"

namespace rlsim::cli {
namespace {

namespace fs = std::filesystem;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw sim::ScenarioError(fmt::format("{}: cannot open ({})", path, std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes `text` to `path` through a temporary file renamed over it.
void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) throw std::runtime_error(fmt::format("cannot write {}: {}", tmp, std::strerror(errno)));
    f << text;
    f.flush();
    if (!f) throw std::runtime_error(fmt::format("cannot write {}: {}", tmp, std::strerror(errno)));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw std::runtime_error(fmt::format("cannot write {}: {}", path, ec.message()));
  }
}

}  // namespace

int cmd_import_verl(const ImportVerlOptions& o, std::ostream& out, std::ostream& err) {
  (void)sim::catalog_device(o.device);  // an unknown device is bad input, with the catalog
  analysis::VerlLaunch launch;
  std::vector<std::string> overrides = o.args;
  std::string source = "command line";
  if (!overrides.empty() && overrides.front().find('=') == std::string::npos) {
    source = overrides.front();
    launch = analysis::parse_verl_script(read_text(source), source);
    overrides.erase(overrides.begin());
  }
  for (auto& w : analysis::parse_verl_overrides(overrides).overrides) launch.overrides.push_back(w);
  if (launch.overrides.empty()) throw sim::ScenarioError("rlsim import verl: no script and no KEY=VALUE overrides");
  std::optional<analysis::VerlLogLengths> lengths;
  if (!o.log.empty()) lengths = analysis::parse_verl_log(read_text(o.log), o.log);
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
    write_atomically(probe.string(), text);
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
    write_atomically(o.out, text);
  }
  for (const auto& w : imp.warnings) err << "rlsim import verl: warning: " << w << "\n";
  if (!imp.ignored.empty())
    err << fmt::format("rlsim import verl: no effect on step time, not imported: {}\n", fmt::join(imp.ignored, ", "));
  return 0;
}

}  // namespace rlsim::cli
