#include "analysis/plan.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <tuple>

#include "analysis/output_dir.h"
#include "analysis/plots.h"
#include "analysis/report.h"
#include "sim/scenario/units.h"
#include "sim/scenario/yaml_file.h"

namespace rlsim::analysis {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using sim::ScenarioError;

std::string fixed(double v, int digits) { return fmt::format("{:.{}f}", v, digits); }

const char* objective_name(Objective o) { return o == Objective::kStepTime ? "step_time" : "device_hours_per_step"; }

double objective_value(Objective o, const PointResult& p) {
  return o == Objective::kStepTime ? p.step_time_s : p.device_hours_per_step;
}

}  // namespace

// Evaluation --------------------------------------------------------------------------------------

namespace {

// Where a point's error lies, in the study's terms: an override that is one of the study's `sets`
// is named as the user gave it ("--set KEY=VALUE"); a swept key keeps "sweep KEY=VALUE" and, when
// `at_study_key`, is placed at the study file's line and column of that key.
sim::InputLocation restate(const Study& st, const ScenarioError& e, bool at_study_key) {
  sim::InputLocation w = e.where();
  if (w.override_text.empty()) return w;
  if (std::find(st.sets.begin(), st.sets.end(), w.override_text) != st.sets.end()) {
    w.override_label = "--set";
    return w;
  }
  if (!at_study_key) return w;
  for (const auto& a : st.sweep) {
    for (std::size_t k = 0; k < a.keys.size(); ++k) {
      if (w.key == a.keys[k] || w.key.starts_with(a.keys[k] + ".")) {
        w.file = st.file;
        std::tie(w.line, w.column) = a.key_marks[k];
        return w;
      }
    }
  }
  return w;
}

}  // namespace

void check_study_keys(const Study& study) {
  try {
    (void)sim::load_scenario(study.base, study.overrides(0), "sweep", study.calibration.get());
  } catch (const sim::ScenarioKeyError& e) {
    throw ScenarioError(restate(study, e, true), e.detail());
  } catch (const ScenarioError&) {
    // An invalid value at point 0 is a result of the study, recorded when the point is evaluated.
  }
}

PrecisionFlowVerdict VerifyCache::verdict(const sim::Scenario& s) {
  const std::string key = sim::resolved_precision_flow_yaml(s);
  std::shared_ptr<Entry> e;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto& slot = entries_[key];
    if (!slot) slot = std::make_shared<Entry>();
    e = slot;
  }
  std::call_once(e->once, [&] { e->flow = check_precision_flow(s); });
  return e->flow;
}

PointResult evaluate_point(const Study& study, std::size_t index, VerifyCache& cache) {
  PointResult p;
  p.index = index;
  p.phase_s.assign(sim::kPhases.size(), 0.0);
  sim::Scenario s;
  sim::SimResult r;
  try {
    s = sim::load_scenario(study.base, study.overrides(index), "sweep", study.calibration.get());
    sim::NullSink sink;
    r = sim::simulate(s, sink);
  } catch (const sim::ScenarioKeyError& e) {
    throw sim::ScenarioKeyError(restate(study, e, true), e.detail());
  } catch (const ScenarioError& e) {
    p.error = ScenarioError(restate(study, e, false), e.detail()).what();
    return p;
  }
  p.valid = true;
  const PrecisionFlowVerdict flow = cache.verdict(s);
  // The figures of summary.json, so a point reads the same as `rlsim run` of its scenario.
  const RunSummary u = summarize(s, r, flow);
  p.steps = u.steps;
  p.step_time_s = u.step_time_mean_s;
  p.step_time_max_s = u.step_time_max_s;
  p.phase_s.assign(u.phase_mean_s.s.begin(), u.phase_mean_s.s.end());
  p.phases = u.phases;
  p.rollout_share = u.rollout_share;
  p.generated_tokens_per_s = u.generated_tokens_per_s;
  p.peak_rollout_bytes = u.peak_rollout_bytes;
  p.peak_training_bytes = u.peak_training_bytes;
  p.device_memory_bytes = u.device_memory_bytes;
  p.fits = u.fits;
  if (u.oom) {
    p.oom_role = sim::role_name(u.oom->role);
    p.oom_reason = u.oom->reason;
  }
  p.devices = s.cluster.devices();
  p.device_hours_per_step = p.step_time_s * p.devices / 3600.0;
  p.verify = flow.verdict;
  p.verify_mismatches = flow.mismatches;
  return p;
}

