// Scenario and catalog loading (SCENARIO.md). Every error names file:line:column (1-based) or the
// --set override it came from, and what was expected.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "models/llm/hf_config.h"
#include "sim/scenario/calibration.h"
#include "sim/scenario/catalog_data.h"
#include "sim/scenario/csv_table.h"
#include "sim/scenario/scenario.h"
#include "sim/scenario/units.h"
#include "sim/scenario/yaml_file.h"
#include "sim/scenario/yaml_map.h"

namespace rlsim::sim {
namespace {

namespace fs = std::filesystem;
using models::Element;
using models::Format;
using models::Recipe;

// An optional fraction in (0, 1] / an optional time: unset when the key is absent.
std::optional<double> optional_fraction(Map& m, const std::string& key) {
  if (!m.has(key)) return std::nullopt;
  return m.number(key, 0, 0.01, 1.0);
}
std::optional<double> optional_quantity(Map& m, const std::string& key) {
  if (!m.has(key)) return std::nullopt;
  return m.quantity(key, 0, Dimension::kTime);
}

YAML::Node parse_yaml_text(const std::string& text, const std::string& file) {
  require_yaml_text(text, file);
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ScenarioError(fmt::format("{}:{}:{}: YAML syntax error: {}", file, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
}

// Devices ---------------------------------------------------------------------------------------

models::Link parse_link(Map m, const models::Link& dflt, bool latency_allowed = true) {
  models::Link l = dflt;
  l.bandwidth_bytes_per_s = m.quantity("bandwidth", dflt.bandwidth_bytes_per_s, Dimension::kBandwidth);
  if (latency_allowed) l.latency_s = m.quantity("latency", dflt.latency_s, Dimension::kTime);
  m.finish({"bandwidth", "latency"});
  if (l.bandwidth_bytes_per_s <= 0) m.src().fail(m.node(), m.path("bandwidth"), "link bandwidth must be positive");
  return l;
}

// Defaults for an inline device that omits its links: NVLink4-class scale-up, one 400 Gb/s NIC
// per device, PCIe Gen5 x16 host link (H100 datasheet / DGX H100 user guide).
const models::Link kDefaultIntra{450e9, 2e-6};
const models::Link kDefaultInter{50e9, 5e-6};
const models::Link kDefaultHost{55e9, 10e-6};

models::Device parse_device(Map m) {
  models::Device d;
  d.name = m.str("name", d.name, true);
  if (m.has("topology")) {
    d.topology = m.str("topology", d.topology);
    const std::vector<std::string> topologies = {"nvswitch", "pcie", "infinity-fabric", "hccs", "ub", "shared-memory"};
    if (std::find(topologies.begin(), topologies.end(), d.topology) == topologies.end()) {
      m.src().fail(m.get("topology"), m.path("topology"),
                   "unknown topology '" + d.topology + "' (one of " + join(topologies) + ")");
    }
  }
  d.memory_bytes = m.quantity("memory", d.memory_bytes, Dimension::kBytes, true);
  d.memory_bandwidth_bytes_per_s = m.quantity("memory_bandwidth", d.memory_bandwidth_bytes_per_s, Dimension::kBandwidth, true);
  Map c(m.src(), m.require("compute"), m.path("compute"));
  std::vector<std::string> valid;
  for (auto t : {models::ComputeType::kFp32, models::ComputeType::kBf16, models::ComputeType::kFp16, models::ComputeType::kFp8,
                 models::ComputeType::kInt8, models::ComputeType::kFp4}) {
    const std::string name(models::compute_name(t));
    valid.push_back(name);
    if (c.has(name)) d.flops_per_s[t] = c.quantity(name, 0, Dimension::kFlops);
  }
  c.finish(valid);
  if (d.flops_per_s.empty())
    m.src().fail(c.node(), m.path("compute"), "a device needs at least one compute rate (" + join(valid) + ")");
  d.intra_node =
      m.has("intra_node") ? parse_link(Map(m.src(), m.get("intra_node"), m.path("intra_node")), kDefaultIntra) : kDefaultIntra;
  d.inter_node =
      m.has("inter_node") ? parse_link(Map(m.src(), m.get("inter_node"), m.path("inter_node")), kDefaultInter) : kDefaultInter;
  d.host_link =
      m.has("host_link") ? parse_link(Map(m.src(), m.get("host_link"), m.path("host_link")), kDefaultHost) : kDefaultHost;
  d.source = m.src().file;
  m.finish({"name", "topology", "memory", "memory_bandwidth", "compute", "intra_node", "inter_node", "host_link"});
  if (d.memory_bytes <= 0 || d.memory_bandwidth_bytes_per_s <= 0) {
    m.src().fail(m.node(), m.path("memory"), "device memory and memory_bandwidth must be positive");
  }
  return d;
}

// Models ----------------------------------------------------------------------------------------

models::ModelArch parse_model(Map m) {
  models::ModelArch a;
  constexpr std::int64_t kBig = 1 << 24;
  a.name = m.str("name", a.name, true);
  a.layers = static_cast<int>(m.integer("layers", a.layers, 1, 10000, true));
  a.hidden = static_cast<int>(m.integer("hidden", a.hidden, 1, kBig, true));
  a.intermediate = static_cast<int>(m.integer("intermediate", a.intermediate, 1, kBig, true));
  a.heads = static_cast<int>(m.integer("heads", a.heads, 1, 65536, true));
  a.kv_heads = static_cast<int>(m.integer("kv_heads", a.kv_heads, 1, 65536, true));
  a.head_dim = static_cast<int>(m.integer("head_dim", a.head_dim, 1, 65536, true));
  a.vocab = static_cast<int>(m.integer("vocab", a.vocab, 1, kBig, true));
  a.tied_embeddings = m.boolean("tied_embeddings", a.tied_embeddings);
  a.qkv_bias = m.boolean("qkv_bias", a.qkv_bias);
  if (a.heads % a.kv_heads != 0) m.src().fail(m.get("kv_heads"), m.path("kv_heads"), "heads must be a multiple of kv_heads");
  if (m.has("moe")) {
    Map e(m.src(), m.get("moe"), m.path("moe"));
    models::MoeSpec moe;
    moe.experts = static_cast<int>(e.integer("experts", moe.experts, 1, 65536, true));
    moe.active = static_cast<int>(e.integer("active", moe.active, 1, moe.experts, true));
    moe.expert_intermediate = static_cast<int>(e.integer("expert_intermediate", moe.expert_intermediate, 1, kBig, true));
    moe.shared_experts = static_cast<int>(e.integer("shared_experts", moe.shared_experts, 0, 1024));
    moe.dense_layers = static_cast<int>(e.integer("dense_layers", moe.dense_layers, 0, a.layers));
    e.finish({"experts", "active", "expert_intermediate", "shared_experts", "dense_layers"});
    a.moe = moe;
  }
  if (m.has("mla")) {
    Map e(m.src(), m.get("mla"), m.path("mla"));
    models::MlaSpec mla;
    mla.q_lora_rank = static_cast<int>(e.integer("q_lora_rank", mla.q_lora_rank, 0, kBig));
    mla.kv_lora_rank = static_cast<int>(e.integer("kv_lora_rank", mla.kv_lora_rank, 1, kBig, true));
    mla.qk_nope_head_dim = static_cast<int>(e.integer("qk_nope_head_dim", mla.qk_nope_head_dim, 1, kBig, true));
    mla.qk_rope_head_dim = static_cast<int>(e.integer("qk_rope_head_dim", mla.qk_rope_head_dim, 1, kBig, true));
    mla.v_head_dim = static_cast<int>(e.integer("v_head_dim", mla.v_head_dim, 1, kBig, true));
    e.finish({"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"});
    a.mla = mla;
  }
  a.source = m.src().file;
  m.finish({"name", "layers", "hidden", "intermediate", "heads", "kv_heads", "head_dim", "vocab", "tied_embeddings", "qkv_bias",
            "moe", "mla"});
  return a;
}

template <typename T, typename Parse>
std::map<std::string, T> load_catalog(const catalog_data::File* files, std::size_t count, Parse parse) {
  std::map<std::string, T> out;
  for (std::size_t i = 0; i < count; ++i) {
    Source src{files[i].path, {}};
    T item = parse(Map(src, parse_yaml_text(files[i].text, files[i].path), ""));
    const std::string stem = fs::path(files[i].path).stem().string();
    if (item.name != stem)
      throw ScenarioError(fmt::format("{}: name '{}' must equal the file name '{}'", files[i].path, item.name, stem));
    out.emplace(item.name, std::move(item));
  }
  return out;
}

const std::map<std::string, models::Device>& device_catalog() {
  static const auto c = load_catalog<models::Device>(catalog_data::kDevices, catalog_data::kDevicesCount, parse_device);
  return c;
}

const std::map<std::string, models::ModelArch>& model_catalog() {
  static const auto c = load_catalog<models::ModelArch>(catalog_data::kModels, catalog_data::kModelsCount, parse_model);
  return c;
}

template <typename T>
std::vector<std::string> keys_of(const std::map<std::string, T>& m) {
  std::vector<std::string> v;
  for (const auto& [k, _] : m) v.push_back(k);
  return v;
}

// Recipes ---------------------------------------------------------------------------------------

Format format_value(Map& m, const std::string& key, const Format& dflt) {
  YAML::Node n = m.get(key);
  if (!n) return dflt;
  if (!n.IsScalar()) m.src().fail(n, m.path(key), "'" + m.path(key) + "' must be a format such as fp8-e4m3/block128x128");
  try {
    return models::parse_format(n.Scalar());
  } catch (const std::invalid_argument& e) {
    m.src().fail(n, m.path(key), "'" + m.path(key) + "': " + e.what());
  }
}

Element element_value(Map& m, const std::string& key, Element dflt) {
  YAML::Node n = m.get(key);
  if (!n) return dflt;
  const auto e = n.IsScalar() ? models::parse_element(n.Scalar()) : std::nullopt;
  if (!e || models::traits(*e).scale_only) {
    m.src().fail(n, m.path(key),
                 "'" + m.path(key) + "': unknown element format (expected one of: " + models::element_names() + ")");
  }
  return *e;
}

models::LinearPrecision parse_linear(Map m, const models::LinearPrecision& base) {
  models::LinearPrecision l = base;
  l.weight = format_value(m, "weight", base.weight);
  l.activation = format_value(m, "activation", base.activation);
  l.accumulate = element_value(m, "accumulate", base.accumulate);
  m.finish({"weight", "activation", "accumulate"});
  return l;
}

Recipe builtin_or_fail(const Source& src, const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar()) src.fail(n, path, "'" + path + "' must be a recipe name or a mapping");
  try {
    return models::builtin_recipe(n.Scalar());
  } catch (const std::invalid_argument& e) {
    src.fail(n, path, "'" + path + "': " + e.what());
  }
}

Recipe parse_recipe(const Source& src, const YAML::Node& n, const std::string& path) {
  if (!n.IsMap()) return builtin_or_fail(src, n, path);
  Map m(src, n, path);
  Recipe r = m.has("base") ? builtin_or_fail(src, m.get("base"), m.path("base")) : models::builtin_recipe("bf16");
  r.name = m.str("name", m.has("base") ? r.name + "+overrides" : "inline", false);
  if (m.has("linear")) r.linear = parse_linear(Map(src, m.get("linear"), m.path("linear")), r.linear);
  if (m.has("lm_head")) r.lm_head = parse_linear(Map(src, m.get("lm_head"), m.path("lm_head")), r.lm_head);
  if (m.has("router")) r.router = parse_linear(Map(src, m.get("router"), m.path("router")), r.router);
  r.kv_cache = format_value(m, "kv_cache", r.kv_cache);
  r.embedding = format_value(m, "embedding", r.embedding);
  r.attention = element_value(m, "attention", r.attention);
  r.softmax = element_value(m, "softmax", r.softmax);
  r.master_weights = element_value(m, "master_weights", r.master_weights);
  r.gradient = format_value(m, "gradient", r.gradient);
  r.sync = format_value(m, "sync", r.sync);
  r.reference = format_value(m, "reference", r.reference);
  r.mode = m.choice<models::QuantMode>("mode", r.mode, {{"real", models::QuantMode::kReal}, {"fake", models::QuantMode::kFake}});
  m.finish({"base", "name", "linear", "lm_head", "router", "kv_cache", "embedding", "attention", "softmax", "master_weights",
            "gradient", "sync", "reference", "mode"});
  return r;
}

// Workload --------------------------------------------------------------------------------------

std::vector<std::int64_t> read_csv_column(const std::string& file, const std::string& column) {
  const std::vector<std::vector<std::string>> rows = read_csv_table(file, "length trace");
  const auto& header = rows.front();
  const auto it = std::find(header.begin(), header.end(), column);
  if (it == header.end()) throw ScenarioError(fmt::format("{}:1: no column '{}' (columns: {})", file, column, join(header)));
  const auto col = static_cast<std::size_t>(it - header.begin());
  std::vector<std::int64_t> values;
  for (std::size_t r = 1; r < rows.size(); ++r) {
    const auto& row = rows[r];
    if (row.size() == 1 && row[0].empty()) continue;  // blank line
    const std::string cell = col < row.size() ? row[col] : "";
    const std::optional<std::int64_t> v = csv_number<std::int64_t>(cell);
    if (!v || *v < 1) {
      throw ScenarioError(
          fmt::format("{}:{}: column '{}' must hold a positive integer token count, got '{}'", file, r + 1, column, cell));
    }
    values.push_back(*v);
  }
  if (values.empty()) throw ScenarioError(file + ": no data rows");
  return values;
}

LengthDist parse_dist(Map m, const fs::path& base_dir) {
  LengthDist d;
  d.kind = m.choice<LengthDist::Kind>("dist", d.kind,
                                      {{"fixed", LengthDist::Kind::kFixed},
                                       {"uniform", LengthDist::Kind::kUniform},
                                       {"lognormal", LengthDist::Kind::kLognormal},
                                       {"csv", LengthDist::Kind::kCsv}});
  if (!m.has("dist"))
    m.src().fail(m.node(), m.path("dist"), "missing required key '" + m.path("dist") + "' (fixed, uniform, lognormal, csv)");
  constexpr std::int64_t kMaxTokens = 10'000'000;
  switch (d.kind) {
    case LengthDist::Kind::kFixed:
      d.value = m.integer("value", d.value, 1, kMaxTokens, true);
      m.finish({"dist", "value"});
      break;
    case LengthDist::Kind::kUniform:
      d.min = m.integer("min", d.min, 1, kMaxTokens, true);
      d.max = m.integer("max", d.max, d.min, kMaxTokens, true);
      m.finish({"dist", "min", "max"});
      break;
    case LengthDist::Kind::kLognormal:
      // `median:`, or `mean:` (published runs often give only the mean length; the median is
      // solved so that the truncated distribution has that mean).
      if (m.has("median") == m.has("mean")) {
        m.src().fail(m.node(), m.path("median"), "a lognormal needs exactly one of 'median' and 'mean' (tokens)");
      }
      d.sigma = m.number("sigma", d.sigma, 0, 5);
      if (!m.has("sigma")) m.require("sigma");
      d.max = m.integer("max", d.max, 1, kMaxTokens);
      if (m.has("median")) {
        d.median = m.number("median", d.median, 1, 1e7);
      } else {
        const double mean = m.number("mean", 0, 1, 1e7);
        try {
          d.median = lognormal_median_for_mean(mean, d.sigma, d.max);
        } catch (const std::invalid_argument& e) {
          m.src().fail(m.get("mean"), m.path("mean"), e.what());
        }
      }
      m.finish({"dist", "median", "mean", "sigma", "max"});
      break;
    case LengthDist::Kind::kCsv: {
      d.file = m.str("file", d.file, true);
      d.column = m.str("column", d.column, true);
      const fs::path p = fs::path(d.file).is_absolute() ? fs::path(d.file) : base_dir / d.file;
      try {
        d.samples = read_csv_column(p.string(), d.column);
      } catch (const ScenarioError& e) {
        m.src().fail(m.get("file"), m.path("file"), e.what());
      }
      m.finish({"dist", "file", "column"});
      break;
    }
  }
  return d;
}

// HF config.json --------------------------------------------------------------------------------

// Overrides -------------------------------------------------------------------------------------

void apply_override(YAML::Node& root, const std::string& text, Source& src) {
  InputLocation where;
  where.override_text = text;
  where.override_label = src.label;
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ScenarioError(where, "expected dotted.key=value, e.g. " + src.label + " cluster.nodes=2");
  }
  const std::string key = text.substr(0, eq);
  where.key = key;
  try {
    require_yaml_text(text, src.label);
  } catch (const ScenarioError&) {
    throw ScenarioError(where, "not valid UTF-8");
  }
  YAML::Node value;
  try {
    value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw ScenarioError(where, "the value is not valid YAML: " + e.msg);
  }
  std::vector<std::string> parts;
  std::stringstream ss(key);
  for (std::string part; std::getline(ss, part, '.');) {
    if (part.empty()) throw ScenarioError(where, "empty component in key '" + key + "'");
    parts.push_back(part);
  }
  YAML::Node cur = root;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node next = cur[parts[i]];
    if (next && !next.IsMap()) {
      // A scalar (e.g. `precision: fp8-block`) replaced by a mapping: start from an empty map.
      cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
      next = cur[parts[i]];
    }
    if (!next) {
      cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
      next = cur[parts[i]];
    }
    cur.reset(next);
  }
  cur[parts.back()] = value;
  src.overrides[key] = text;
}

}  // namespace

