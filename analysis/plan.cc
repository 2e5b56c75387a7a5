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

// Errors of a study file: "file:line:column: what".
struct StudySource {
  std::string file;
  [[noreturn]] void fail(const YAML::Node& n, const std::string& what) const {
    const YAML::Mark m = n.Mark();
    if (m.is_null()) throw ScenarioError(fmt::format("{}: {}", file, what));
    throw ScenarioError(fmt::format("{}:{}:{}: {}", file, m.line + 1, m.column + 1, what));
  }
  void only(const YAML::Node& map, const std::string& where, const std::vector<std::string>& valid) const {
    for (const auto& kv : map) {
      if (!kv.first.IsScalar()) fail(kv.first, "a key must be a plain name");
      const std::string k = kv.first.Scalar();
      if (std::find(valid.begin(), valid.end(), k) == valid.end()) {
        std::string list;
        for (const auto& v : valid) list += (list.empty() ? "" : ", ") + v;
        fail(kv.first, fmt::format("unknown key '{}{}' (valid keys here: {})", where.empty() ? "" : where + ".", k, list));
      }
    }
  }
};

std::string flow_yaml(const YAML::Node& n) {
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

bool valid_dotted_key(const std::string& key) {
  if (key.empty() || key.front() == '.' || key.back() == '.' || key.find("..") != std::string::npos) return false;
  return std::all_of(key.begin(), key.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; });
}

// The values of one swept key as flow YAML; `unique`: a value may not repeat (a plain key; in a
// group only whole settings must differ).
std::vector<std::string> sweep_values(const StudySource& src, const YAML::Node& list, const std::string& key, bool unique) {
  if (!list.IsSequence() || list.size() == 0)
    src.fail(list, fmt::format("sweep '{}' must be a non-empty list of values, e.g. [1, 2, 4]", key));
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& v : list) {
    if (v.IsNull()) src.fail(v, fmt::format("sweep '{}': an empty value", key));
    std::string text = flow_yaml(v);
    if (!seen.insert(text).second && unique) src.fail(v, fmt::format("sweep '{}': the value {} appears twice", key, text));
    out.push_back(std::move(text));
  }
  return out;
}

std::string fixed(double v, int digits) { return fmt::format("{:.{}f}", v, digits); }

const char* objective_name(Objective o) { return o == Objective::kStepTime ? "step_time" : "device_hours_per_step"; }

double objective_value(Objective o, const PointResult& p) {
  return o == Objective::kStepTime ? p.step_time_s : p.device_hours_per_step;
}

}  // namespace

// Study -------------------------------------------------------------------------------------------

std::string SweepAxis::label(std::size_t i) const { return values.at(i).front(); }

std::size_t Study::points() const {
  std::size_t n = 1;
  for (const auto& a : sweep) n *= a.size();
  return n;
}

std::vector<std::string> Study::columns() const {
  std::vector<std::string> out;
  for (const auto& a : sweep) out.insert(out.end(), a.keys.begin(), a.keys.end());
  return out;
}

std::vector<std::size_t> Study::coordinates(std::size_t point) const {
  std::vector<std::size_t> c(sweep.size());
  for (std::size_t a = sweep.size(); a-- > 0;) {
    c[a] = point % sweep[a].size();
    point /= sweep[a].size();
  }
  return c;
}

std::vector<std::pair<std::string, std::string>> Study::settings(std::size_t point) const {
  std::vector<std::pair<std::string, std::string>> out;
  const auto c = coordinates(point);
  for (std::size_t a = 0; a < sweep.size(); ++a) {
    for (std::size_t k = 0; k < sweep[a].keys.size(); ++k) out.emplace_back(sweep[a].keys[k], sweep[a].values[c[a]][k]);
  }
  return out;
}

std::vector<std::string> Study::overrides(std::size_t point) const {
  std::vector<std::string> out = sets;
  for (const auto& [key, value] : settings(point)) out.push_back(key + "=" + value);
  return out;
}

int Study::axis_index(const std::string& name) const {
  for (std::size_t a = 0; a < sweep.size(); ++a) {
    if (sweep[a].name == name) return static_cast<int>(a);
  }
  return -1;
}

