#include "sim/scenario/study.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <limits>
#include <set>

#include "sim/scenario/yaml_file.h"
#include "sim/scenario/yaml_map.h"

namespace rlsim::sim {
namespace {

namespace fs = std::filesystem;

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

std::pair<int, int> mark_of(const YAML::Node& n) {
  const YAML::Mark m = n.Mark();
  return m.is_null() ? std::pair{0, 0} : std::pair{m.line + 1, m.column + 1};
}

// The values of one swept key as flow YAML; `unique`: a value may not repeat (a plain key; in a
// group only whole settings must differ).
std::vector<std::string> sweep_values(const Source& src, const YAML::Node& list, const std::string& key, bool unique) {
  const std::string path = "sweep." + key;
  if (!list.IsSequence() || list.size() == 0)
    src.fail(list, path, fmt::format("sweep '{}' must be a non-empty list of values, e.g. [1, 2, 4]", key));
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& v : list) {
    if (v.IsNull()) src.fail(v, path, fmt::format("sweep '{}': an empty value", key));
    std::string text = flow_yaml(v);
    if (!seen.insert(text).second && unique) src.fail(v, path, fmt::format("sweep '{}': the value {} appears twice", key, text));
    out.push_back(std::move(text));
  }
  return out;
}

using KeyNodes = std::vector<std::pair<std::string, YAML::Node>>;  // swept keys and where they stand

// A sweep group (`name: {key: [values], key: [values]}`): keys swept together, value i with value i.
void parse_sweep_group(const Source& src, const YAML::Node& group, SweepAxis& ax, KeyNodes& all_keys) {
  const std::string path = "sweep." + ax.name;
  if (group.size() == 0)
    src.fail(group, path, fmt::format("sweep group '{}' is empty: give it dotted keys with lists of values", ax.name));
  std::vector<std::vector<std::string>> per_key;
  for (const auto& g : group) {
    const std::string key = g.first.IsScalar() ? g.first.Scalar() : "";
    if (!valid_dotted_key(key))
      src.fail(g.first, path, fmt::format("sweep group '{}': '{}' is not a dotted scenario key", ax.name, key));
    per_key.push_back(sweep_values(src, g.second, key, false));
    if (per_key.back().size() != per_key.front().size()) {
      src.fail(g.second, path,
               fmt::format("sweep group '{}': '{}' has {} values but '{}' has {} (the keys of a group are swept together, "
                           "value i with value i)",
                           ax.name, key, per_key.back().size(), ax.keys.front(), per_key.front().size()));
    }
    ax.keys.push_back(key);
    ax.key_marks.push_back(mark_of(g.first));
    all_keys.emplace_back(key, g.first);
  }
  ax.values.assign(per_key.front().size(), {});
  for (std::size_t i = 0; i < ax.values.size(); ++i) {
    for (const auto& vals : per_key) ax.values[i].push_back(vals[i]);
  }
  std::set<std::vector<std::string>> seen;
  for (std::size_t i = 0; i < ax.values.size(); ++i) {
    if (!seen.insert(ax.values[i]).second)
      src.fail(group, path, fmt::format("sweep group '{}': setting {} appears twice", ax.name, ax.label(i)));
  }
}

// A swept key (`dotted.key: [values]`).
void parse_sweep_key(const Source& src, const YAML::Node& key, const YAML::Node& values, SweepAxis& ax, KeyNodes& all_keys) {
  if (!valid_dotted_key(ax.name))
    src.fail(key, "sweep", fmt::format("sweep: '{}' is not a dotted scenario key (e.g. cluster.nodes)", ax.name));
  ax.keys = {ax.name};
  ax.key_marks = {mark_of(key)};
  for (auto& v : sweep_values(src, values, ax.name, true)) ax.values.push_back({std::move(v)});
  all_keys.emplace_back(ax.name, key);
}

// No key swept twice, none inside another swept key, at most kMaxStudyPoints points.
void check_sweep(const Source& src, const YAML::Node& sweep, const KeyNodes& all_keys, const Study& st) {
  for (std::size_t i = 0; i < all_keys.size(); ++i) {
    for (std::size_t j = 0; j < all_keys.size(); ++j) {
      const auto& a = all_keys[i].first;
      const auto& b = all_keys[j].first;
      if (i < j && a == b) src.fail(all_keys[j].second, "sweep", fmt::format("sweep: '{}' is swept twice", b));
      if (i != j && b.starts_with(a + "."))
        src.fail(all_keys[std::max(i, j)].second, "sweep", fmt::format("sweep: '{}' lies inside '{}', which is swept too", b, a));
    }
  }
  double n = 1;
  for (const auto& a : st.sweep) n *= static_cast<double>(a.size());
  if (n > static_cast<double>(kMaxStudyPoints)) {
    src.fail(sweep, "sweep",
             fmt::format("the sweep has {:.0f} points; at most {} are allowed (split the study)", n, kMaxStudyPoints));
  }
}

void parse_sweep(Map& root, Study& st) {
  const Source& src = root.src();
  const YAML::Node sweep = root.get("sweep");
  if (!sweep || !sweep.IsMap() || sweep.size() == 0) {
    src.fail(sweep ? sweep : root.node(), "sweep",
             "missing 'sweep': a mapping of dotted scenario keys to lists of values, e.g. rollout.precision: [bf16, fp8-block]");
  }
  KeyNodes all_keys;
  for (const auto& kv : sweep) {
    SweepAxis ax;
    if (!kv.first.IsScalar()) src.fail(kv.first, "sweep", "sweep: a key must be a dotted scenario key or a group name");
    ax.name = kv.first.Scalar();
    if (kv.second.IsMap()) {
      parse_sweep_group(src, kv.second, ax, all_keys);
    } else {
      parse_sweep_key(src, kv.first, kv.second, ax, all_keys);
    }
    st.sweep.push_back(std::move(ax));
  }
  check_sweep(src, sweep, all_keys, st);
}

void parse_objective_and_constraints(Map& root, Study& st) {
  st.objective =
      root.choice<Objective>("objective", st.objective,
                             {{"step_time", Objective::kStepTime}, {"device_hours_per_step", Objective::kDeviceHoursPerStep}});
  if (!root.has("constraints")) return;
  Map c(root.src(), root.get("constraints"), "constraints");
  Constraints& k = st.constraints;
  k.fits_memory = c.boolean("fits_memory", k.fits_memory);
  k.precision_consistent = c.boolean("precision_consistent", k.precision_consistent);
  if (c.has("max_step_time")) k.max_step_time_s = c.quantity("max_step_time", 0, Dimension::kTime);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (c.has("max_device_hours_per_step"))
    k.max_device_hours_per_step = c.number("max_device_hours_per_step", 0, std::numeric_limits<double>::min(), kInf);
  if (c.has("max_devices")) k.max_devices = static_cast<int>(c.integer("max_devices", 0, 1, std::numeric_limits<int>::max()));
  c.finish({"fits_memory", "max_step_time", "max_device_hours_per_step", "max_devices", "precision_consistent"});
}

void parse_plots_and_output(Map& root, const std::string& path, Study& st) {
  std::vector<std::string> multi;
  for (const auto& a : st.sweep) {
    if (a.size() > 1) multi.push_back(a.name);
  }
  if (multi.empty()) multi.push_back(st.sweep.front().name);
  st.heatmap = {multi[0], multi.size() > 1 ? multi[1] : multi[0]};
  if (root.has("plots")) {
    Map p(root.src(), root.get("plots"), "plots");
    if (const YAML::Node h = p.get("heatmap")) {
      if (!h.IsSequence() || h.size() < 1 || h.size() > 2)
        p.src().fail(h, p.path("heatmap"), "plots.heatmap must list one or two sweep keys (x, then y)");
      std::vector<std::string> names;
      for (const auto& n : h) {
        const std::string name = n.IsScalar() ? n.Scalar() : "";
        if (st.axis_index(name) < 0) {
          std::vector<std::string> axes;
          for (const auto& a : st.sweep) axes.push_back(a.name);
          p.src().fail(n, p.path("heatmap"),
                       fmt::format("plots.heatmap: '{}' is not a sweep key or group (expected one of: {})", name, join(axes)));
        }
        names.push_back(name);
      }
      st.heatmap = {names[0], names.size() > 1 ? names[1] : names[0]};
    }
    p.finish({"heatmap"});
  }
  st.out_dir = (fs::path("out") / fs::path(path).stem()).string();
  if (root.has("output")) {
    Map o(root.src(), root.get("output"), "output");
    if (o.has("dir")) {
      st.out_dir = o.str("dir", st.out_dir);
      if (st.out_dir.empty()) o.src().fail(o.get("dir"), o.path("dir"), "output.dir must be a folder name");
    }
    st.plots = o.boolean("plots", st.plots);
    o.finish({"dir", "plots"});
  }
}

}  // namespace

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