void require_yaml_text(std::string_view text, const std::string& file) {
  std::size_t i = 0, line = 1, line_start = 0;
  while (i < text.size()) {
    const auto b0 = static_cast<unsigned char>(text[i]);
    std::size_t n = 0;                   // continuation bytes
    unsigned char lo = 0x80, hi = 0xBF;  // range of the first continuation byte
    const auto where = [&] { return fmt::format("{}:{}:{}", file, line, i - line_start + 1); };
    const auto control = [&](unsigned code) {
      throw ScenarioError(
          fmt::format("{}: control character U+{:04X} is not allowed in YAML text (YAML 1.2, 5.1)", where(), code));
    };
    if (b0 < 0x80) {
      if (b0 == '\n') {
        ++line;
        line_start = i + 1;
      } else if ((b0 < 0x20 && b0 != '\t' && b0 != '\r') || b0 == 0x7F) {
        control(b0);  // yaml-cpp turns some into bytes that are not UTF-8
      }
      ++i;
      continue;
    }
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      n = 1;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      n = 2;
      if (b0 == 0xE0) lo = 0xA0;  // overlong
      if (b0 == 0xED) hi = 0x9F;  // surrogates
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      n = 3;
      if (b0 == 0xF0) lo = 0x90;  // overlong
      if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
    }
    bool ok = n > 0;  // 0x80..0xC1 and 0xF5..0xFF never start a sequence
    for (std::size_t k = 1; ok && k <= n; ++k) {
      if (i + k >= text.size()) {
        ok = false;
        break;
      }
      const auto b = static_cast<unsigned char>(text[i + k]);
      ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    }
    if (!ok) throw ScenarioError(fmt::format("{}: not valid UTF-8 (byte 0x{:02X})", where(), b0));
    const auto b1 = static_cast<unsigned char>(text[i + 1]);
    if (b0 == 0xC2 && b1 <= 0x9F && b1 != 0x85) control(b1);  // C1 controls but NEL
    if (b0 == 0xEF && b1 == 0xBF && static_cast<unsigned char>(text[i + 2]) >= 0xBE) control(0xFFFE + (text[i + 2] & 1));
    i += n + 1;
  }
}

