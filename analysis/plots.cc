#include "analysis/plots.h"

#include <cstdlib>
#include <sstream>
#include <tuple>
#include <vector>

#include <gnuplot-iostream.h>

namespace rlsim::analysis {
namespace {

// Fixed phase colours so every run's timeline reads the same.
int phase_colour(const std::string& phase) {
  for (std::size_t i = 0; i < sim::kPhases.size(); ++i) {
    if (sim::kPhases[i] == phase) return static_cast<int>(i) + 1;
  }
  return 8;
}

}  // namespace

std::string gnuplot_quoted(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "''";
    else out += c;
  }
  return out + "'";
}

bool gnuplot_available() {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::stringstream ss(path);
  for (std::string dir; std::getline(ss, dir, ':');) {
    if (!dir.empty() && std::filesystem::exists(std::filesystem::path(dir) / "gnuplot")) return true;
  }
  return false;
}

bool plot_timeline(const std::filesystem::path& png, const sim::Scenario& s, const sim::SimResult& r, std::string* why) {
  if (!gnuplot_available()) {
    *why = "gnuplot is not installed (apt-get install gnuplot-nox)";
    return false;
  }
  if (r.phases.empty()) {
    *why = "no phases were simulated";
    return false;
  }
  // x, y, xlow, xhigh, ylow, yhigh, colour
  std::vector<std::tuple<double, double, double, double, double, double, int>> boxes;
  for (const auto& p : r.phases) {
    const double y = p.role == "rollout" ? 3 : p.role == "training" ? 2 : 1;
    const double a = p.start * 1e-9, b = p.end * 1e-9;
    boxes.emplace_back((a + b) / 2, y, a, b, y - 0.35, y + 0.35, phase_colour(p.phase));
  }
  {
    Gnuplot gp("gnuplot");
    gp << "set terminal pngcairo size 1400,420 font 'sans,10'\n";
    gp << "set output " << gnuplot_quoted(png.string()) << "\n";
    gp << "set title " << gnuplot_quoted("Timeline: " + s.name) << " noenhanced\n";
    gp << "set xlabel 'simulated time (s)'\nset yrange [0.3:3.7]\n";
    gp << "set ytics ('weight sync' 1, 'training' 2, 'rollout' 3)\nset grid xtics\n";
    gp << "set style fill solid 0.8 border -1\n";
    for (std::size_t i = 0; i < sim::kPhases.size(); ++i) {
      gp << "set linetype " << i + 1 << " lc rgb '"
         << std::vector<std::string>{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948"}[i] << "'\n";
    }
    gp << "set key outside right\n";
    gp << "plot '-' using 1:2:3:4:5:6:7 with boxxyerrorbars lc variable notitle";
    for (std::size_t i = 0; i < sim::kPhases.size(); ++i) {
      gp << ", NaN with boxes lt " << i + 1 << " title '" << sim::kPhases[i] << "' noenhanced";
    }
    gp << "\n";
    gp.send1d(boxes);
  }
  return true;
}

bool plot_memory(const std::filesystem::path& png, const sim::Scenario& s, const sim::SimResult& r, std::string* why) {
  if (!gnuplot_available()) {
    *why = "gnuplot is not installed (apt-get install gnuplot-nox)";
    return false;
  }
  std::vector<std::vector<std::pair<double, double>>> series;
  double t_end = 0;
  for (const auto& l : r.ledgers) {
    std::vector<std::pair<double, double>> pts;
    for (const auto& e : l.events()) {
      pts.emplace_back(e.time * 1e-9, e.total_bytes / 1e9);
      t_end = std::max(t_end, e.time * 1e-9);
    }
    series.push_back(std::move(pts));
  }
  if (series.empty() || series.front().empty()) {
    *why = "no memory events";
    return false;
  }
  {
    Gnuplot gp("gnuplot");
    gp << "set terminal pngcairo size 1400,480 font 'sans,10'\n";
    gp << "set output " << gnuplot_quoted(png.string()) << "\n";
    gp << "set title " << gnuplot_quoted("Memory per device: " + s.name) << " noenhanced\n";
    gp << "set xlabel 'simulated time (s)'\nset ylabel 'GB'\nset grid\nset key outside right\n";
    gp << "set yrange [0:" << s.cluster.device.memory_bytes / 1e9 * 1.1 << "]\n";
    gp << "plot " << s.cluster.device.memory_bytes / 1e9 << " with lines dt 2 lc rgb 'red' title 'capacity'";
    for (const auto& l : r.ledgers) gp << ", '-' using 1:2 with steps lw 2 title " << gnuplot_quoted(l.group()) << " noenhanced";
    gp << "\n";
    for (const auto& pts : series) gp.send1d(pts);
  }
  return true;
}

}  // namespace rlsim::analysis
