#include "analysis/validation.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include "analysis/output_dir.h"
#include "analysis/plots.h"
#include "sim/engine/trace.h"
#include "sim/scenario/units.h"
#include "sim/scenario/yaml_file.h"
#include "sim/scenario/yaml_map.h"

#ifndef RLSIM_SOURCE_DIR
#define RLSIM_SOURCE_DIR "."
#endif

namespace rlsim::analysis {

namespace fs = std::filesystem;
using sim::Dimension;
using sim::Map;
using sim::ScenarioError;

namespace {

const std::vector<std::string>& figure_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n{"step_time", "rollout_share", "peak_memory.rollout", "peak_memory.training"};
    for (const auto p : sim::kPhases) n.push_back("phase." + std::string(sim::phase_name(p)));
    return n;
  }();
  return names;
}

// The unit a published figure carries: time, bytes, or none (shares and ratios).
std::optional<Dimension> figure_dimension(const PublishedFigure& f) {
  if (!f.ratio_to.empty() || f.figure == "rollout_share") return std::nullopt;
  if (f.figure.starts_with("peak_memory.")) return Dimension::kBytes;
  return Dimension::kTime;
}

PublishedFigure parse_figure(Map m) {
  PublishedFigure f;
  f.line = static_cast<int>(m.node().Mark().line) + 1;
  const auto& names = figure_names();
  f.figure = m.str("figure", "", true);
  if (std::find(names.begin(), names.end(), f.figure) == names.end()) {
    m.src().fail(m.get("figure"), m.path("figure"),
                 fmt::format("unknown figure '{}' (expected one of: {})", f.figure, sim::join(names)));
  }
  f.ratio_to = m.str("ratio_to", "");
  if (const auto dim = figure_dimension(f)) {
    f.published = m.quantity("published", 0, *dim, true);
  } else {
    m.require("published");
    f.published = m.number("published", 0, 1e-9, 1e12);
  }
  if (!(f.published > 0)) m.src().fail(m.get("published"), m.path("published"), "a published figure must be positive");
  if (!m.has("tolerance")) m.require("tolerance");
  f.tolerance = m.number("tolerance", 0, 1e-6, 1.0);
  m.finish({"figure", "ratio_to", "published", "tolerance"});
  return f;
}

}  // namespace

bool has_validation_block(const fs::path& path) {
  try {
    const YAML::Node root = YAML::LoadFile(path.string());
    return root.IsMap() && root["validation"];
  } catch (const YAML::Exception&) {
    return false;
  }
}

std::vector<std::string> repository_records(const fs::path& scenarios_dir) {
  std::vector<std::pair<std::string, std::string>> found;  // (stem, path)
  for (const fs::path& dir : {scenarios_dir, scenarios_dir / "validation"}) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".yaml" && has_validation_block(e.path()))
        found.emplace_back(e.path().stem().string(), e.path().string());
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (const auto& [_, p] : found) out.push_back(p);
  return out;
}

fs::path default_scenarios_dir() {
  std::error_code ec;
  if (fs::is_directory("scenarios/validation", ec)) return "scenarios";
  return fs::path(RLSIM_SOURCE_DIR) / "scenarios";
}

ValidationRecord load_record(const std::string& path, const sim::Calibration& calibration) {
  ValidationRecord rec;
  rec.file = path;
  rec.name = fs::path(path).stem().string();
  rec.scenario = sim::load_scenario(path, {}, "--set", &calibration);
  rec.scenario.output.trace = false;
  rec.scenario.output.plots = false;
  const YAML::Node root = sim::load_yaml_file(path, "validation record");
  sim::Source src{path, {}, "--set"};
  if (!root["validation"])
    src.fail(root, "validation", "a validation record needs a 'validation:' block (source, assumptions, figures)");
  Map v(src, root["validation"], "validation");
  rec.source = v.str("source", "", true);
  if (v.has("assumptions")) {
    const YAML::Node a = v.get("assumptions");
    if (!a.IsSequence()) src.fail(a, "validation.assumptions", "'validation.assumptions' must be a list of strings");
    for (const auto& item : a) {
      if (!item.IsScalar()) src.fail(item, "validation.assumptions", "'validation.assumptions' must be a list of strings");
      rec.assumptions.push_back(item.Scalar());
    }
  }
  const YAML::Node figs = v.require("figures");
  if (!figs.IsSequence() || figs.size() == 0)
    src.fail(figs, "validation.figures", "'validation.figures' must be a non-empty list");
  for (std::size_t i = 0; i < figs.size(); ++i)
    rec.figures.push_back(parse_figure(Map(src, figs[i], fmt::format("validation.figures[{}]", i))));
  v.finish({"source", "assumptions", "figures"});
  return rec;
}