YAML::Node load_yaml_file(const std::string& path, const std::string& what) {
  return parse_yaml_text(read_input_file(path, what), path);
}

namespace {

struct InputKindInfo {
  InputKind kind;
  std::string_view name, command;
  std::string what;                            // the file as load_yaml_file's messages name it
  std::vector<std::string_view> telling_keys;  // top-level keys no other kind has
  bool all_needed;                             // every telling key must be there (a study: base and sweep)
};

const std::vector<InputKindInfo>& input_kinds() {
  static const std::vector<InputKindInfo> kinds = {
      {InputKind::kScenario, "scenario", "run", "scenario file", {"cluster", "workload", "placement"}, false},
      {InputKind::kStudy, "study file", "plan", "study file", {"base", "sweep"}, true},
      {InputKind::kDrift, "drift file", "drift", "drift file", {"pairs"}, false},
      {InputKind::kTrain, "train file", "train", "train file", {"task", "training_precision"}, false},
  };
  return kinds;
}

// The telling keys of `k` that `root` has, when they mark it as that kind (empty otherwise).
std::vector<std::string_view> telling_keys_in(const YAML::Node& root, const InputKindInfo& k) {
  std::vector<std::string_view> found;
  for (std::string_view key : k.telling_keys) {
    if (root[std::string(key)]) found.push_back(key);
  }
  if (k.all_needed && found.size() != k.telling_keys.size()) found.clear();
  return found;
}

const InputKindInfo& input_kind(InputKind kind) {
  const auto& kinds = input_kinds();
  return *std::find_if(kinds.begin(), kinds.end(), [&](const InputKindInfo& k) { return k.kind == kind; });
}

// Throws when `root` is a mapping with telling keys of another kind and none of `expected`'s.
void require_input_kind(const YAML::Node& root, InputKind expected, const std::string& path) {
  if (!root.IsMap()) return;
  const InputKindInfo& want = input_kind(expected);
  if (!telling_keys_in(root, want).empty()) return;
  for (const InputKindInfo& k : input_kinds()) {
    if (k.kind == expected) continue;
    const std::vector<std::string_view> keys = telling_keys_in(root, k);
    if (keys.empty()) continue;
    throw ScenarioError(fmt::format("{}:1:1: this is a {} ({}:), not a {}; run it with `rlsim {} {}`", path, k.name,
                                    fmt::join(keys, ":, "), want.name, k.command, path));
  }
}

}  // namespace

YAML::Node load_input_file(const std::string& path, InputKind kind) {
  YAML::Node root = load_yaml_file(path, input_kind(kind).what);
  require_input_kind(root, kind, path);
  return root;
}

std::string read_input_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ScenarioError(fmt::format("{}: cannot open {} ({})", path, what, std::strerror(errno)));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string InputLocation::prefix() const {
  std::string out;
  if (!file.empty() && line > 0) {
    out = fmt::format("{}:{}:{}: ", file, line, column);
  } else if (!file.empty() && override_text.empty()) {
    out = file + ": ";
  }
  if (!override_text.empty()) out += override_label + " " + override_text + ": ";
  return out;
}