std::vector<PointResult> evaluate_points(const Study& study, const std::vector<std::size_t>& indices, int jobs,
                                         const std::function<void(std::size_t)>& progress) {
  const std::size_t n = indices.size();
  std::vector<PointResult> out(n);
  std::vector<std::exception_ptr> errors(n);
  VerifyCache cache;
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> done{0};
  std::mutex m;
  std::condition_variable cv;
  auto worker = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        out[i] = evaluate_point(study, indices[i], cache);
      } catch (...) {
        errors[i] = std::current_exception();
      }
      if (done.fetch_add(1) + 1 == n) {
        const std::lock_guard<std::mutex> lock(m);
        cv.notify_all();
      }
    }
  };
  const std::size_t threads = std::min<std::size_t>(static_cast<std::size_t>(std::max(jobs, 1)), std::max<std::size_t>(n, 1));
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < threads; ++t) pool.emplace_back(worker);
  {
    std::unique_lock<std::mutex> lock(m);
    while (!cv.wait_for(lock, std::chrono::seconds(1), [&] { return done.load() == n; })) {
      if (progress) progress(done.load());
    }
  }
  for (auto& t : pool) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return out;
}

// Ranking -----------------------------------------------------------------------------------------

void rank_points(const Study& study, std::vector<PointResult>& results) {
  const Constraints& c = study.constraints;
  std::vector<PointResult*> ok;
  for (auto& p : results) {
    p.violations.clear();
    p.rank = 0;
    p.pareto = false;
    if (!p.valid) {
      p.violations.push_back("invalid");
    } else {
      // A configuration whose rollout cannot start has no step time to rank (it does not fit).
      if (p.steps == 0 && (p.fits || !c.fits_memory)) p.violations.push_back("not_simulated");
      if (c.fits_memory && !p.fits) p.violations.push_back("fits_memory");
      if (c.max_step_time_s && p.step_time_s > *c.max_step_time_s) p.violations.push_back("max_step_time");
      if (c.max_device_hours_per_step && p.device_hours_per_step > *c.max_device_hours_per_step)
        p.violations.push_back("max_device_hours_per_step");
      if (c.max_devices && p.devices > *c.max_devices) p.violations.push_back("max_devices");
      if (c.precision_consistent && p.verify != "consistent") p.violations.push_back("precision_consistent");
    }
    p.meets = p.violations.empty();
    if (p.meets) ok.push_back(&p);
  }
  const Objective other = study.objective == Objective::kStepTime ? Objective::kDeviceHoursPerStep : Objective::kStepTime;
  std::sort(ok.begin(), ok.end(), [&](const PointResult* a, const PointResult* b) {
    const double ao = objective_value(study.objective, *a), bo = objective_value(study.objective, *b);
    if (ao != bo) return ao < bo;
    const double a2 = objective_value(other, *a), b2 = objective_value(other, *b);
    if (a2 != b2) return a2 < b2;
    return a->index < b->index;
  });
  for (std::size_t i = 0; i < ok.size(); ++i) ok[i]->rank = static_cast<int>(i) + 1;

  // Pareto front of (step time, device-hours) over the points that fit: sorted by step time, a
  // point is on the front when no point is at least as good in both and better in one.
  std::vector<PointResult*> fit;
  for (auto& p : results) {
    if (p.valid && p.fits && p.steps > 0) fit.push_back(&p);
  }
  std::sort(fit.begin(), fit.end(), [](const PointResult* a, const PointResult* b) {
    if (a->step_time_s != b->step_time_s) return a->step_time_s < b->step_time_s;
    if (a->device_hours_per_step != b->device_hours_per_step) return a->device_hours_per_step < b->device_hours_per_step;
    return a->index < b->index;
  });
  double best = std::numeric_limits<double>::infinity();  // least device-hours at a smaller step time
  for (std::size_t i = 0; i < fit.size();) {
    std::size_t j = i;
    while (j < fit.size() && fit[j]->step_time_s == fit[i]->step_time_s) ++j;
    const double least = fit[i]->device_hours_per_step;  // sorted: the group's least device-hours
    if (least < best) {
      for (std::size_t k = i; k < j && fit[k]->device_hours_per_step == least; ++k) fit[k]->pareto = true;
      best = least;
    }
    i = j;
  }
}