namespace {
Study parse_study(const std::string& path);
}  // namespace

Study load_study(const std::string& path) {
  try {
    return parse_study(path);
  } catch (const YAML::Exception& e) {
    // A value of the wrong kind met by yaml-cpp itself (a mapping where a name is expected...).
    if (e.mark.is_null()) throw ScenarioError(fmt::format("{}: {}", path, e.msg));
    throw ScenarioError(fmt::format("{}:{}:{}: {}", path, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
}

namespace {

using KeyNodes = std::vector<std::pair<std::string, YAML::Node>>;  // swept keys and where they stand

// A sweep group (`name: {key: [values], key: [values]}`): keys swept together, value i with value i.
void parse_sweep_group(const StudySource& src, const YAML::Node& group, SweepAxis& ax, KeyNodes& all_keys) {
  if (group.size() == 0)
    src.fail(group, fmt::format("sweep group '{}' is empty: give it dotted keys with lists of values", ax.name));
  std::vector<std::vector<std::string>> per_key;
  for (const auto& g : group) {
    const std::string key = g.first.IsScalar() ? g.first.Scalar() : "";
    if (!valid_dotted_key(key))
      src.fail(g.first, fmt::format("sweep group '{}': '{}' is not a dotted scenario key", ax.name, key));
    per_key.push_back(sweep_values(src, g.second, key, false));
    if (per_key.back().size() != per_key.front().size()) {
      src.fail(g.second,
               fmt::format("sweep group '{}': '{}' has {} values but '{}' has {} (the keys of a group are swept together, "
                           "value i with value i)",
                           ax.name, key, per_key.back().size(), ax.keys.front(), per_key.front().size()));
    }
    ax.keys.push_back(key);
    all_keys.emplace_back(key, g.first);
  }
  ax.values.assign(per_key.front().size(), {});
  for (std::size_t i = 0; i < ax.values.size(); ++i) {
    for (const auto& vals : per_key) ax.values[i].push_back(vals[i]);
  }
  std::set<std::vector<std::string>> seen;
  for (std::size_t i = 0; i < ax.values.size(); ++i) {
    if (!seen.insert(ax.values[i]).second)
      src.fail(group, fmt::format("sweep group '{}': setting {} appears twice", ax.name, ax.label(i)));
  }
}

// A swept key (`dotted.key: [values]`).
void parse_sweep_key(const StudySource& src, const YAML::Node& key, const YAML::Node& values, SweepAxis& ax, KeyNodes& all_keys) {
  if (!valid_dotted_key(ax.name))
    src.fail(key, fmt::format("sweep: '{}' is not a dotted scenario key (e.g. cluster.nodes)", ax.name));
  ax.keys = {ax.name};
  for (auto& v : sweep_values(src, values, ax.name, true)) ax.values.push_back({std::move(v)});
  all_keys.emplace_back(ax.name, key);
}

void parse_sweep(const StudySource& src, const YAML::Node& root, Study& st) {
  const YAML::Node sweep = root["sweep"];
  if (!sweep || !sweep.IsMap() || sweep.size() == 0) {
    src.fail(sweep ? sweep : root,
             "missing 'sweep': a mapping of dotted scenario keys to lists of values, e.g. rollout.precision: [bf16, fp8-block]");
  }
  KeyNodes all_keys;  // for the overlap check
  for (const auto& kv : sweep) {
    SweepAxis ax;
    if (!kv.first.IsScalar()) src.fail(kv.first, "sweep: a key must be a dotted scenario key or a group name");
    ax.name = kv.first.Scalar();
    ax.line = kv.first.Mark().line + 1;
    if (kv.second.IsMap()) {
      parse_sweep_group(src, kv.second, ax, all_keys);
    } else {
      parse_sweep_key(src, kv.first, kv.second, ax, all_keys);
    }
    st.sweep.push_back(std::move(ax));
  }
  for (std::size_t i = 0; i < all_keys.size(); ++i) {
    for (std::size_t j = 0; j < all_keys.size(); ++j) {
      const auto& [a, an] = all_keys[i];
      const auto& b = all_keys[j].first;
      if (i < j && a == b) src.fail(all_keys[j].second, fmt::format("sweep: '{}' is swept twice", b));
      if (i != j && b.starts_with(a + "."))
        src.fail(all_keys[std::max(i, j)].second, fmt::format("sweep: '{}' lies inside '{}', which is swept too", b, a));
    }
  }
  {
    double n = 1;
    for (const auto& a : st.sweep) n *= static_cast<double>(a.size());
    if (n > static_cast<double>(kMaxStudyPoints)) {
      src.fail(sweep, fmt::format("the sweep has {:.0f} points; at most {} are allowed (split the study)", n, kMaxStudyPoints));
    }
  }
}

void parse_objective_and_constraints(const StudySource& src, const YAML::Node& root, Study& st) {
  if (const YAML::Node o = root["objective"]) {
    const std::string v = o.IsScalar() ? o.Scalar() : "";
    if (v == "step_time")
      st.objective = Objective::kStepTime;
    else if (v == "device_hours_per_step")
      st.objective = Objective::kDeviceHoursPerStep;
    else
      src.fail(o, fmt::format("objective: unknown value '{}' (expected step_time or device_hours_per_step)", v));
  }
  if (const YAML::Node c = root["constraints"]) {
    if (!c.IsMap()) src.fail(c, "constraints must be a mapping, e.g. {fits_memory: true, max_step_time: 900 s}");
    src.only(c, "constraints",
             {"fits_memory", "max_step_time", "max_device_hours_per_step", "max_devices", "precision_consistent"});
    auto boolean = [&](const char* key, bool& out) {
      if (const YAML::Node n = c[key]) {
        if (!n.IsScalar() || !YAML::convert<bool>::decode(n, out))
          src.fail(n, fmt::format("constraints.{} must be true or false", key));
      }
    };
    boolean("fits_memory", st.constraints.fits_memory);
    boolean("precision_consistent", st.constraints.precision_consistent);
    if (const YAML::Node n = c["max_step_time"]) {
      try {
        if (!n.IsScalar()) throw std::invalid_argument("expected a time with its unit, e.g. 900 s");
        st.constraints.max_step_time_s = sim::parse_quantity(n.Scalar(), sim::Dimension::kTime);
      } catch (const std::invalid_argument& e) {
        src.fail(n, std::string("constraints.max_step_time: ") + e.what());
      }
    }
    if (const YAML::Node n = c["max_device_hours_per_step"]) {
      double v = 0;
      if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || !(v > 0))
        src.fail(n, "constraints.max_device_hours_per_step must be a positive number");
      st.constraints.max_device_hours_per_step = v;
    }
    if (const YAML::Node n = c["max_devices"]) {
      int v = 0;
      if (!n.IsScalar() || !YAML::convert<int>::decode(n, v) || v < 1)
        src.fail(n, "constraints.max_devices must be a positive integer");
      st.constraints.max_devices = v;
    }
  }
}

void parse_plots_and_output(const StudySource& src, const YAML::Node& root, const std::string& path, Study& st) {
  std::vector<std::string> multi;
  for (const auto& a : st.sweep) {
    if (a.size() > 1) multi.push_back(a.name);
  }
  if (multi.empty()) multi.push_back(st.sweep.front().name);
  st.heatmap = {multi[0], multi.size() > 1 ? multi[1] : multi[0]};
  if (const YAML::Node p = root["plots"]) {
    if (!p.IsMap()) src.fail(p, "plots must be a mapping, e.g. {heatmap: [cluster.nodes, rollout.precision]}");
    src.only(p, "plots", {"heatmap"});
    if (const YAML::Node h = p["heatmap"]) {
      if (!h.IsSequence() || h.size() < 1 || h.size() > 2)
        src.fail(h, "plots.heatmap must list one or two sweep keys (x, then y)");
      std::vector<std::string> names;
      for (const auto& n : h) {
        const std::string name = n.IsScalar() ? n.Scalar() : "";
        if (st.axis_index(name) < 0) {
          std::string list;
          for (const auto& a : st.sweep) list += (list.empty() ? "" : ", ") + a.name;
          src.fail(n, fmt::format("plots.heatmap: '{}' is not a sweep key or group (expected one of: {})", name, list));
        }
        names.push_back(name);
      }
      st.heatmap = {names[0], names.size() > 1 ? names[1] : names[0]};
    }
  }
  st.out_dir = (fs::path("out") / fs::path(path).stem()).string();
  if (const YAML::Node o = root["output"]) {
    if (!o.IsMap()) src.fail(o, "output must be a mapping, e.g. {dir: out/my-study, plots: true}");
    src.only(o, "output", {"dir", "plots"});
    if (o["dir"]) {
      if (!o["dir"].IsScalar() || o["dir"].Scalar().empty()) src.fail(o["dir"], "output.dir must be a folder name");
      st.out_dir = o["dir"].Scalar();
    }
    if (const YAML::Node n = o["plots"]) {
      if (!n.IsScalar() || !YAML::convert<bool>::decode(n, st.plots)) src.fail(n, "output.plots must be true or false");
    }
  }
}

Study parse_study(const std::string& path) {
  const StudySource src{path};
  const YAML::Node root = sim::load_yaml_file(path, "study file");
  if (!root.IsMap())
    throw ScenarioError(path + ":1:1: a study must be a YAML mapping with base: and sweep: (see SCENARIO.md, Study files)");
  src.only(root, "", {"name", "base", "sweep", "objective", "constraints", "plots", "output"});

  Study st;
  st.file = path;
  const fs::path dir = fs::path(path).parent_path();
  if (root["name"] && !root["name"].IsScalar()) src.fail(root["name"], "name must be a string");
  st.name = root["name"] ? root["name"].Scalar() : fs::path(path).filename().string();
  if (!root["base"] || !root["base"].IsScalar())
    src.fail(root["base"] ? root["base"] : root, "missing 'base': the scenario file the sweep starts from");
  {
    const fs::path b = root["base"].Scalar();
    st.base = (b.is_absolute() ? b : dir / b).string();
    if (!fs::is_regular_file(st.base))
      src.fail(root["base"], fmt::format("base scenario '{}' not found (looked for {})", b.string(), st.base));
  }
  parse_sweep(src, root, st);
  parse_objective_and_constraints(src, root, st);
  parse_plots_and_output(src, root, path, st);
  return st;
}

}  // namespace

// Evaluation --------------------------------------------------------------------------------------

namespace {

// The loader names the override an error comes from "sweep KEY=VALUE"; one of the study's `sets`
// is named as the user gave it, "--set KEY=VALUE".
std::string relabel(const Study& st, const std::string& what) {
  for (const auto& set : st.sets) {
    if (what.starts_with("sweep " + set + ":")) return "--set " + what.substr(6);
  }
  return what;
}

// An unknown key as an error of the study: at the study file's line of the swept key, else as
// relabelled (a --set key, or the base file's own position).
std::string key_error_message(const Study& st, const std::string& what) {
  const std::string w = relabel(st, what);
  if (w.starts_with("sweep ")) {
    const std::string key = w.substr(6, w.find('=') - 6);
    for (const auto& a : st.sweep) {
      if (std::find(a.keys.begin(), a.keys.end(), key) != a.keys.end()) return fmt::format("{}:{}:1: {}", st.file, a.line, w);
    }
  }
  return w;
}

}  // namespace

void check_study_keys(const Study& study) {
  try {
    (void)sim::load_scenario(study.base, study.overrides(0), "sweep", study.calibration.get());
  } catch (const sim::ScenarioKeyError& e) {
    throw ScenarioError(key_error_message(study, e.what()));
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
    throw sim::ScenarioKeyError(key_error_message(study, e.what()));
  } catch (const ScenarioError& e) {
    p.error = relabel(study, e.what());
    return p;
  }
  p.valid = true;
  const PrecisionFlowVerdict flow = cache.verdict(s);
  // The figures of summary.json, so a point reads the same as `rlsim run` of its scenario.
  const json j = summary_json(s, r, flow);
  p.steps = j["steps"].get<int>();
  p.step_time_s = j["step_time_s"]["mean"].get<double>();
  p.step_time_max_s = j["step_time_s"]["max"].get<double>();
  for (std::size_t i = 0; i < sim::kPhases.size(); ++i) p.phase_s[i] = j["phases_s"][sim::kPhases[i]].get<double>();
  p.rollout_share = j["rollout_share"].get<double>();
  p.generated_tokens_per_s = j["generated_tokens_per_s"].get<double>();
  p.peak_rollout_bytes = j["peak_memory_bytes"]["rollout"].get<double>();
  p.peak_training_bytes = j["peak_memory_bytes"]["training"].get<double>();
  p.device_memory_bytes = j["device_memory_bytes"].get<double>();
  p.fits = j["fits"].get<bool>();
  if (r.oom) {
    p.oom_role = r.oom->role;
    p.oom_reason = r.oom->reason;
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
  for (const auto& ph : sim::kPhases) head.push_back(ph + "_s");
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
    for (std::size_t i = 0; i < sim::kPhases.size(); ++i) f.push_back(when(timed, p.valid ? p.phase_s[i] : 0.0, 6));
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
  for (std::size_t i = 0; i < sim::kPhases.size(); ++i) phases[sim::kPhases[i]] = p.phase_s[i];
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

void print_ranking(std::ostream& out, const Study& study, const std::vector<PointResult>& results, std::size_t top) {
  const auto keys = study.columns();
  std::vector<std::string> header = {"rank"};
  header.insert(header.end(), keys.begin(), keys.end());
  for (const char* h : {"step s", "rollout %", "dev-h/step", "devices", "rollout GB", "train GB", "fits", "verify"})
    header.emplace_back(h);
  std::vector<std::vector<std::string>> rows;
  auto row_of = [&](const PointResult& p, const std::string& rank) {
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
  };
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
  for (std::size_t i = 0; i < ranked.size() && i < limit; ++i)
    rows.push_back(row_of(*ranked[i], std::to_string(ranked[i]->rank)));
  const std::size_t ranked_rows = rows.size();
  for (std::size_t i = 0; i < other.size() && i < limit; ++i) rows.push_back(row_of(*other[i], "-"));
  std::vector<std::size_t> width(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& r : rows) width[c] = std::max(width[c], r[c].size());
  }
  auto print_row = [&](const std::vector<std::string>& r) {
    std::string line = " ";
    for (std::size_t c = 0; c < r.size(); ++c) {
      const bool left = c > 0 && c <= keys.size();
      line += left ? fmt::format(" {:<{}}", r[c], width[c]) : fmt::format(" {:>{}}", r[c], width[c]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  };
  std::string cons = study.constraints.fits_memory ? "fits memory" : "";
  if (study.constraints.max_step_time_s)
    cons += fmt::format("{}step time <= {:g} s", cons.empty() ? "" : ", ", *study.constraints.max_step_time_s);
  if (study.constraints.max_device_hours_per_step) {
    cons +=
        fmt::format("{}device-hours per step <= {:g}", cons.empty() ? "" : ", ", *study.constraints.max_device_hours_per_step);
  }
  if (study.constraints.max_devices)
    cons += fmt::format("{}devices <= {}", cons.empty() ? "" : ", ", *study.constraints.max_devices);
  if (study.constraints.precision_consistent) cons += fmt::format("{}precision flow consistent", cons.empty() ? "" : ", ");
  out << fmt::format("  ranked by {} (lowest first); constraints: {}\n", objective_name(study.objective),
                     cons.empty() ? "none" : cons);
  print_row(header);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i == ranked_rows) out << "  -- not meeting the constraints --\n";
    print_row(rows[i]);
  }
  if (ranked.size() > limit)
    out << fmt::format("  ... {} more points meet the constraints (results.csv has them all)\n", ranked.size() - limit);
  if (other.size() > limit) out << fmt::format("  ... {} more points do not meet the constraints\n", other.size() - limit);
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