const NameTable<ScheduleMode>& schedule_names() {
  static const NameTable<ScheduleMode> t{
      {"sync", ScheduleMode::kSync}, {"one-step-off", ScheduleMode::kOneStepOff}, {"async", ScheduleMode::kAsync}};
  return t;
}

const NameTable<PlacementMode>& placement_names() {
  static const NameTable<PlacementMode> t{{"colocated", PlacementMode::kColocated},
                                          {"disaggregated", PlacementMode::kDisaggregated}};
  return t;
}

const NameTable<RolloutEngineKind>& engine_names() {
  static const NameTable<RolloutEngineKind> t{{"vllm", RolloutEngineKind::kVllm}, {"sglang", RolloutEngineKind::kSglang}};
  return t;
}

const NameTable<TrainingBackend>& backend_names() {
  static const NameTable<TrainingBackend> t{{"fsdp", TrainingBackend::kFsdp}, {"megatron", TrainingBackend::kMegatron}};
  return t;
}

const NameTable<TrainPadding>& padding_names() {
  static const NameTable<TrainPadding> t{
      {"none", TrainPadding::kNone}, {"micro_batch", TrainPadding::kMicroBatch}, {"max_length", TrainPadding::kMaxLength}};
  return t;
}

const NameTable<CpuAdamKernel>& cpu_adam_kernel_names() {
  static const NameTable<CpuAdamKernel> t{{"torch", CpuAdamKernel::kTorch}, {"deepspeed", CpuAdamKernel::kDeepSpeed}};
  return t;
}

const NameTable<Algorithm>& algorithm_names() {
  static const NameTable<Algorithm> t{{"grpo", Algorithm::kGrpo},
                                      {"ppo", Algorithm::kPpo},
                                      {"reinforce++", Algorithm::kReinforcePlusPlus},
                                      {"rloo", Algorithm::kRloo}};
  return t;
}

const NameTable<AuxPlacement>& aux_placement_names() {
  static const NameTable<AuxPlacement> t{
      {"actor", AuxPlacement::kActor}, {"critic", AuxPlacement::kCritic}, {"separate", AuxPlacement::kSeparate}};
  return t;
}

const NameTable<WeightSyncMethod>& weight_sync_names() {
  static const NameTable<WeightSyncMethod> t{{"auto", WeightSyncMethod::kAuto},
                                             {"cuda-ipc", WeightSyncMethod::kCudaIpc},
                                             {"nccl-broadcast", WeightSyncMethod::kNcclBroadcast}};
  return t;
}

models::Device catalog_device(const std::string& name) {
  const auto& c = device_catalog();
  const auto it = c.find(name);
  if (it == c.end()) throw ScenarioError("unknown device '" + name + "' (catalog: " + join(keys_of(c)) + ")");
  return it->second;
}

models::ModelArch catalog_model(const std::string& name) {
  const auto& c = model_catalog();
  const auto it = c.find(name);
  if (it == c.end()) throw ScenarioError("unknown model '" + name + "' (catalog: " + join(keys_of(c)) + ")");
  return it->second;
}

std::vector<std::string> catalog_device_names() { return keys_of(device_catalog()); }
std::vector<std::string> catalog_model_names() { return keys_of(model_catalog()); }

models::ModelArch model_from_hf_config(const std::string& path) {
  try {
    return models::arch_from_hf_config(models::read_hf_config_json(path));
  } catch (const models::HfConfigError& e) {
    throw ScenarioError(e.what());
  }
}