Study load_study(const std::string& path) {
  const Source src{path, {}, "--set"};
  const YAML::Node node = load_input_file(path, InputKind::kStudy);
  if (!node.IsMap()) src.fail(node, "", "a study must be a YAML mapping with base: and sweep: (see SCENARIO.md, Study files)");
  Map root(src, node, "");
  root.finish({"name", "base", "sweep", "objective", "constraints", "plots", "output"});
  try {
    Study st;
    st.file = path;
    st.name = root.str("name", fs::path(path).filename().string());
    const fs::path b = root.str("base", "", true);
    st.base = (b.is_absolute() ? b : fs::path(path).parent_path() / b).string();
    std::error_code ec;  // a name too long, a loop of links...: not found, as the message says
    if (!fs::is_regular_file(st.base, ec))
      src.fail(root.get("base"), "base", fmt::format("base scenario '{}' not found (looked for {})", b.string(), st.base));
    parse_sweep(root, st);
    parse_objective_and_constraints(root, st);
    parse_plots_and_output(root, path, st);
    return st;
  } catch (const YAML::Exception& e) {
    // A value of the wrong kind met by yaml-cpp itself (a mapping where a name is expected...).
    InputLocation where;
    where.file = path;
    if (!e.mark.is_null()) {
      where.line = e.mark.line + 1;
      where.column = e.mark.column + 1;
    }
    throw ScenarioError(std::move(where), e.msg);
  }
}

}  // namespace rlsim::sim