const PointResult* recommended(const std::vector<PointResult>& results) {
  for (const auto& p : results) {
    if (p.rank == 1) return &p;
  }
  return nullptr;
}

std::string point_settings(const Study& study, std::size_t index) {
  std::string out;
  for (const auto& [key, value] : study.settings(index)) out += fmt::format("{}{}={}", out.empty() ? "" : " ", key, value);
  return out;
}

// Outputs -----------------------------------------------------------------------------------------

std::string results_csv(const Study& study, const std::vector<PointResult>& results) {
  std::vector<std::string> head = {"point"};
  for (const auto& k : study.columns()) head.push_back(k);
  head.insert(head.end(), {"status", "step_time_s", "step_time_max_s"});
  std::vector<sim::Phase> phases;  // every phase some point has, in kPhases order
  for (const auto ph : sim::kPhases) {
    for (const auto& p : results) {
      if (std::find(p.phases.begin(), p.phases.end(), ph) != p.phases.end()) {
        phases.push_back(ph);
        break;
      }
    }
  }
  if (results.empty()) phases = sim::phases_of(sim::Scenario{});
  for (const auto ph : phases) head.push_back(std::string(sim::phase_name(ph)) + "_s");
  head.insert(head.end(), {"rollout_share", "generated_tokens_per_s", "peak_memory_rollout_bytes", "peak_memory_training_bytes",
                           "device_memory_bytes", "fits", "oom_role", "devices", "device_hours_per_step", "verify",
                           "verify_mismatches", "meets_constraints", "violations", "rank", "pareto", "oom_reason", "error"});
  auto line = [](const std::vector<std::string>& fields) {
    std::string l;
    for (std::size_t i = 0; i < fields.size(); ++i) {
      if (i) l += ',';
      l += csv_field(fields[i]);
    }
    return l + "\n";
  };
  std::string t = line(head);
  for (const auto& p : results) {
    std::vector<std::string> f = {std::to_string(p.index)};
    for (const auto& kv : study.settings(p.index)) f.push_back(kv.second);
    const bool timed = p.valid && p.steps > 0;  // a configuration that cannot start has no step time
    auto when = [&](bool ok, double v, int digits) { return ok ? fixed(v, digits) : std::string(); };
    std::string violations;
    for (const auto& v : p.violations) violations += (violations.empty() ? "" : ";") + v;
    f.push_back(p.valid ? "ok" : "invalid");
    f.push_back(when(timed, p.step_time_s, 6));
    f.push_back(when(timed, p.step_time_max_s, 6));
    for (const auto ph : phases) f.push_back(when(timed, p.valid ? p.phase_s[static_cast<std::size_t>(ph)] : 0.0, 6));
    f.push_back(when(timed, p.rollout_share, 6));
    f.push_back(when(timed, p.generated_tokens_per_s, 3));
    f.push_back(when(p.valid, p.peak_rollout_bytes, 0));
    f.push_back(when(p.valid, p.peak_training_bytes, 0));
    f.push_back(when(p.valid, p.device_memory_bytes, 0));
    f.push_back(p.fits ? "true" : "false");
    f.push_back(p.oom_role);
    f.push_back(p.valid ? std::to_string(p.devices) : "");
    f.push_back(when(timed, p.device_hours_per_step, 6));
    f.push_back(p.valid ? p.verify : "");
    f.push_back(p.valid ? std::to_string(p.verify_mismatches) : "");
    f.push_back(p.meets ? "true" : "false");
    f.push_back(violations);
    f.push_back(p.rank > 0 ? std::to_string(p.rank) : "");
    f.push_back(p.pareto ? "true" : "false");
    f.push_back(p.oom_reason);
    f.push_back(p.error);
    t += line(f);
  }
  return t;
}

namespace {

json metrics_json(const PointResult& p) {
  json phases = json::object();
  for (const auto ph : p.phases) phases[std::string(sim::phase_name(ph))] = p.phase_s[static_cast<std::size_t>(ph)];
  return {{"step_time_s", p.step_time_s},
          {"phases_s", phases},
          {"rollout_share", p.rollout_share},
          {"generated_tokens_per_s", p.generated_tokens_per_s},
          {"peak_memory_bytes", {{"rollout", p.peak_rollout_bytes}, {"training", p.peak_training_bytes}}},
          {"devices", p.devices},
          {"device_hours_per_step", p.device_hours_per_step},
          {"verify", p.verify}};
}

json settings_json(const Study& study, std::size_t index) {
  json s = json::object();
  for (const auto& [key, value] : study.settings(index)) s[key] = value;
  return s;
}

}  // namespace