namespace {

// A model at `path`: a catalog name, {hf_config: path}, or an inline architecture.
models::ModelArch parse_model_node(const Source& src, const YAML::Node& n, const std::string& path, const fs::path& base_dir) {
  if (n.IsScalar()) {
    try {
      return catalog_model(n.Scalar());
    } catch (const ScenarioError& e) {
      src.fail(n, path, e.what());
    }
  }
  if (n.IsMap() && n["hf_config"]) {
    Map m(src, n, path);
    const std::string p = m.str("hf_config", "", true);
    m.finish({"hf_config"});
    const fs::path full = fs::path(p).is_absolute() ? fs::path(p) : base_dir / p;
    try {
      return model_from_hf_config(full.string());
    } catch (const ScenarioError& e) {
      src.fail(n["hf_config"], path + ".hf_config", e.what());
    }
  }
  return parse_model(Map(src, n, path));
}

// model: a catalog name, {hf_config: path}, or an inline architecture.
void parse_model_section(const Source& src, Map& top, const fs::path& base_dir, Scenario& s) {
  s.model = parse_model_node(src, top.require("model"), "model", base_dir);
}

// cluster: device (catalog name or inline), node counts, links.
void parse_cluster_section(const Source& src, Map& top, Scenario& s) {
  Map c(src, top.require("cluster"), "cluster");
  YAML::Node dn = c.require("device");
  if (dn.IsScalar()) {
    try {
      s.cluster.device = catalog_device(dn.Scalar());
    } catch (const ScenarioError& e) {
      src.fail(dn, "cluster.device", e.what());
    }
  } else {
    s.cluster.device = parse_device(Map(src, dn, "cluster.device"));
  }
  s.cluster.nodes = static_cast<int>(c.integer("nodes", s.cluster.nodes, 1, 1 << 20, true));
  s.cluster.devices_per_node = static_cast<int>(c.integer("devices_per_node", s.cluster.devices_per_node, 1, 1024, true));
  const auto& d = s.cluster.device;
  s.cluster.intra_node =
      c.has("intra_node") ? parse_link(Map(src, c.get("intra_node"), "cluster.intra_node"), d.intra_node) : d.intra_node;
  s.cluster.inter_node =
      c.has("inter_node") ? parse_link(Map(src, c.get("inter_node"), "cluster.inter_node"), d.inter_node) : d.inter_node;
  s.cluster.host_link =
      c.has("host_link") ? parse_link(Map(src, c.get("host_link"), "cluster.host_link"), d.host_link) : d.host_link;
  c.finish({"device", "nodes", "devices_per_node", "intra_node", "inter_node", "host_link"});
}

// placement: colocated (every device both roles) or disaggregated rollout / training devices.
void parse_placement_section(const Source& src, Map& top, Scenario& s) {
  const int devices = s.cluster.devices();
  s.placement.rollout_devices = devices;
  s.placement.train_devices = devices;
  if (top.has("placement")) {
    Map p(src, top.get("placement"), "placement");
    s.placement.mode = p.choice<PlacementMode>("mode", PlacementMode::kColocated, placement_names());
    if (s.placement.mode == PlacementMode::kDisaggregated) {
      s.placement.rollout_devices = static_cast<int>(p.integer("rollout_devices", s.placement.rollout_devices, 1, devices, true));
      s.placement.train_devices = static_cast<int>(p.integer("train_devices", s.placement.train_devices, 1, devices, true));
      if (s.placement.rollout_devices + s.placement.train_devices > devices) {
        src.fail(p.node(), "placement",
                 fmt::format("rollout_devices + train_devices = {} exceeds the cluster's {} devices",
                             s.placement.rollout_devices + s.placement.train_devices, devices));
      }
    } else {
      for (const char* k : {"rollout_devices", "train_devices"}) {
        if (p.has(k)) src.fail(p.get(k), p.path(k), std::string("'placement.") + k + "' is only valid with mode: disaggregated");
      }
    }
    p.finish({"mode", "rollout_devices", "train_devices"});
  }
}

// schedule: sync, one-step-off or async (the latter two need disaggregated placement).
void parse_schedule_section(const Source& src, Map& top, Scenario& s) {
  if (top.has("schedule")) {
    Map p(src, top.get("schedule"), "schedule");
    s.schedule.mode = p.choice<ScheduleMode>("mode", s.schedule.mode, schedule_names());
    // SCENARIO.md's range is a fraction of a batch (verl's staleness_threshold, 0-1); rlsim also
    // takes whole batches ahead up to 16, AReaL's max_head_offpolicyness (eta <= 16 in its blog).
    s.schedule.staleness = p.number("staleness", s.schedule.staleness, 0.0, kMaxStaleness);
    s.schedule.partial_rollout = p.boolean("partial_rollout", s.schedule.partial_rollout);
    p.finish({"mode", "staleness", "partial_rollout"});
    if (s.schedule.mode != ScheduleMode::kSync && s.placement.mode == PlacementMode::kColocated) {
      src.fail(p.get("mode"), "schedule.mode",
               fmt::format("schedule.mode {} overlaps rollout and training, so it needs placement.mode: disaggregated "
                           "with rollout_devices and train_devices",
                           schedule_name(s.schedule.mode)));
    }
  }
}

// workload: prompts, samples and the two length distributions.
void parse_workload_section(const Source& src, Map& top, const fs::path& base_dir, Scenario& s) {
  Map w(src, top.require("workload"), "workload");
  s.workload.prompts_per_step = static_cast<int>(w.integer("prompts_per_step", s.workload.prompts_per_step, 1, 1 << 24, true));
  s.workload.samples_per_prompt =
      static_cast<int>(w.integer("samples_per_prompt", s.workload.samples_per_prompt, 1, 1 << 16, true));
  s.workload.prompt_tokens = parse_dist(Map(src, w.require("prompt_tokens"), "workload.prompt_tokens"), base_dir);
  s.workload.response_tokens = parse_dist(Map(src, w.require("response_tokens"), "workload.response_tokens"), base_dir);
  w.finish({"prompts_per_step", "samples_per_prompt", "prompt_tokens", "response_tokens"});
  if (static_cast<std::int64_t>(s.workload.prompts_per_step) * s.workload.samples_per_prompt > 100'000'000) {
    src.fail(w.node(), "workload", "prompts_per_step x samples_per_prompt must be at most 100,000,000 sequences per step");
  }
}

// rollout: engine, parallelism, recipe (rollout.kv_cache sets its KV format), engine limits and overrides.
void parse_rollout_section(const Source& src, Map& top, Scenario& s) {
  auto& r = s.rollout;
  r.precision = models::builtin_recipe("bf16");
  std::optional<Map> m;
  if (top.has("rollout")) m.emplace(src, top.get("rollout"), "rollout");
  if (m) {
    r.engine = m->choice<RolloutEngineKind>("engine", r.engine, engine_names());
    r.tensor_parallel = static_cast<int>(m->integer("tensor_parallel", r.tensor_parallel, 1, 4096));
    r.data_parallel = static_cast<int>(m->integer("data_parallel", r.data_parallel, 1, 4096));
    r.expert_parallel = static_cast<int>(m->integer("expert_parallel", r.expert_parallel, 1, 4096));
    if (m->has("precision")) r.precision = parse_recipe(src, m->get("precision"), "rollout.precision");
  }
  const bool vllm = r.engine == RolloutEngineKind::kVllm;
  // Eager mode (vLLM enforce_eager, verl's rollout default through mid-2025) launches every
  // kernel from Python; its per-layer cost is a calibrated parameter of its own.
  if (m) r.enforce_eager = m->boolean("enforce_eager", r.enforce_eager);
  r.sleep_level = vllm ? 1 : 2;
  if (m) {
    // rollout.kv_cache is sugar for rollout.precision.kv_cache, one format string, one meaning
    // (vLLM's kv_cache_dtype=fp8 with its per-tensor k/v scales is fp8-e4m3/tensor).
    r.precision.kv_cache = format_value(*m, "kv_cache", r.precision.kv_cache);
    r.max_num_seqs = static_cast<int>(m->integer("max_num_seqs", r.max_num_seqs, 1, 1 << 20));
    r.generate_batch = static_cast<int>(m->integer("generate_batch", r.generate_batch, 0, 1 << 20));
    r.memory_utilization = m->number("memory_utilization", r.memory_utilization, 0.05, 1.0);
    r.sleep_level = static_cast<int>(m->integer("sleep_level", r.sleep_level, 1, 2));
    r.activation_buffer_bytes = m->quantity("activation_buffers", r.activation_buffer_bytes, Dimension::kBytes);
    auto& ov = s.cost_overrides;
    if (m->has("overheads")) {
      Map o(src, m->get("overheads"), "rollout.overheads");
      ov.iteration_s = optional_quantity(o, "iteration");
      ov.per_layer_s = optional_quantity(o, "per_layer");
      ov.moe_layer_s = optional_quantity(o, "moe_layer");
      ov.per_sequence_s = optional_quantity(o, "per_sequence");
      o.finish({"iteration", "per_layer", "moe_layer", "per_sequence"});
    }
    if (m->has("efficiency")) {
      Map e(src, m->get("efficiency"), "rollout.efficiency");
      ov.rollout_memory = optional_fraction(e, "memory");
      ov.rollout_compute = optional_fraction(e, "compute");
      ov.rollout_comm = optional_fraction(e, "comm");
      if (e.has("attention_compute")) r.efficiency.attention_compute = *optional_fraction(e, "attention_compute");
      e.finish({"memory", "compute", "comm", "attention_compute"});
    }
    m->finish({"engine", "tensor_parallel", "data_parallel", "expert_parallel", "precision", "kv_cache", "max_num_seqs",
               "generate_batch", "memory_utilization", "sleep_level", "enforce_eager", "activation_buffers", "overheads",
               "efficiency"});
    if (r.engine_devices() % r.expert_parallel != 0) {
      src.fail(m->get("expert_parallel"), "rollout.expert_parallel",
               fmt::format("rollout.expert_parallel ({}) must divide the engine's tensor_parallel x data_parallel = {} devices",
                           r.expert_parallel, r.engine_devices()));
    }
    if (s.placement.rollout_devices % r.engine_devices() != 0) {
      if (r.data_parallel == 1) {
        src.fail(m->get("tensor_parallel"), "rollout.tensor_parallel",
                 fmt::format("rollout.tensor_parallel ({}) must divide the {} rollout devices", r.tensor_parallel,
                             s.placement.rollout_devices));
      }
      src.fail(m->get("data_parallel"), "rollout.data_parallel",
               fmt::format("rollout.tensor_parallel x data_parallel ({} x {}) must divide the {} rollout devices",
                           r.tensor_parallel, r.data_parallel, s.placement.rollout_devices));
    }
    if (r.expert_parallel > 1 && !s.model.moe) {
      src.fail(m->get("expert_parallel"), "rollout.expert_parallel", "rollout.expert_parallel > 1 needs an MoE model");
    }
  }
}

// DeepSpeed's CPU Adam runs under ZeRO-Offload, which rlsim prices on the fsdp backend (ZeRO-3);
// Megatron-Core's optimizer_cpu_offload steps with torch's CPU Adam.
void check_cpu_adam_kernel(const Source& src, Map& m, const std::string& section, TrainingBackend backend,
                           const OptimizerConfig& opt) {
  if (!opt.cpu_adam || opt.cpu_adam_kernel != CpuAdamKernel::kDeepSpeed || backend != TrainingBackend::kMegatron) return;
  src.fail(m.has("backend") ? m.get("backend") : m.node(), section + ".backend",
           section +
               ".backend: megatron with training.optimizer.cpu_adam_kernel: deepspeed; DeepSpeedCPUAdam runs under "
               "ZeRO-Offload (backend: fsdp), Megatron-Core's optimizer_cpu_offload uses cpu_adam_kernel: torch");
}

// The Megatron layout rules of a trained model's parallel sizes (Megatron-LM arguments.py): the
// world is TP x CP x PP x DP, EP x ETP divides TP x CP x DP, interleaved stages divide the layers,
// context parallel, expert parallel and interleaving need the Megatron backend, PP at most the
// layers. `section` names the keys' section ("training", "algorithm.critic"); the model runs on
// `devices` devices. Each error names the rule broken.
void check_training_layout(const Source& src, Map& m, const std::string& section, const ParallelLayout& t, int devices,
                           const models::ModelArch& model) {
  const auto at = [&](const char* key) { return m.has(key) ? m.get(key) : m.node(); };  // the key, or the section
  const auto key = [&](const char* k) { return section + "." + k; };
  const int mp = t.tensor_parallel * t.pipeline_parallel;
  if (t.context_parallel == 1 && devices % mp != 0) {
    src.fail(
        m.node(), section,
        fmt::format("{} tensor_parallel x pipeline_parallel = {} must divide the {} {} devices", section, mp, devices, section));
  }
  if (devices % t.model_parallel() != 0) {
    src.fail(at("context_parallel"), key("context_parallel"),
             fmt::format("{} tensor_parallel x context_parallel x pipeline_parallel = {} x {} x {} must divide the {} {} "
                         "devices (world = TP x CP x PP x DP)",
                         section, t.tensor_parallel, t.context_parallel, t.pipeline_parallel, devices, section));
  }
  const int expert_world = devices / t.pipeline_parallel;  // TP x CP x DP
  if (t.context_parallel == 1 && t.expert_tensor_parallel == 1 && expert_world % t.expert_parallel != 0) {
    src.fail(at("expert_parallel"), key("expert_parallel"),
             section + ".expert_parallel must divide tensor_parallel x data-parallel size");
  }
  if (expert_world % (t.expert_parallel * t.expert_tensor_parallel) != 0) {
    src.fail(at(m.has("expert_tensor_parallel") ? "expert_tensor_parallel" : "expert_parallel"), key("expert_parallel"),
             fmt::format("{} expert_parallel x expert_tensor_parallel = {} x {} must divide tensor_parallel x "
                         "context_parallel x data-parallel size = {}",
                         section, t.expert_parallel, t.expert_tensor_parallel, expert_world));
  }
  if (t.expert_tensor_parallel > 1 && !model.moe) {
    src.fail(at("expert_tensor_parallel"), key("expert_tensor_parallel"),
             section + ".expert_tensor_parallel > 1 needs an MoE model");
  }
  const bool megatron = t.backend == TrainingBackend::kMegatron;
  if (t.context_parallel > 1 && !megatron) {
    src.fail(
        at("context_parallel"), key("context_parallel"),
        section + ".context_parallel > 1 needs backend: megatron (verl's FSDP backend splits sequences with Ulysses instead)");
  }
  if (t.virtual_pipeline > 1) {
    if (!megatron || t.pipeline_parallel < 2) {
      src.fail(at("virtual_pipeline"), key("virtual_pipeline"),
               section + ".virtual_pipeline > 1 needs backend: megatron and pipeline_parallel >= 2");
    }
    if (model.layers % (t.pipeline_parallel * t.virtual_pipeline) != 0) {
      src.fail(at("virtual_pipeline"), key("virtual_pipeline"),
               fmt::format("pipeline_parallel x virtual_pipeline = {} x {} must divide the model's {} layers",
                           t.pipeline_parallel, t.virtual_pipeline, model.layers));
    }
  }
  if (t.expert_parallel > 1 && !model.moe) {
    src.fail(at("expert_parallel"), key("expert_parallel"), section + ".expert_parallel > 1 needs an MoE model");
  }
  if (t.expert_parallel > 1 && !megatron) {
    src.fail(at("expert_parallel"), key("expert_parallel"),
             section + ".expert_parallel > 1 needs backend: megatron (FSDP shards experts like any other weight)");
  }
  if (t.pipeline_parallel > model.layers) {
    src.fail(at("pipeline_parallel"), key("pipeline_parallel"), section + ".pipeline_parallel exceeds the model's layers");
  }
}

// A critic's or reward model's `placement` and `devices`: a separate group needs disaggregated
// placement (the actor's training devices are then a group of their own).
void parse_aux_placement(const Source& src, Map& am, const std::string& path, const Scenario& s, AuxModelConfig& c) {
  if (c.placement != AuxPlacement::kSeparate) {
    if (am.has("devices")) {
      src.fail(am.get("devices"), path + ".devices", "'" + path + ".devices' is only valid with placement: separate");
    }
    return;
  }
  if (s.placement.mode != PlacementMode::kDisaggregated) {
    src.fail(am.get("placement"), path + ".placement",
             path +
                 ".placement: separate needs placement.mode: disaggregated (the actor's training devices, the "
                 "rollout engines' and this model's are then distinct groups)");
  }
  c.devices = static_cast<int>(am.integer("devices", 0, 1, s.cluster.devices(), true));
}

// A critic's or reward model's own backend and parallel sizes (the training section's unless set).
void parse_aux_layout(Map& am, ParallelLayout& l) {
  l.backend = am.choice<TrainingBackend>("backend", l.backend, backend_names());
  l.tensor_parallel = static_cast<int>(am.integer("tensor_parallel", l.tensor_parallel, 1, 4096));
  l.pipeline_parallel = static_cast<int>(am.integer("pipeline_parallel", l.pipeline_parallel, 1, 4096));
  l.expert_parallel = static_cast<int>(am.integer("expert_parallel", l.expert_parallel, 1, 4096));
  l.context_parallel = static_cast<int>(am.integer("context_parallel", l.context_parallel, 1, 4096));
  l.expert_tensor_parallel = static_cast<int>(am.integer("expert_tensor_parallel", l.expert_tensor_parallel, 1, 4096));
  // Interleaving belongs to a pipeline: a model that sets its own pipeline_parallel starts from none.
  l.virtual_pipeline =
      static_cast<int>(am.integer("virtual_pipeline", am.has("pipeline_parallel") ? 1 : l.virtual_pipeline, 1, 4096));
}

// algorithm: {name, critic: {model, precision, placement, devices, backend, *_parallel}, reward_model: {...},
//             reference: {placement, devices, backend, *_parallel}}.
void parse_algorithm_section(const Source& src, Map& top, const fs::path& base_dir, Scenario& s) {
  auto& a = s.algorithm;
  if (!top.has("algorithm")) return;
  Map m(src, top.get("algorithm"), "algorithm");
  a.name = m.choice<Algorithm>("name", a.name, algorithm_names());
  int separate_devices = 0;  // of the critic's, reward model's and reference's own groups
  // The reference is the initial policy: the actor's model and precision, never its own.
  auto aux = [&](const char* key, bool own_model = true) {
    AuxModelConfig c;
    c.model = s.model;
    c.precision = s.training.precision;
    c.layout = s.training;  // the training section's layout unless the model sets its own
    if (!m.has(key)) return c;
    const std::string path = std::string("algorithm.") + key;
    Map am(src, m.get(key), path);
    if (own_model && am.has("model")) c.model = parse_model_node(src, am.get("model"), path + ".model", base_dir);
    if (own_model && am.has("precision")) c.precision = parse_recipe(src, am.get("precision"), path + ".precision");
    // Only a reward model may sit on the critic's devices.
    NameTable<AuxPlacement> places;
    for (const auto& p : aux_placement_names()) {
      if (p.second != AuxPlacement::kCritic || std::string_view(key) == "reward_model") places.push_back(p);
    }
    c.placement = am.choice<AuxPlacement>("placement", c.placement, places);
    parse_aux_placement(src, am, path, s, c);
    separate_devices += c.devices;
    parse_aux_layout(am, c.layout);
    std::vector<std::string> keys{"placement",         "devices",         "backend",          "tensor_parallel",
                                  "pipeline_parallel", "expert_parallel", "context_parallel", "expert_tensor_parallel",
                                  "virtual_pipeline"};
    if (own_model) keys.insert(keys.begin(), {"model", "precision"});
    am.finish(keys);
    // The devices it runs on: its own, the critic's (parsed first), or the actor's.
    int devices = s.placement.train_devices;
    if (c.placement == AuxPlacement::kSeparate) devices = c.devices;
    if (c.placement == AuxPlacement::kCritic && a.critic && a.critic->placement == AuxPlacement::kSeparate)
      devices = a.critic->devices;
    check_training_layout(src, am, path, c.layout, devices, c.model);
    check_cpu_adam_kernel(src, am, path, c.layout.backend, s.training.optimizer);
    return c;
  };
  if (a.name == Algorithm::kPpo) {
    a.critic = aux("critic");
  } else if (m.has("critic")) {
    src.fail(m.get("critic"), "algorithm.critic", "algorithm.critic needs name: ppo (GRPO, REINFORCE++ and RLOO have no critic)");
  }
  if (m.has("reward_model")) a.reward_model = aux("reward_model");
  if (m.has("reference")) {
    if (!s.training.reference_model) {
      src.fail(m.get("reference"), "algorithm.reference",
               "algorithm.reference places the KL reference's forward pass, but training.reference_model is false");
    }
    a.reference = aux("reference", false);
  }
  m.finish({"name", "critic", "reward_model", "reference"});
  if (a.reward_model && a.reward_model->placement == AuxPlacement::kCritic && !a.critic) {
    src.fail(Map(src, m.get("reward_model"), "algorithm.reward_model").get("placement"), "algorithm.reward_model.placement",
             "algorithm.reward_model.placement: critic needs a critic (algorithm.name: ppo)");
  }
  const int used = s.placement.rollout_devices + s.placement.train_devices + separate_devices;
  if (separate_devices > 0 && used > s.cluster.devices()) {
    src.fail(m.node(), "algorithm",
             fmt::format("placement.rollout_devices + train_devices + the critic's, reward model's and reference's separate "
                         "devices = {} "
                         "+ {} + {} exceeds the cluster's {} devices",
                         s.placement.rollout_devices, s.placement.train_devices, separate_devices, s.cluster.devices()));
  }
  if (a.name == Algorithm::kRloo && s.workload.samples_per_prompt < 2) {
    src.fail(m.get("name"), "algorithm.name",
             "rloo needs workload.samples_per_prompt >= 2 (each sample's baseline is the mean of the others)");
  }
}

// training: backend, recipe, parallelism, batching, offload, optimizer and cost overrides.
// training.padding, and the rules it brings: fixed micro-batches, and lengths the workload bounds.
void parse_training_padding(const Source& src, Map& m, Scenario& s) {
  auto& t = s.training;
  t.padding = m.choice<TrainPadding>("padding", t.padding, padding_names());
  if (t.padding != TrainPadding::kNone && t.dynamic_batching) {
    src.fail(m.get("padding"), "training.padding",
             "training.padding pads fixed micro-batches: it needs training.dynamic_batching: false (verl's use_dynamic_bsz "
             "needs use_remove_padding)");
  }
  if (t.padding != TrainPadding::kMaxLength) return;
  for (const auto& [d, key] :
       {std::pair{&s.workload.prompt_tokens, "prompt_tokens"}, {&s.workload.response_tokens, "response_tokens"}}) {
    if (d->kind == LengthDist::Kind::kLognormal && d->max <= 0) {
      src.fail(m.get("padding"), "training.padding",
               fmt::format("training.padding: max_length pads to the longest length the workload allows: give "
                           "workload.{} a max (the framework's max_prompt_length / response_length)",
                           key));
    }
  }
}

// training.optimizer: the optimizer, its state format and where its states and step live.
void parse_training_optimizer(const Source& src, Map& m, OptimizerConfig& opt) {
  if (!m.has("optimizer")) return;
  Map o(src, m.get("optimizer"), "training.optimizer");
  opt.name = o.choice<std::string>("name", opt.name, {{"adam", "adam"}, {"adamw", "adamw"}, {"sgd", "sgd"}});
  opt.state = o.choice<Element>("state", opt.state, {{"fp32", Element::kFp32}, {"bf16", Element::kBf16}});
  opt.offload = o.boolean("offload", opt.offload);
  opt.cpu_adam = o.boolean("cpu_adam", opt.cpu_adam);
  opt.cpu_adam_kernel = o.choice<CpuAdamKernel>("cpu_adam_kernel", opt.cpu_adam_kernel, cpu_adam_kernel_names());
  o.finish({"name", "state", "offload", "cpu_adam", "cpu_adam_kernel"});
  if (o.has("cpu_adam_kernel") && !opt.cpu_adam) {
    src.fail(o.get("cpu_adam_kernel"), "training.optimizer.cpu_adam_kernel",
             "training.optimizer.cpu_adam_kernel is only valid with cpu_adam: true");
  }
  if (opt.offload && opt.cpu_adam) {
    src.fail(o.node(), "training.optimizer",
             "training.optimizer: offload (states to host between updates, step on the device) and cpu_adam (states on "
             "the host, step on the CPU) are alternatives; set one");
  }
}

// training.efficiency and training.step_overhead: a scenario's own values over the calibration's.
void parse_training_overrides(const Source& src, Map& m, Scenario& s) {
  auto& ov = s.cost_overrides;
  if (m.has("efficiency")) {
    Map e(src, m.get("efficiency"), "training.efficiency");
    ov.train_memory = optional_fraction(e, "memory");
    ov.train_compute = optional_fraction(e, "compute");
    ov.train_moe_compute = optional_fraction(e, "moe_compute");
    ov.train_forward = optional_fraction(e, "forward");
    ov.train_comm = optional_fraction(e, "comm");
    if (e.has("attention_compute")) s.training.efficiency.attention_compute = *optional_fraction(e, "attention_compute");
    e.finish({"memory", "compute", "moe_compute", "forward", "comm", "attention_compute"});
  }
  ov.step_overhead_s = optional_quantity(m, "step_overhead");
}

void parse_training_section(const Source& src, Map& top, Scenario& s) {
  auto& t = s.training;
  t.precision = models::builtin_recipe("bf16");
  if (!top.has("training")) return;
  Map m(src, top.get("training"), "training");
  t.backend = m.choice<TrainingBackend>("backend", t.backend, backend_names());
  if (m.has("precision")) t.precision = parse_recipe(src, m.get("precision"), "training.precision");
  t.tensor_parallel = static_cast<int>(m.integer("tensor_parallel", t.tensor_parallel, 1, 4096));
  t.pipeline_parallel = static_cast<int>(m.integer("pipeline_parallel", t.pipeline_parallel, 1, 4096));
  t.expert_parallel = static_cast<int>(m.integer("expert_parallel", t.expert_parallel, 1, 4096));
  t.context_parallel = static_cast<int>(m.integer("context_parallel", t.context_parallel, 1, 4096));
  t.expert_tensor_parallel = static_cast<int>(m.integer("expert_tensor_parallel", t.expert_tensor_parallel, 1, 4096));
  t.virtual_pipeline = static_cast<int>(m.integer("virtual_pipeline", t.virtual_pipeline, 1, 4096));
  t.sequence_parallel = m.boolean("sequence_parallel", t.sequence_parallel);
  t.ppo_epochs = static_cast<int>(m.integer("ppo_epochs", t.ppo_epochs, 1, 100));
  t.mini_batches = static_cast<int>(m.integer("mini_batches", t.mini_batches, 1, 1 << 20));
  t.dynamic_batching = m.boolean("dynamic_batching", t.dynamic_batching);
  t.micro_batch_tokens = m.integer("micro_batch_tokens", t.micro_batch_tokens, 1, 1LL << 40);
  t.logprob_micro_batch_tokens = m.integer("logprob_micro_batch_tokens", t.micro_batch_tokens, 1, 1LL << 40);
  t.micro_batch_sequences = static_cast<int>(m.integer("micro_batch_sequences", t.micro_batch_sequences, 1, 1 << 20));
  t.logprob_micro_batch_sequences =
      static_cast<int>(m.integer("logprob_micro_batch_sequences", t.micro_batch_sequences, 1, 1 << 20));
  parse_training_padding(src, m, s);
  t.recompute_old_logprob = m.boolean("recompute_old_logprob", t.recompute_old_logprob);
  t.reference_model = m.boolean("reference_model", t.reference_model);
  t.activation_checkpointing = m.boolean("activation_checkpointing", t.activation_checkpointing);
  t.param_offload = m.boolean("param_offload", t.param_offload);
  parse_training_optimizer(src, m, t.optimizer);
  parse_training_overrides(src, m, s);
  m.finish({"backend",
            "precision",
            "tensor_parallel",
            "pipeline_parallel",
            "expert_parallel",
            "context_parallel",
            "expert_tensor_parallel",
            "virtual_pipeline",
            "sequence_parallel",
            "ppo_epochs",
            "mini_batches",
            "dynamic_batching",
            "micro_batch_tokens",
            "logprob_micro_batch_tokens",
            "micro_batch_sequences",
            "logprob_micro_batch_sequences",
            "padding",
            "recompute_old_logprob",
            "reference_model",
            "activation_checkpointing",
            "param_offload",
            "optimizer",
            "efficiency",
            "step_overhead"});
  check_training_layout(src, m, "training", t, s.placement.train_devices, s.model);
  check_cpu_adam_kernel(src, m, "training", t.backend, t.optimizer);
}

// Every recipe's GEMMs need a tensor-core rate on the device (after fallback to wider types).
void check_device_rates(const Source& src, const YAML::Node& root, const Scenario& s) {
  // Each recipe with where the file sets it: `section.precision`, or the device when it is the default.
  struct Use {
    std::string role;
    const Recipe* recipe;
    std::vector<std::string> path;  // keys from the root to the section holding `precision`
  };
  std::vector<Use> uses = {{"rollout", &s.rollout.precision, {"rollout"}}, {"training", &s.training.precision, {"training"}}};
  if (s.algorithm.critic) uses.push_back({"algorithm.critic", &s.algorithm.critic->precision, {"algorithm", "critic"}});
  if (s.algorithm.reward_model)
    uses.push_back({"algorithm.reward_model", &s.algorithm.reward_model->precision, {"algorithm", "reward_model"}});
  for (const auto& [role, recipe, path] : uses) {
    const auto want = recipe->linear.compute(recipe->mode);
    if (s.cluster.device.effective(want)) continue;
    // Const look-ups (no zombie keys), and reset() to rebind: a YAML::Node's operator= would
    // assign through it into the document.
    const auto child = [](const YAML::Node& n, const std::string& key) { return n.IsMap() && n[key] ? n[key] : YAML::Node(); };
    YAML::Node where(root);
    for (const auto& key : path) where.reset(child(where, key));
    where.reset(where.IsMap() && child(where, "precision") ? child(where, "precision") : root["cluster"]["device"]);
    src.fail(where, role + ".precision",
             fmt::format("device '{}' has no compute rate usable for the {} recipe '{}' ({} GEMMs); add a '{}' rate to "
                         "cluster.device.compute",
                         s.cluster.device.name, role, recipe->name, models::compute_name(want), models::compute_name(want)));
  }
}

// weight_sync: method and bucket size.
void parse_weight_sync_section(const Source& src, Map& top, Scenario& s) {
  if (top.has("weight_sync")) {
    Map m(src, top.get("weight_sync"), "weight_sync");
    s.weight_sync.method = m.choice<WeightSyncMethod>("method", s.weight_sync.method, weight_sync_names());
    s.weight_sync.bucket_bytes = m.quantity("bucket", s.weight_sync.bucket_bytes, Dimension::kBytes);
    s.cost_overrides.sync_per_matrix_s = optional_quantity(m, "per_matrix");
    if (s.weight_sync.bucket_bytes < 1e6)
      src.fail(m.get("bucket"), "weight_sync.bucket", "weight_sync.bucket must be at least 1 MB");
    m.finish({"method", "bucket", "per_matrix"});
    if (s.weight_sync.method == WeightSyncMethod::kCudaIpc && s.placement.mode == PlacementMode::kDisaggregated) {
      src.fail(m.get("method"), "weight_sync.method",
               "cuda-ipc needs rollout and training on the same devices (placement.mode: colocated)");
    }
  }
}

// output: folder, plots, trace and its cap.
void parse_output_section(const Source& src, Map& top, const std::string& path, Scenario& s) {
  s.output.dir = (fs::path("out") / fs::path(path).stem()).string();
  if (top.has("output")) {
    Map m(src, top.get("output"), "output");
    s.output.dir = m.str("dir", s.output.dir);
    s.output.plots = m.boolean("plots", s.output.plots);
    s.output.trace = m.boolean("trace", s.output.trace);
    s.output.trace_max_iterations = m.integer("trace_max_iterations", s.output.trace_max_iterations, 0, std::int64_t{1} << 40);
    m.finish({"dir", "plots", "trace", "trace_max_iterations"});
  }
}

}  // namespace