std::map<std::string, double> simulated_figures(const sim::SimResult& r) {
  std::map<std::string, double> out;
  if (!r.fits() || r.steps.empty()) return out;
  // Published figures are means over hundreds of steps; the first simulated step carries the
  // pipeline fill of off-policy schedules (rollout before any overlap), so it is left out when
  // there are others.
  const std::size_t first = r.steps.size() > 1 ? 1 : 0;
  const double n = static_cast<double>(r.steps.size() - first);
  double step = 0;
  sim::PhaseSeconds phase;
  for (std::size_t i = first; i < r.steps.size(); ++i) {
    step += r.steps[i].step_s();
    for (const auto p : sim::kPhases) phase[p] += r.steps[i].phase_s[p];
  }
  out["step_time"] = step / n;
  for (const auto p : sim::kPhases) out["phase." + std::string(sim::phase_name(p))] = phase[p] / n;
  out["rollout_share"] = out["step_time"] > 0 ? out["phase.rollout"] / out["step_time"] : 0.0;
  out["peak_memory.rollout"] = r.peak_rollout_bytes;
  out["peak_memory.training"] = r.peak_training_bytes;
  return out;
}

std::map<std::string, double> simulate_figures(const sim::Scenario& s) {
  sim::NullSink sink;
  return simulated_figures(sim::simulate(s, sink));
}

const std::map<std::string, double>* RecordCache::find(std::size_t record, const std::vector<double>& inputs) const {
  const auto it = slots_.at(record).find(inputs);
  return it == slots_[record].end() ? nullptr : &it->second;
}

void RecordCache::put(std::size_t record, const std::vector<double>& inputs, std::map<std::string, double> figures) {
  slots_.at(record).emplace(inputs, std::move(figures));
}

std::vector<std::map<std::string, double>> simulate_records(const std::vector<ValidationRecord>& records,
                                                            const sim::Calibration* calibration, int jobs,
                                                            const std::vector<bool>& use, RecordCache* cache) {
  std::vector<std::map<std::string, double>> out(records.size());
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i; (i = next++) < records.size();) {
      if (!use.empty() && !use[i]) continue;
      sim::Scenario s = records[i].scenario;
      if (!calibration) {
        out[i] = simulate_figures(s);
        continue;
      }
      const std::vector<double> inputs = sim::calibration_inputs(*calibration, s);
      if (const auto* hit = cache ? cache->find(i, inputs) : nullptr) {
        out[i] = *hit;
        continue;
      }
      sim::apply_calibration(s, *calibration);
      out[i] = simulate_figures(s);
      if (cache) cache->put(i, inputs, out[i]);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < jobs; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  return out;
}