json plan_json(const Study& study, const std::vector<PointResult>& results) {
  json j;
  j["study"] = study.file;
  j["name"] = study.name;
  j["base"] = study.base;
  json sweep = json::array();
  for (const auto& a : study.sweep) sweep.push_back({{"name", a.name}, {"keys", a.keys}, {"values", a.values}});
  j["sweep"] = sweep;
  j["objective"] = objective_name(study.objective);
  json c = {{"fits_memory", study.constraints.fits_memory}, {"precision_consistent", study.constraints.precision_consistent}};
  if (study.constraints.max_step_time_s) c["max_step_time_s"] = *study.constraints.max_step_time_s;
  if (study.constraints.max_device_hours_per_step) c["max_device_hours_per_step"] = *study.constraints.max_device_hours_per_step;
  if (study.constraints.max_devices) c["max_devices"] = *study.constraints.max_devices;
  j["constraints"] = c;
  std::size_t valid = 0, fit = 0, meet = 0;
  json front = json::array();
  for (const auto& p : results) {
    valid += p.valid;
    fit += p.valid && p.fits;
    meet += p.meets;
    if (p.pareto) front.push_back(p.index);
  }
  j["points"] = {{"total", results.size()}, {"valid", valid}, {"fit", fit}, {"meeting_constraints", meet}};
  if (const PointResult* r = recommended(results)) {
    j["recommended"] = {{"point", r->index}, {"settings", settings_json(study, r->index)}, {"metrics", metrics_json(*r)}};
  } else {
    j["recommended"] = nullptr;
  }
  j["pareto_front"] = front;
  return j;
}

namespace {

// One row of the console ranking: rank, the point's settings, its figures ("-" where it did not
// run), fit and verify.
std::vector<std::string> ranking_row(const Study& study, const PointResult& p, const std::string& rank) {
  std::vector<std::string> r = {rank};
  for (const auto& kv : study.settings(p.index)) r.push_back(kv.second);
  const bool timed = p.steps > 0;
  r.push_back(timed ? fmt::format("{:.1f}", p.step_time_s) : "-");
  r.push_back(timed ? fmt::format("{:.1f}", 100 * p.rollout_share) : "-");
  r.push_back(timed ? fmt::format("{:.3f}", p.device_hours_per_step) : "-");
  r.push_back(std::to_string(p.devices));
  r.push_back(timed ? fmt::format("{:.1f}", p.peak_rollout_bytes / 1e9) : "-");
  r.push_back(timed ? fmt::format("{:.1f}", p.peak_training_bytes / 1e9) : "-");
  r.push_back(p.fits ? "yes" : "OOM " + p.oom_role);
  r.push_back(p.verify);
  return r;
}

// The study's constraints as one phrase ("fits memory, devices <= 64"), empty when none.
std::string constraints_text(const Study& study) {
  const auto& c = study.constraints;
  std::string cons = c.fits_memory ? "fits memory" : "";
  if (c.max_step_time_s) cons += fmt::format("{}step time <= {:g} s", cons.empty() ? "" : ", ", *c.max_step_time_s);
  if (c.max_device_hours_per_step) {
    cons += fmt::format("{}device-hours per step <= {:g}", cons.empty() ? "" : ", ", *c.max_device_hours_per_step);
  }
  if (c.max_devices) cons += fmt::format("{}devices <= {}", cons.empty() ? "" : ", ", *c.max_devices);
  if (c.precision_consistent) cons += fmt::format("{}precision flow consistent", cons.empty() ? "" : ", ");
  return cons;
}

// The header and rows in aligned columns (the `keys` setting columns after the rank left-aligned,
// the rest right-aligned), a divider before row `divider_at` (the first not meeting the constraints).
void print_table(std::ostream& out, const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                 std::size_t keys, std::size_t divider_at) {
  std::vector<std::size_t> width(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& r : rows) width[c] = std::max(width[c], r[c].size());
  }
  auto print_row = [&](const std::vector<std::string>& r) {
    std::string line = " ";
    for (std::size_t c = 0; c < r.size(); ++c) {
      const bool left = c > 0 && c <= keys;
      line += left ? fmt::format(" {:<{}}", r[c], width[c]) : fmt::format(" {:>{}}", r[c], width[c]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  };
  print_row(header);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i == divider_at) out << "  -- not meeting the constraints --\n";
    print_row(rows[i]);
  }
}

