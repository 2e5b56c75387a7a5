#include "analysis/plots.h"

#include <gnuplot-iostream.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <tuple>
#include <vector>

namespace rlsim::analysis {
namespace {

// Fixed phase colours so every run's timeline reads the same.
// The line type of a phase: its position among the run's phases (sim::phases_of), from 1.
int phase_colour(const std::vector<sim::Phase>& phases, sim::Phase phase) {
  return static_cast<int>(std::find(phases.begin(), phases.end(), phase) - phases.begin()) + 1;
}

// A tick list "('a' 0, 'b' 1, ...)".
std::string tick_list(const std::vector<std::string>& ticks) {
  std::string out = "(";
  for (std::size_t i = 0; i < ticks.size(); ++i) out += (i ? ", " : "") + gnuplot_quoted(ticks[i]) + " " + std::to_string(i);
  return out + ")";
}

// A label as a double-quoted inline-data field (gnuplot reads "..." as one column).
std::string data_text(const std::string& s) {
  std::string out = "\"";
  for (char c : s) out += c == '"' ? '\'' : c;
  return out + "\"";
}

// "+-15 %" for a band of 0.15.
std::string fmt_band(double b) {
  std::ostringstream o;
  o << "+-" << std::lround(b * 100) << " %";
  return o.str();
}

// A title that may hold line breaks: quoted lines joined by gnuplot's string concatenation.
std::string gnuplot_title(const std::string& s) {
  std::string out;
  std::size_t start = 0;
  while (true) {
    const std::size_t nl = s.find('\n', start);
    out += gnuplot_quoted(s.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
    if (nl == std::string::npos) break;
    out += ".\"\\n\".";
    start = nl + 1;
  }
  return out;
}

// "[v - d:v + d]" with d = 10 % of |v| (1 for 0): a range around a single value.
std::string padded_range(double v) {
  const double d = v == 0 ? 1.0 : std::abs(v) * 0.1;
  std::ostringstream o;
  o << "[" << v - d << ":" << v + d << "]";
  return o.str();
}

int rgb_int(const std::string& hex) { return static_cast<int>(std::strtol(hex.c_str() + 1, nullptr, 16)); }

}  // namespace

std::string gnuplot_quoted(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "''";
    else
      out += c;
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
  // One row per phase_role, top to bottom: rollout, training, a critic's, a reward model's and the
  // reference's own devices when the run has them (their phases overlap the actor's), weight sync.
  std::vector<std::string_view> rows{"rollout", sim::role_name(sim::Role::kTraining)};
  for (const auto g : {sim::TrainerGroup::kCritic, sim::TrainerGroup::kRewardModel, sim::TrainerGroup::kReference}) {
    if (std::any_of(r.phases.begin(), r.phases.end(), [&](const sim::PhaseSpan& p) { return p.group == g; }))
      rows.push_back(sim::trainer_group_name(g));
  }
  rows.push_back(sim::role_name(sim::Role::kSync));
  const auto row_y = [&](std::string_view name) {
    return static_cast<double>(rows.size() - static_cast<std::size_t>(std::find(rows.begin(), rows.end(), name) - rows.begin()));
  };
  // x, y, xlow, xhigh, ylow, yhigh, colour
  std::vector<std::tuple<double, double, double, double, double, double, int>> boxes;
  const std::vector<sim::Phase> phases = sim::phases_of(s);
  for (const auto& p : r.phases) {
    const double y = row_y(sim::phase_role(p));
    const double a = p.start * 1e-9, b = p.end * 1e-9;
    boxes.emplace_back((a + b) / 2, y, a, b, y - 0.35, y + 0.35, phase_colour(phases, p.phase));
  }
  {
    Gnuplot gp("gnuplot");
    gp << "set terminal pngcairo size 1400,420 font 'sans,10'\n";
    gp << "set output " << gnuplot_quoted(png.string()) << "\n";
    gp << "set title " << gnuplot_quoted("Timeline: " + s.name) << " noenhanced\n";
    gp << "set xlabel 'simulated time (s)'\nset yrange [0.3:" << rows.size() + 0.7 << "]\n";
    gp << "set ytics (";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const std::string_view name = rows[i] == sim::role_name(sim::Role::kSync) ? "weight sync" : rows[i];
      gp << (i ? ", " : "") << gnuplot_quoted(std::string(name)) << " " << row_y(rows[i]);
    }
    gp << ")\nset grid xtics\n";
    gp << "set style fill solid 0.8 border -1\n";
    // One colour per phase of the run, in kPhases order.
    const std::vector<std::string> colours{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                           "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
    for (std::size_t i = 0; i < phases.size(); ++i) {
      gp << "set linetype " << i + 1 << " lc rgb '" << colours[i % colours.size()] << "'\n";
    }
    gp << "set key outside right\n";
    gp << "plot '-' using 1:2:3:4:5:6:7 with boxxyerrorbars lc variable notitle";
    for (std::size_t i = 0; i < phases.size(); ++i) {
      gp << ", NaN with boxes lt " << i + 1 << " title '" << sim::phase_name(phases[i]) << "' noenhanced";
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

namespace {

// plot_grid's settings: a PNG sized to the grid, titles, one tick per column and row, and the
// palette with its colour bar (numeric cells; `any`: some cell has a value) or the categories' key.
void grid_settings(std::ostream& gp, const std::filesystem::path& png, const GridPlot& g, bool any) {
  const std::size_t nx = g.xticks.size(), ny = g.yticks.size();
  const int width = static_cast<int>(std::clamp<std::size_t>(220 + nx * 120, 640, 2400));
  const int height = static_cast<int>(std::clamp<std::size_t>(200 + ny * 56, 400, 1600));
  gp << "set terminal pngcairo size " << width << "," << height << " font 'sans,10'\n";
  gp << "set output " << gnuplot_quoted(png.string()) << "\n";
  gp << "set title " << gnuplot_title(g.title) << " noenhanced\n";
  gp << "set xlabel " << gnuplot_quoted(g.xlabel) << " noenhanced\nset ylabel " << gnuplot_quoted(g.ylabel) << " noenhanced\n";
  gp << "set xrange [-0.5:" << nx - 0.5 << "]\nset yrange [-0.5:" << ny - 0.5 << "]\n";
  gp << "set xtics " << tick_list(g.xticks) << " noenhanced\nset ytics " << tick_list(g.yticks) << " noenhanced\n";
  gp << "set tics scale 0\nset style fill solid 1.0 border lc rgb 'white'\n";
  if (!g.categories.empty()) {
    gp << "set key below horizontal\nunset colorbox\n";
    return;
  }
  gp << "unset key\nset palette defined (0 '#ffffcc', 1 '#fed976', 2 '#fd8d3c', 3 '#e31a1c')\n";
  gp << "set cblabel " << gnuplot_quoted(g.cblabel) << " noenhanced\n";
  double lo = 1e300, hi = -1e300;
  for (double v : g.z) {
    if (!std::isnan(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  if (any && lo == hi) gp << "set cbrange " << padded_range(lo) << "\n";  // one value: gnuplot would warn
}

// plot_grid's plot command and its inline data: the empty cells in grey, then the coloured cells
// (when `any`), then the cell labels; a block with nothing to draw holds one NaN row.
void grid_data(std::ostream& gp, const GridPlot& g, bool any) {
  const std::size_t nx = g.xticks.size(), ny = g.yticks.size();
  const bool categorical = !g.categories.empty();
  gp << "plot '-' using 1:2:3:4:5:6 with boxxyerror fc rgb '#dddddd' notitle";
  if (any) gp << ", '-' using 1:2:3:4:5:6:7 with boxxyerror " << (categorical ? "lc rgb variable" : "lc palette") << " notitle";
  gp << ", '-' using 1:2:3 with labels font 'sans,9' noenhanced notitle";
  // Key entries for the categories that occur.
  for (std::size_t c = 0; c < g.categories.size(); ++c) {
    if (std::find(g.z.begin(), g.z.end(), static_cast<double>(c)) == g.z.end()) continue;
    gp << ", NaN with boxes fc rgb '" << g.categories[c].second << "' title " << gnuplot_quoted(g.categories[c].first)
       << " noenhanced";
  }
  gp << "\n";
  auto box = [&](std::size_t x, std::size_t y) {
    gp << x << " " << y << " " << x - 0.5 << " " << x + 0.5 << " " << y - 0.5 << " " << y + 0.5;
  };
  bool empty_any = false;
  for (std::size_t y = 0; y < ny; ++y) {
    for (std::size_t x = 0; x < nx; ++x) {
      if (!std::isnan(g.z[y * nx + x])) continue;
      box(x, y);
      gp << "\n";
      empty_any = true;
    }
  }
  if (!empty_any) gp << "NaN NaN NaN NaN NaN NaN\n";
  gp << "e\n";
  if (any) {
    for (std::size_t y = 0; y < ny; ++y) {
      for (std::size_t x = 0; x < nx; ++x) {
        const double v = g.z[y * nx + x];
        if (std::isnan(v)) continue;
        box(x, y);
        if (categorical)
          gp << " " << rgb_int(g.categories.at(static_cast<std::size_t>(v)).second) << "\n";
        else
          gp << " " << v << "\n";
      }
    }
    gp << "e\n";
  }
  bool text_any = false;
  for (std::size_t y = 0; y < ny; ++y) {
    for (std::size_t x = 0; x < nx; ++x) {
      if (g.text[y * nx + x].empty()) continue;
      gp << x << " " << y << " " << data_text(g.text[y * nx + x]) << "\n";
      text_any = true;
    }
  }
  if (!text_any) gp << "NaN NaN \"\"\n";
  gp << "e\n";
}

}  // namespace

bool plot_grid(const std::filesystem::path& png, const GridPlot& g, std::string* why) {
  if (!gnuplot_available()) {
    *why = "gnuplot is not installed (apt-get install gnuplot-nox)";
    return false;
  }
  const std::size_t nx = g.xticks.size(), ny = g.yticks.size();
  if (nx == 0 || ny == 0 || g.z.size() != nx * ny || g.text.size() != nx * ny) {
    *why = "empty or inconsistent grid";
    return false;
  }
  const bool any = std::any_of(g.z.begin(), g.z.end(), [](double v) { return !std::isnan(v); });
  Gnuplot gp("gnuplot");
  grid_settings(gp, png, g, any);
  grid_data(gp, g, any);
  return true;
}

bool plot_pareto(const std::filesystem::path& png, const ParetoPlot& p, std::string* why) {
  if (!gnuplot_available()) {
    *why = "gnuplot is not installed (apt-get install gnuplot-nox)";
    return false;
  }
  if (p.points.empty()) {
    *why = "no point to draw";
    return false;
  }
  double xlo = 1e300, xhi = 0, ylo = 1e300, yhi = 0;
  for (const auto& q : p.points) {
    xlo = std::min(xlo, q.x), xhi = std::max(xhi, q.x);
    ylo = std::min(ylo, q.y), yhi = std::max(yhi, q.y);
  }
  Gnuplot gp("gnuplot");
  gp << "set terminal pngcairo size 1000,640 font 'sans,10'\n";
  gp << "set output " << gnuplot_quoted(png.string()) << "\n";
  gp << "set title " << gnuplot_title(p.title) << " noenhanced\n";
  gp << "set xlabel " << gnuplot_quoted(p.xlabel) << " noenhanced\nset ylabel " << gnuplot_quoted(p.ylabel) << " noenhanced\n";
  gp << "set grid\nset key outside bottom center horizontal\nset offsets graph 0.05, graph 0.05, graph 0.05, graph 0.05\n";
  if (xlo > 0 && xhi > 20 * xlo) gp << "set logscale x\n";
  if (ylo > 0 && yhi > 20 * ylo) gp << "set logscale y\n";
  // One value on an axis: an explicit range (gnuplot would warn on stderr and pick one itself).
  if (xlo == xhi) gp << "set xrange " << padded_range(xlo) << "\n";
  if (ylo == yhi && !p.y_limit) gp << "set yrange " << padded_range(ylo) << "\n";
  gp << "plot '-' using 1:2 with points pt 7 ps 0.6 lc rgb '#9e9e9e' title 'configurations that fit'";
  gp << ", '-' using 1:2 with linespoints pt 7 ps 1.0 lw 2 lc rgb '#1f77b4' title 'Pareto front'";
  gp << ", '-' using 1:2:3 with labels offset 0.8,0.6 left font 'sans,8' noenhanced notitle";
  if (p.chosen) gp << ", '-' using 1:2 with points pt 3 ps 2.5 lw 2 lc rgb '#d62728' title 'recommended'";
  if (p.y_limit)
    gp << ", " << *p.y_limit << " with lines dt 2 lc rgb '#d62728' title " << gnuplot_quoted(p.y_limit_label) << " noenhanced";
  gp << "\n";
  for (const auto& q : p.points) gp << q.x << " " << q.y << "\n";
  gp << "e\n";
  for (const auto& q : p.front) gp << q.x << " " << q.y << "\n";
  if (p.front.empty()) gp << "NaN NaN\n";
  gp << "e\n";
  for (const auto& q : p.front) gp << q.x << " " << q.y << " " << data_text(q.label) << "\n";
  if (p.front.empty()) gp << "NaN NaN \"\"\n";
  gp << "e\n";
  if (p.chosen) gp << p.chosen->x << " " << p.chosen->y << "\ne\n";
  return true;
}

bool plot_parity(const std::filesystem::path& png, const std::string& title, const std::vector<ScatterPoint>& points,
                 const std::vector<bool>& in_band, const std::vector<double>& bands, std::string* why) {
  if (!gnuplot_available()) {
    *why = "gnuplot is not installed (apt-get install gnuplot-nox)";
    return false;
  }
  double lo = 1e300, hi = 0;
  for (const auto& q : points) {
    if (q.x > 0 && q.y > 0) lo = std::min({lo, q.x, q.y}), hi = std::max({hi, q.x, q.y});
  }
  if (hi <= 0) {
    *why = "no positive point to draw";
    return false;
  }
  lo /= 1.6, hi *= 1.6;
  Gnuplot gp("gnuplot");
  gp << "set terminal pngcairo size 900,820 font 'sans,10'\n";
  gp << "set output " << gnuplot_quoted(png.string()) << "\n";
  gp << "set title " << gnuplot_title(title) << " noenhanced\n";
  gp << "set xlabel 'published (s)'\nset ylabel 'predicted by rlsim (s)'\n";
  gp << "set logscale xy\nset grid\nset key top left\nset size square\n";
  gp << "set xrange [" << lo << ":" << hi << "]\nset yrange [" << lo << ":" << hi << "]\n";
  gp << "plot x with lines lw 2 lc rgb '#444444' title 'predicted = published'";
  for (double b : bands) {
    gp << ", x * " << 1 + b << " with lines dt 2 lc rgb '#888888' title " << gnuplot_quoted(fmt_band(b)) << ", x * " << 1 - b
       << " with lines dt 2 lc rgb '#888888' notitle";
  }
  gp << ", '-' using 1:2 with points pt 7 ps 1.2 lc rgb '#1f77b4' title 'in band'";
  gp << ", '-' using 1:2 with points pt 7 ps 1.2 lc rgb '#d62728' title 'out of band'";
  gp << ", '-' using 1:2:3 with labels offset 0.7,0.5 left font 'sans,7' noenhanced notitle\n";
  for (int pass = 0; pass < 2; ++pass) {
    bool any = false;
    for (std::size_t i = 0; i < points.size(); ++i) {
      if (in_band[i] == (pass == 0) && points[i].x > 0 && points[i].y > 0) {
        gp << points[i].x << " " << points[i].y << "\n";
        any = true;
      }
    }
    if (!any) gp << "NaN NaN\n";
    gp << "e\n";
  }
  for (const auto& q : points) {
    if (q.x > 0 && q.y > 0) gp << q.x << " " << q.y << " " << data_text(q.label) << "\n";
  }
  gp << "e\n";
  return true;
}

bool plot_bands(const std::filesystem::path& png, const std::string& title, const std::string& xlabel, const std::string& ylabel,
                const std::vector<BandSeries>& series, std::string* why) {
  if (!gnuplot_available()) {
    *why = "gnuplot is not installed";
    return false;
  }
  if (series.empty() || series.front().x.empty()) {
    *why = "nothing to plot";
    return false;
  }
  {
    Gnuplot gp("gnuplot");
    gp << "set terminal pngcairo size 1000,600 font 'sans,10'\n";
    gp << "set output " << gnuplot_quoted(png.string()) << "\n";
    gp << "set title " << gnuplot_quoted(title) << " noenhanced\n";
    gp << "set xlabel " << gnuplot_quoted(xlabel) << " noenhanced\nset ylabel " << gnuplot_quoted(ylabel) << " noenhanced\n";
    gp << "set grid\nset key outside right noenhanced\nset style fill transparent solid 0.2 noborder\n";
    gp << "plot ";
    for (std::size_t i = 0; i < series.size(); ++i) {
      gp << (i ? ", " : "") << "'-' using 1:2:3 with filledcurves lc " << i + 1 << " notitle, '-' using 1:2 with lines lw 2 lc "
         << i + 1 << " title " << gnuplot_quoted(series[i].label);
    }
    gp << "\n";
    for (const auto& s : series) {
      std::vector<std::tuple<double, double, double>> band;
      std::vector<std::pair<double, double>> line;
      for (std::size_t k = 0; k < s.x.size(); ++k) {
        band.emplace_back(s.x[k], s.lo[k], s.hi[k]);
        line.emplace_back(s.x[k], s.mean[k]);
      }
      gp.send1d(band);
      gp.send1d(line);
    }
  }
  return true;
}

}  // namespace rlsim::analysis