Scenario load_scenario(const std::string& path, const std::vector<std::string>& overrides, const std::string& override_label,
                       const Calibration* calibration) {
  Source src{path, {}, override_label};
  YAML::Node root = load_input_file(path, InputKind::kScenario);
  if (!root.IsMap()) throw ScenarioError(path + ":1:1: a scenario must be a YAML mapping (see SCENARIO.md)");
  for (const auto& o : overrides) apply_override(root, o, src);
  const fs::path base_dir = fs::path(path).parent_path();

  Scenario s;
  s.file = path;
  Map top(src, root, "");
  s.name = top.str("name", s.name, true);
  s.seed = static_cast<std::uint64_t>(top.integer("seed", s.seed, 0, INT64_MAX));
  s.steps = static_cast<int>(top.integer("steps", s.steps, 1, 100000));

  parse_model_section(src, top, base_dir, s);
  parse_cluster_section(src, top, s);
  parse_placement_section(src, top, s);
  parse_schedule_section(src, top, s);
  parse_workload_section(src, top, base_dir, s);
  parse_rollout_section(src, top, s);
  parse_training_section(src, top, s);
  parse_algorithm_section(src, top, base_dir, s);
  check_device_rates(src, root, s);
  parse_weight_sync_section(src, top, s);
  parse_output_section(src, top, path, s);
  // A validation record's published figures (rlsim validate reads them; see analysis/validation.h).
  (void)top.get("validation");
  top.finish({"name", "seed", "steps", "model", "cluster", "placement", "schedule", "workload", "rollout", "training",
              "algorithm", "weight_sync", "output", "validation"});
  apply_calibration(s, calibration ? *calibration : builtin_calibration());
  return s;
}

}  // namespace rlsim::sim