// Why the valid points outside the constraints miss them, and the first invalid points' errors.
void print_excluded(std::ostream& out, const Study& study, const std::vector<const PointResult*>& other,
                    const std::vector<const PointResult*>& invalid) {
  if (!other.empty()) {
    std::map<std::string, std::size_t> why;
    for (const auto* p : other) {
      for (const auto& v : p->violations) ++why[v];
    }
    std::string list;
    for (const auto& [k, n] : why) list += fmt::format("{}{} {}", list.empty() ? "" : ", ", n, k);
    out << fmt::format("  {} points do not meet the constraints ({})\n", other.size(), list);
  }
  if (!invalid.empty()) {
    out << fmt::format("  {} points failed validation and were skipped:\n", invalid.size());
    for (std::size_t i = 0; i < invalid.size() && i < 5; ++i) {
      out << fmt::format("    point {} ({}): {}\n", invalid[i]->index, point_settings(study, invalid[i]->index),
                         invalid[i]->error);
    }
    if (invalid.size() > 5) out << fmt::format("    ... and {} more (results.csv, column error)\n", invalid.size() - 5);
  }
}

}  // namespace

void print_ranking(std::ostream& out, const Study& study, const std::vector<PointResult>& results, std::size_t top) {
  const auto keys = study.columns();
  std::vector<std::string> header = {"rank"};
  header.insert(header.end(), keys.begin(), keys.end());
  for (const char* h : {"step s", "rollout %", "dev-h/step", "devices", "rollout GB", "train GB", "fits", "verify"})
    header.emplace_back(h);
  std::vector<const PointResult*> ranked, other, invalid;
  for (const auto& p : results) {
    if (p.meets)
      ranked.push_back(&p);
    else if (p.valid)
      other.push_back(&p);
    else
      invalid.push_back(&p);
  }
  std::sort(ranked.begin(), ranked.end(), [](const PointResult* a, const PointResult* b) { return a->rank < b->rank; });
  const std::size_t limit = top == 0 ? results.size() : top;
  std::vector<std::vector<std::string>> rows;
  for (std::size_t i = 0; i < ranked.size() && i < limit; ++i)
    rows.push_back(ranking_row(study, *ranked[i], std::to_string(ranked[i]->rank)));
  const std::size_t ranked_rows = rows.size();
  for (std::size_t i = 0; i < other.size() && i < limit; ++i) rows.push_back(ranking_row(study, *other[i], "-"));
  const std::string cons = constraints_text(study);
  out << fmt::format("  ranked by {} (lowest first); constraints: {}\n", objective_name(study.objective),
                     cons.empty() ? "none" : cons);
  print_table(out, header, rows, keys.size(), ranked_rows);
  if (ranked.size() > limit)
    out << fmt::format("  ... {} more points meet the constraints (results.csv has them all)\n", ranked.size() - limit);
  if (other.size() > limit) out << fmt::format("  ... {} more points do not meet the constraints\n", other.size() - limit);
  print_excluded(out, study, other, invalid);
  if (const PointResult* r = recommended(results)) {
    out << "recommended: " << point_settings(study, r->index) << "\n";
  } else {
    out << "recommended: none (no point meets the constraints)\n";
  }
}

