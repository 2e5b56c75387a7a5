#include "sim/scenario/calibration.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "sim/scenario/catalog_data.h"
#include "sim/scenario/units.h"
#include "sim/scenario/yaml_file.h"
#include "sim/scenario/yaml_map.h"

namespace rlsim::sim {

const DeviceCalibration& Calibration::device(const std::string& name) const {
  const auto it = devices.find(name);
  return it == devices.end() ? other_device : it->second;
}

namespace {

// Bounds of every fraction: a calibration outside them is bad input, not a fit.
constexpr double kMinFraction = 0.01, kMaxFraction = 1.0;

DeviceCalibration parse_device(Map m, const DeviceCalibration& dflt) {
  DeviceCalibration d;
  d.memory = m.number("memory", dflt.memory, kMinFraction, kMaxFraction);
  d.compute = m.number("compute", dflt.compute, kMinFraction, kMaxFraction);
  m.finish({"memory", "compute"});
  return d;
}

BackendCalibration parse_backend(Map m, const BackendCalibration& dflt) {
  BackendCalibration b;
  b.dense = m.number("dense", dflt.dense, kMinFraction, kMaxFraction);
  b.moe = m.number("moe", dflt.moe, kMinFraction, kMaxFraction);
  b.forward = m.number("forward", dflt.forward, kMinFraction, kMaxFraction);
  m.finish({"dense", "moe", "forward"});
  return b;
}

EngineCalibration parse_engine(Map m, const EngineCalibration& dflt) {
  EngineCalibration e;
  e.compute = m.number("compute", dflt.compute, kMinFraction, kMaxFraction);
  e.attention = m.number("attention", dflt.attention, kMinFraction, kMaxFraction);
  e.iteration_s = m.quantity("iteration", dflt.iteration_s, Dimension::kTime);
  e.per_layer_s = m.quantity("per_layer", dflt.per_layer_s, Dimension::kTime);
  e.per_layer_eager_s = m.quantity("per_layer_eager", dflt.per_layer_eager_s, Dimension::kTime);
  e.moe_layer_s = m.quantity("moe_layer", dflt.moe_layer_s, Dimension::kTime);
  e.per_sequence_s = m.quantity("per_sequence", dflt.per_sequence_s, Dimension::kTime);
  e.sync_per_matrix_s = m.quantity("sync_per_matrix", dflt.sync_per_matrix_s, Dimension::kTime);
  e.sync_quantize_per_matrix_s = m.quantity("sync_quantize_per_matrix", dflt.sync_quantize_per_matrix_s, Dimension::kTime);
  m.finish({"compute", "attention", "iteration", "per_layer", "per_layer_eager", "moe_layer", "per_sequence", "sync_per_matrix",
            "sync_quantize_per_matrix"});
  return e;
}

// Times in the unit that keeps them readable, 6 significant digits.
std::string seconds(double s) {
  if (s >= 1.0 || s == 0.0) return fmt::format("{:.6g} s", s);
  if (s >= 1e-3) return fmt::format("{:.6g} ms", s * 1e3);
  return fmt::format("{:.6g} us", s * 1e6);
}

}  // namespace

Calibration parse_calibration(const std::string& text, const std::string& file) {
  require_yaml_text(text, file);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ScenarioError(fmt::format("{}:{}:{}: YAML syntax error: {}", file, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  Source src{file, {}, "--set"};
  if (!root.IsMap())
    throw ScenarioError(file +
                        ":1:1: a calibration file must be a YAML mapping (devices, training, rollout, moe, step_overhead)");
  Map top(src, root, "");
  Calibration c;
  c.source = file;
  if (top.has("devices")) {
    Map d(src, top.get("devices"), "devices");
    std::vector<std::string> names;
    for (const auto& kv : d.node()) {
      const auto name = d.key_of(kv.first);
      names.push_back(name);
      if (name == "other") {
        c.other_device = parse_device(Map(src, d.get(name), d.path(name)), c.other_device);
        continue;
      }
      try {
        (void)catalog_device(name);
      } catch (const ScenarioError& e) {
        src.fail(kv.first, d.path(name), e.what());
      }
      c.devices[name] = parse_device(Map(src, d.get(name), d.path(name)), c.other_device);
    }
    d.finish(names);
  }
  if (top.has("training")) {
    Map t(src, top.get("training"), "training");
    if (t.has("fsdp")) c.fsdp = parse_backend(Map(src, t.get("fsdp"), "training.fsdp"), c.fsdp);
    if (t.has("megatron")) c.megatron = parse_backend(Map(src, t.get("megatron"), "training.megatron"), c.megatron);
    t.finish({"fsdp", "megatron"});
  }
  if (top.has("rollout")) {
    Map r(src, top.get("rollout"), "rollout");
    if (r.has("vllm")) c.vllm = parse_engine(Map(src, r.get("vllm"), "rollout.vllm"), c.vllm);
    if (r.has("sglang")) c.sglang = parse_engine(Map(src, r.get("sglang"), "rollout.sglang"), c.sglang);
    r.finish({"vllm", "sglang"});
  }
  if (top.has("moe")) {
    Map m(src, top.get("moe"), "moe");
    c.moe_half_tokens = m.number("grouped_gemm_half_tokens", c.moe_half_tokens, 0.0, 1e6);
    c.moe_half_width = m.number("grouped_gemm_half_width", c.moe_half_width, 0.0, 1e6);
    m.finish({"grouped_gemm_half_tokens", "grouped_gemm_half_width"});
  }
  c.step_overhead_s = top.quantity("step_overhead", c.step_overhead_s, Dimension::kTime);
  top.finish({"devices", "training", "rollout", "moe", "step_overhead"});
  return c;
}

Calibration load_calibration(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ScenarioError(fmt::format("{}: cannot open calibration file: {}", path, std::strerror(errno)));
  std::stringstream text;
  text << in.rdbuf();
  return parse_calibration(text.str(), path);
}

const Calibration& builtin_calibration() {
  static const Calibration c = [] {
    if (catalog_data::kCalibrationCount != 1) throw std::logic_error("the built-in calibration must be one embedded file");
    return parse_calibration(catalog_data::kCalibration[0].text, catalog_data::kCalibration[0].path);
  }();
  return c;
}

std::string calibration_yaml(const Calibration& c, const std::vector<std::string>& header) {
  std::string out;
  for (const auto& h : header) out += "# " + h + "\n";
  auto frac = [](double v) { return fmt::format("{:.6g}", v); };
  out += "devices:\n";
  for (const auto& [name, d] : c.devices) {
    out += fmt::format("  {}: {{memory: {}, compute: {}}}\n", name, frac(d.memory), frac(d.compute));
  }
  out += fmt::format("  other: {{memory: {}, compute: {}}}\n", frac(c.other_device.memory), frac(c.other_device.compute));
  out += "training:\n";
  for (const auto& [name, b] : {std::pair{"fsdp", c.fsdp}, std::pair{"megatron", c.megatron}}) {
    out += fmt::format("  {}: {{dense: {}, moe: {}, forward: {}}}\n", name, frac(b.dense), frac(b.moe), frac(b.forward));
  }
  out += "rollout:\n";
  for (const auto& [name, e] : {std::pair<const char*, const EngineCalibration&>{"vllm", c.vllm}, {"sglang", c.sglang}}) {
    out += fmt::format(
        "  {}: {{compute: {}, attention: {}, iteration: {}, per_layer: {}, per_layer_eager: {}, moe_layer: {}, per_sequence: {}, "
        "sync_per_matrix: {}, "
        "sync_quantize_per_matrix: {}}}\n",
        name, frac(e.compute), frac(e.attention), seconds(e.iteration_s), seconds(e.per_layer_s), seconds(e.per_layer_eager_s),
        seconds(e.moe_layer_s), seconds(e.per_sequence_s), seconds(e.sync_per_matrix_s), seconds(e.sync_quantize_per_matrix_s));
  }
  out += fmt::format("moe: {{grouped_gemm_half_tokens: {}, grouped_gemm_half_width: {}}}\n", frac(c.moe_half_tokens),
                     frac(c.moe_half_width));
  out += fmt::format("step_overhead: {}\n", seconds(c.step_overhead_s));
  return out;
}

std::vector<double> calibration_inputs(const Calibration& c, const Scenario& s) {
  const DeviceCalibration& d = c.device(s.cluster.device.name);
  const EngineCalibration& e = c.engine(s.rollout.engine);
  const BackendCalibration& b = c.backend(s.training.backend);
  return {d.memory,
          d.compute,
          e.compute,
          e.attention,
          e.iteration_s,
          e.per_layer_s,
          e.per_layer_eager_s,
          e.moe_layer_s,
          e.per_sequence_s,
          e.sync_per_matrix_s,
          e.sync_quantize_per_matrix_s,
          b.dense,
          b.moe,
          b.forward,
          c.moe_half_tokens,
          c.moe_half_width,
          c.step_overhead_s};
}

void apply_calibration(Scenario& s, const Calibration& c) {
  const auto& o = s.cost_overrides;
  const DeviceCalibration& dev = c.device(s.cluster.device.name);
  const EngineCalibration& eng = c.engine(s.rollout.engine);
  const BackendCalibration& be = c.backend(s.training.backend);
  auto& r = s.rollout;
  r.efficiency.memory = o.rollout_memory.value_or(dev.memory);
  r.efficiency.compute = o.rollout_compute.value_or(dev.compute * eng.compute);
  r.efficiency.comm = o.rollout_comm.value_or(kDefaultCommEfficiency);
  r.iteration_overhead_s = o.iteration_s.value_or(eng.iteration_s);
  r.layer_overhead_s = o.per_layer_s.value_or(r.enforce_eager ? eng.per_layer_eager_s : eng.per_layer_s);
  r.moe_layer_overhead_s = o.moe_layer_s.value_or(eng.moe_layer_s);
  r.sequence_overhead_s = o.per_sequence_s.value_or(eng.per_sequence_s);
  r.attention_memory_efficiency = eng.attention;
  r.moe_half_tokens = c.moe_half_tokens;
  r.moe_half_width = c.moe_half_width;
  auto& t = s.training;
  t.efficiency.memory = o.train_memory.value_or(dev.memory);
  t.efficiency.compute = o.train_compute.value_or(dev.compute * be.dense);
  t.efficiency.moe_compute = o.train_moe_compute.value_or(dev.compute * be.moe);
  t.efficiency.forward = o.train_forward.value_or(be.forward);
  t.efficiency.comm = o.train_comm.value_or(kDefaultCommEfficiency);
  t.step_overhead_s = o.step_overhead_s.value_or(c.step_overhead_s);
  s.weight_sync.per_matrix_s = o.sync_per_matrix_s.value_or(eng.sync_per_matrix_s);
  s.weight_sync.quantize_per_matrix_s = eng.sync_quantize_per_matrix_s;
}

}  // namespace rlsim::sim
