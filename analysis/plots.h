// PNG plots drawn through gnuplot-iostream (gnuplot's pngcairo terminal).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "sim/pipeline/pipeline.h"
#include "sim/scenario/scenario.h"

namespace rlsim::analysis {

/// Whether a `gnuplot` executable is on PATH.
bool gnuplot_available();

/// `s` as a gnuplot single-quoted string (a quote doubled inside), for titles and file names.
std::string gnuplot_quoted(std::string_view s);

/// Timeline: one row per role (rollout / training / weight sync), a bar per phase occurrence,
/// x = simulated seconds. Returns false (with `why`) when it cannot be drawn.
bool plot_timeline(const std::filesystem::path& png, const sim::Scenario& s, const sim::SimResult& r, std::string* why);

/// Memory per device over time, one step line per device group, with the capacity line.
bool plot_memory(const std::filesystem::path& png, const sim::Scenario& s, const sim::SimResult& r, std::string* why);

}  // namespace rlsim::analysis