namespace {

// The cells of the two heatmap axes: for each (x, y) setting, the points in it.
struct Cells {
  std::size_t ax = 0, ay = 0, nx = 0, ny = 0;
  std::vector<std::vector<const PointResult*>> at;  // ny x nx
};

Cells cells_of(const Study& study, const std::vector<PointResult>& results) {
  Cells c;
  c.ax = static_cast<std::size_t>(study.axis_index(study.heatmap.at(0)));
  c.ay = static_cast<std::size_t>(study.axis_index(study.heatmap.at(1)));
  c.nx = study.sweep[c.ax].size();
  c.ny = c.ay == c.ax ? 1 : study.sweep[c.ay].size();
  c.at.assign(c.nx * c.ny, {});
  for (const auto& p : results) {
    const auto co = study.coordinates(p.index);
    const std::size_t y = c.ay == c.ax ? 0 : co[c.ay];
    c.at[y * c.nx + co[c.ax]].push_back(&p);
  }
  return c;
}

GridPlot grid_frame(const Study& study, const Cells& c, const std::string& title) {
  GridPlot g;
  const auto& x = study.sweep[c.ax];
  const auto& y = study.sweep[c.ay];
  g.title = title;
  g.xlabel = x.name;
  for (std::size_t i = 0; i < x.size(); ++i) g.xticks.push_back(x.label(i));
  if (c.ay == c.ax) {
    g.yticks = {""};
  } else {
    g.ylabel = y.name;
    for (std::size_t i = 0; i < y.size(); ++i) g.yticks.push_back(y.label(i));
  }
  g.z.assign(c.nx * c.ny, std::numeric_limits<double>::quiet_NaN());
  g.text.assign(c.nx * c.ny, "");
  return g;
}

// A point as the labels of the axes that vary ("int4-w4a16-g32 8"), for plot labels.
std::string short_label(const Study& study, std::size_t index) {
  const auto c = study.coordinates(index);
  std::string out;
  for (std::size_t a = 0; a < study.sweep.size(); ++a) {
    if (study.sweep[a].size() > 1) out += (out.empty() ? "" : " ") + study.sweep[a].label(c[a]);
  }
  return out;
}

bool more_than_two_axes(const Study& study) {
  std::size_t varying = 0;
  for (const auto& a : study.sweep) varying += a.size() > 1;
  return varying > (study.heatmap[0] == study.heatmap[1] ? 1u : 2u);
}

}  // namespace

void write_plan_outputs(const std::string& dir, const Study& study, const std::vector<PointResult>& results,
                        std::vector<std::string>* warnings) {
  write_directory(dir, [&](const fs::path& tmp) {
    write_text(tmp / "results.csv", results_csv(study, results));
    write_text(tmp / "plan.json", plan_json(study, results).dump(2) + "\n");
    if (!study.plots) return;
    const Cells cells = cells_of(study, results);
    const std::string others = more_than_two_axes(study) ? " (best over the other sweep keys)" : "";
    std::string why;
    {
      // Step time: the fastest point of each cell that meets the constraints.
      GridPlot g = grid_frame(study, cells, study.name + "\nstep time (s) of the points meeting the constraints" + others);
      g.cblabel = "step time (s)";
      for (std::size_t i = 0; i < cells.at.size(); ++i) {
        const PointResult* best = nullptr;
        for (const auto* p : cells.at[i]) {
          if (p->meets && (!best || p->step_time_s < best->step_time_s)) best = p;
        }
        if (best) {
          g.z[i] = best->step_time_s;
          g.text[i] = fmt::format("{:.1f}", best->step_time_s);
        } else {
          bool valid = false;
          for (const auto* p : cells.at[i]) valid = valid || p->valid;
          g.text[i] = valid ? "none meets" : "invalid";
        }
      }
      if (!plot_grid(tmp / "step_time_heatmap.png", g, &why) && warnings)
        warnings->push_back("step_time_heatmap.png not drawn: " + why);
    }
    {
      // Memory fit: fits (in k of n points when the other keys vary), else which role runs out.
      GridPlot g =
          grid_frame(study, cells,
                     study.name + "\nmemory fit" +
                         (more_than_two_axes(study) ? std::string(" (fits k/n: in k of the n points of the cell)") : ""));
      g.categories = {{"fits", "#59a14f"},
                      {"rollout runs out", "#f28e2b"},
                      {"training runs out", "#e15759"},
                      {"rollout or training runs out", "#b07aa1"},
                      {"invalid", "#bab0ac"}};
      for (std::size_t i = 0; i < cells.at.size(); ++i) {
        std::size_t fits = 0, valid = 0;
        std::set<std::string> roles;
        for (const auto* p : cells.at[i]) {
          valid += p->valid;
          fits += p->valid && p->fits;
          if (p->valid && !p->fits) roles.insert(p->oom_role);
        }
        const std::size_t n = cells.at[i].size();
        if (fits > 0) {
          g.z[i] = 0;
          g.text[i] = fits == n ? "fits" : fmt::format("fits {}/{}", fits, n);
        } else if (valid == 0) {
          g.z[i] = 4;
          g.text[i] = "invalid";
        } else if (roles.size() == 1) {
          g.z[i] = *roles.begin() == "rollout" ? 1 : 2;
          g.text[i] = "OOM " + *roles.begin();
        } else {
          g.z[i] = 3;
          g.text[i] = "OOM rollout/training";
        }
      }
      if (!plot_grid(tmp / "fit_map.png", g, &why) && warnings) warnings->push_back("fit_map.png not drawn: " + why);
    }
    {
      ParetoPlot pp;
      pp.title = study.name + "\nstep time vs device-hours per step of the points that fit; Pareto front labelled";
      pp.xlabel = "device-hours per step";
      pp.ylabel = "step time (s)";
      for (const auto& p : results) {
        if (!(p.valid && p.fits && p.steps > 0)) continue;
        pp.points.push_back({p.device_hours_per_step, p.step_time_s, ""});
        if (p.pareto) pp.front.push_back({p.device_hours_per_step, p.step_time_s, short_label(study, p.index)});
      }
      std::sort(pp.front.begin(), pp.front.end(),
                [](const ScatterPoint& a, const ScatterPoint& b) { return a.x < b.x || (a.x == b.x && a.y < b.y); });
      if (pp.front.size() > 12) {
        // Label every k-th point of a long front so the labels stay readable.
        const std::size_t k = (pp.front.size() + 11) / 12;
        for (std::size_t i = 0; i < pp.front.size(); ++i) {
          if (i % k != 0) pp.front[i].label.clear();
        }
      }
      if (const PointResult* r = recommended(results)) pp.chosen = ScatterPoint{r->device_hours_per_step, r->step_time_s, ""};
      if (study.constraints.max_step_time_s) {
        pp.y_limit = *study.constraints.max_step_time_s;
        pp.y_limit_label = fmt::format("max step time {:g} s", *pp.y_limit);
      }
      if (!plot_pareto(tmp / "pareto.png", pp, &why) && warnings) warnings->push_back("pareto.png not drawn: " + why);
    }
  });
}