std::vector<FigureOutcome> compare(const std::vector<ValidationRecord>& records,
                                   const std::vector<std::map<std::string, double>>& sim) {
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < records.size(); ++i) index[records[i].name] = i;
  auto value = [&](std::size_t i, const std::string& figure) {
    const auto it = sim[i].find(figure);
    return it == sim[i].end() ? 0.0 : it->second;
  };
  std::vector<FigureOutcome> out;
  for (std::size_t i = 0; i < records.size(); ++i) {
    for (const auto& f : records[i].figures) {
      FigureOutcome o;
      o.record = records[i].name;
      o.figure = f.label();
      o.source = records[i].source;
      o.published = f.published;
      o.tolerance = f.tolerance;
      o.is_time = f.is_time() && f.ratio_to.empty();
      o.predicted = value(i, f.figure);
      if (!f.ratio_to.empty()) {
        const auto it = index.find(f.ratio_to);
        if (it == index.end()) {
          throw ScenarioError(
              fmt::format("{}:{}: figure {} is a ratio to record '{}', which is not among the records validated "
                          "(name it too)",
                          records[i].file, f.line, f.figure, f.ratio_to));
        }
        const double other = value(it->second, f.figure);
        o.predicted = other > 0 ? o.predicted / other : 0.0;
      }
      o.error = o.predicted / o.published - 1.0;
      o.in_band = o.predicted > 0 && std::abs(o.error) <= o.tolerance + 1e-12;
      out.push_back(o);
    }
  }
  return out;
}

ValidationStats validation_stats(const std::vector<FigureOutcome>& outcomes) {
  ValidationStats st;
  std::vector<double> step, time;
  for (const auto& o : outcomes) {
    ++st.figures;
    if (!o.in_band) ++st.out_of_band;
    if (o.is_time) time.push_back(std::abs(o.error));
    if (o.figure == "step_time") step.push_back(std::abs(o.error));
  }
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const std::size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
  };
  st.step_median = median(step);
  st.step_worst = step.empty() ? 0.0 : *std::max_element(step.begin(), step.end());
  st.time_median = median(time);
  return st;
}

void write_validation(const fs::path& dir, const std::vector<FigureOutcome>& outcomes, bool plots,
                      std::vector<std::string>* warnings) {
  write_directory(dir, [&](const fs::path& tmp) {
    std::string t = "record,figure,predicted,published,error,band,in_band,source\n";
    for (const auto& o : outcomes) {
      t += fmt::format("{},{},{:.6g},{:.6g},{:.4f},{:.4f},{},{}\n", csv_field(o.record), csv_field(o.figure), o.predicted,
                       o.published, o.error, o.tolerance, o.in_band ? "true" : "false", csv_field(o.source));
    }
    write_text(tmp / "validation.csv", t);
    if (!plots) return;
    std::vector<ScatterPoint> pts;
    std::vector<bool> in;
    for (const auto& o : outcomes) {
      if (!o.is_time) continue;
      pts.push_back(ScatterPoint{o.published, o.predicted, o.record + " " + o.figure});
      in.push_back(o.in_band);
    }
    std::string why;
    if (!plot_parity(tmp / "parity.png", "rlsim validate: predicted vs published times of every record", pts, in, {0.15, 0.30},
                     &why)) {
      if (warnings) warnings->push_back("parity.png not drawn: " + why);
    }
  });
}

void print_validation(std::ostream& out, const std::vector<FigureOutcome>& outcomes, const ValidationStats& st) {
  auto show = [](const FigureOutcome& o, double v) {
    if (o.figure.find(" / ") != std::string::npos || o.figure == "rollout_share") return fmt::format("{:.3f}", v);
    if (o.figure.starts_with("peak_memory")) return sim::format_quantity(v, Dimension::kBytes);
    return fmt::format("{:.1f} s", v);
  };
  out << fmt::format("{:<44} {:<34} {:>11} {:>11} {:>8} {:>6}  {}\n", "record", "figure", "predicted", "published", "error",
                     "band", "");
  for (const auto& o : outcomes) {
    out << fmt::format("{:<44} {:<34} {:>11} {:>11} {:>+7.1f}% {:>5.0f}%  {}\n", o.record, o.figure, show(o, o.predicted),
                       show(o, o.published), 100 * o.error, 100 * o.tolerance, o.in_band ? "ok" : "OUT OF BAND");
  }
  out << fmt::format(
      "{} figures, {} out of band; step time |error|: median {:.1f} %, worst {:.1f} %; every time figure: median {:.1f} %\n",
      st.figures, st.out_of_band, 100 * st.step_median, 100 * st.step_worst, 100 * st.time_median);
}

}  // namespace rlsim::analysis
