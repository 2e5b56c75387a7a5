// PNG plots drawn through gnuplot-iostream (gnuplot's pngcairo terminal).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

/// Curves with confidence bands: per series, y = mean at each x with a shaded [lo, hi] band.
struct BandSeries {
  std::string label;
  std::vector<double> x, mean, lo, hi;  // equal lengths
};

/// Draws the series on one axis pair. Returns false (with `why`) when gnuplot is missing or no
/// series has points.
bool plot_bands(const std::filesystem::path& png, const std::string& title, const std::string& xlabel, const std::string& ylabel,
                const std::vector<BandSeries>& series, std::string* why);

/// A grid of labelled cells over two categorical axes (a heatmap or a category map).
struct GridPlot {
  std::string title, xlabel, ylabel;
  std::string cblabel;  // colour-bar label of a heatmap
  std::vector<std::string> xticks, yticks;
  std::vector<double> z;          // yticks.size() x xticks.size(), row-major; NaN = empty cell (grey)
  std::vector<std::string> text;  // a label per cell ("" = none), same layout as z
  /// Category map when non-empty: z holds indices into it; each category has a name (for the
  /// key) and a colour "#rrggbb". A heatmap (empty) colours z on a continuous palette.
  std::vector<std::pair<std::string, std::string>> categories;
};

/// Draws `g` as a PNG. Returns false (with `why`) when gnuplot is missing or the grid is empty or
/// inconsistent.
bool plot_grid(const std::filesystem::path& png, const GridPlot& g, std::string* why);

/// One point of a scatter plot.
struct ScatterPoint {
  double x = 0, y = 0;
  std::string label;
};

/// Pareto plot: every point (grey), the front (connected, labelled), the chosen point (a star) and
/// an optional horizontal limit line. Axes become logarithmic when a range spans more than 20x.
struct ParetoPlot {
  std::string title, xlabel, ylabel;
  std::vector<ScatterPoint> points;
  std::vector<ScatterPoint> front;  // sorted by x
  std::optional<ScatterPoint> chosen;
  std::optional<double> y_limit;
  std::string y_limit_label;
};

/// Draws `p` as a PNG. Returns false (with `why`) when gnuplot is missing or there is no point.
bool plot_pareto(const std::filesystem::path& png, const ParetoPlot& p, std::string* why);

/// Parity plot of a validation: predicted (y) against published (x), log-log, each point
/// labelled, with the y = x line and the y = x (1 +- b) lines of every band b in `bands` (e.g.
/// 0.15 and 0.30). `in_band[i]` colours point i (in band: blue, out: red). Returns false (with
/// `why`) when gnuplot is missing or no point is positive.
bool plot_parity(const std::filesystem::path& png, const std::string& title, const std::vector<ScatterPoint>& points,
                 const std::vector<bool>& in_band, const std::vector<double>& bands, std::string* why);

}  // namespace rlsim::analysis