// Serialisation -----------------------------------------------------------------------------------

json point_to_json(const PointResult& p) {
  return {{"index", p.index},
          {"valid", p.valid},
          {"error", p.error},
          {"steps", p.steps},
          {"step_time_s", p.step_time_s},
          {"step_time_max_s", p.step_time_max_s},
          {"phase_s", p.phase_s},
          {"rollout_share", p.rollout_share},
          {"generated_tokens_per_s", p.generated_tokens_per_s},
          {"peak_rollout_bytes", p.peak_rollout_bytes},
          {"peak_training_bytes", p.peak_training_bytes},
          {"device_memory_bytes", p.device_memory_bytes},
          {"fits", p.fits},
          {"oom_role", p.oom_role},
          {"oom_reason", p.oom_reason},
          {"devices", p.devices},
          {"device_hours_per_step", p.device_hours_per_step},
          {"verify", p.verify},
          {"verify_mismatches", p.verify_mismatches}};
}

PointResult point_from_json(const json& j) {
  PointResult p;
  p.index = j.at("index").get<std::size_t>();
  p.valid = j.at("valid").get<bool>();
  p.error = j.at("error").get<std::string>();
  p.steps = j.at("steps").get<int>();
  p.step_time_s = j.at("step_time_s").get<double>();
  p.step_time_max_s = j.at("step_time_max_s").get<double>();
  p.phase_s = j.at("phase_s").get<std::vector<double>>();
  p.rollout_share = j.at("rollout_share").get<double>();
  p.generated_tokens_per_s = j.at("generated_tokens_per_s").get<double>();
  p.peak_rollout_bytes = j.at("peak_rollout_bytes").get<double>();
  p.peak_training_bytes = j.at("peak_training_bytes").get<double>();
  p.device_memory_bytes = j.at("device_memory_bytes").get<double>();
  p.fits = j.at("fits").get<bool>();
  p.oom_role = j.at("oom_role").get<std::string>();
  p.oom_reason = j.at("oom_reason").get<std::string>();
  p.devices = j.at("devices").get<int>();
  p.device_hours_per_step = j.at("device_hours_per_step").get<double>();
  p.verify = j.at("verify").get<std::string>();
  p.verify_mismatches = j.at("verify_mismatches").get<std::size_t>();
  return p;
}

}  // namespace rlsim::analysis
