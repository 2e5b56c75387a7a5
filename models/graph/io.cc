#include "models/graph/io.h"

#include <fstream>
#include <map>
#include <ostream>
#include <sstream>

// GCC 12 reports boost::optional inside Boost's adj_list_edge_iterator (used by write_graphml,
// write_graphviz and edges()) as maybe-uninitialized: a known false positive (GCC bug 80635).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <fmt/format.h>

#include <boost/graph/graphml.hpp>
#include <boost/graph/graphviz.hpp>
#include <boost/property_map/dynamic_property_map.hpp>

namespace rlsim::models {
namespace {

// GraphML is read into and written from all-string bundles; conversion validates every name.
struct RawVertex {
  std::string name, kind;
  int layer = -1;
};
struct RawEdge {
  std::string tensor, role, format, mode, storage, compute, accumulate;
};
// bidirectionalS: edges() then runs in insertion order, so a round trip keeps the edge order.
using RawGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, RawVertex, RawEdge, GraphInfo>;

boost::dynamic_properties raw_properties(RawGraph& g) {
  boost::dynamic_properties dp;  // no generator: an attribute not listed here is an error
  dp.property("name", boost::get(&RawVertex::name, g));
  dp.property("kind", boost::get(&RawVertex::kind, g));
  dp.property("layer", boost::get(&RawVertex::layer, g));
  dp.property("tensor", boost::get(&RawEdge::tensor, g));
  dp.property("role", boost::get(&RawEdge::role, g));
  dp.property("format", boost::get(&RawEdge::format, g));
  dp.property("mode", boost::get(&RawEdge::mode, g));
  dp.property("storage", boost::get(&RawEdge::storage, g));
  dp.property("compute", boost::get(&RawEdge::compute, g));
  dp.property("accumulate", boost::get(&RawEdge::accumulate, g));
  GraphInfo& info = g[boost::graph_bundle];
  dp.property("builder", boost::ref_property_map<RawGraph*, std::string>(info.builder));
  dp.property("model", boost::ref_property_map<RawGraph*, std::string>(info.model));
  dp.property("recipe", boost::ref_property_map<RawGraph*, std::string>(info.recipe));
  dp.property("side", boost::ref_property_map<RawGraph*, std::string>(info.side));
  return dp;
}

PrecisionGraph from_raw(const RawGraph& raw, const std::string& file) {
  PrecisionGraph g;
  g[boost::graph_bundle] = raw[boost::graph_bundle];
  for (std::size_t v = 0; v < boost::num_vertices(raw); ++v) {
    const RawVertex& rv = raw[v];
    const std::string where = fmt::format("{}: node #{}{}", file, v, rv.name.empty() ? "" : " ('" + rv.name + "')");
    if (rv.name.empty()) throw GraphError(where + ": missing attribute 'name'");
    if (rv.kind.empty()) throw GraphError(where + ": missing attribute 'kind' (expected one of: " + op_kind_names() + ")");
    const auto kind = parse_op_kind(rv.kind);
    if (!kind) throw GraphError(fmt::format("{}: unknown kind '{}' (expected one of: {})", where, rv.kind, op_kind_names()));
    if (rv.layer < -1) throw GraphError(fmt::format("{}: layer {} (expected -1 or a layer index >= 0)", where, rv.layer));
    boost::add_vertex(OpVertex{rv.name, *kind, rv.layer}, g);
  }
  std::size_t index = 0;
  for (const auto e : boost::make_iterator_range(boost::edges(raw))) {
    const RawEdge& re = raw[e];
    const std::string where = fmt::format("{}: edge #{} ('{}' -> '{}')", file, index++, raw[boost::source(e, raw)].name,
                                          raw[boost::target(e, raw)].name);
    auto need = [&](const std::string& value, const char* attr) {
      if (value.empty()) throw GraphError(fmt::format("{}: missing attribute '{}'", where, attr));
    };
    need(re.tensor, "tensor");
    need(re.role, "role");
    need(re.format, "format");
    TensorEdge te;
    te.tensor = re.tensor;
    const auto role = parse_role(re.role);
    if (!role)
      throw GraphError(
          fmt::format("{}: unknown role '{}' (expected activation, weight, gradient, kv or router)", where, re.role));
    te.role = *role;
    try {
      te.precision.format = parse_format(re.format);
    } catch (const std::invalid_argument& ex) {
      throw GraphError(fmt::format("{}: format '{}': {}", where, re.format, ex.what()));
    }
    TensorPrecision& p = te.precision;
    if (re.mode.empty() || re.mode == "real") {
      p.mode = QuantMode::kReal;
    } else if (re.mode == "fake") {
      p.mode = QuantMode::kFake;
    } else {
      throw GraphError(fmt::format("{}: mode '{}' (expected real or fake)", where, re.mode));
    }
    const bool fake = p.mode == QuantMode::kFake;
    auto element = [&](const std::string& value, const char* attr, Element fallback) {
      if (value.empty()) return fallback;
      const auto el = parse_element(value);
      if (!el) throw GraphError(fmt::format("{}: {} '{}' (expected one of: {})", where, attr, value, element_names()));
      return *el;
    };
    p.storage = element(re.storage, "storage", fake ? Element::kBf16 : p.format.element);
    p.accumulate = element(re.accumulate, "accumulate", Element::kFp32);
    if (re.compute.empty()) {
      p.compute = fake ? ComputeType::kBf16 : traits(p.format.element).compute;
    } else {
      const auto c = parse_compute(re.compute);
      if (!c) throw GraphError(fmt::format("{}: compute '{}' (expected fp32, bf16, fp16, fp8, int8 or fp4)", where, re.compute));
      p.compute = *c;
    }
    boost::add_edge(boost::source(e, raw), boost::target(e, raw), std::move(te), g);
  }
  return g;
}

RawGraph to_raw(const PrecisionGraph& g) {
  RawGraph raw;
  raw[boost::graph_bundle] = g[boost::graph_bundle];
  for (OpId v = 0; v < boost::num_vertices(g); ++v) {
    boost::add_vertex(RawVertex{g[v].name, std::string(op_kind_name(g[v].kind)), g[v].layer}, raw);
  }
  for (const TensorId e : boost::make_iterator_range(boost::edges(g))) {
    const TensorEdge& te = g[e];
    const TensorPrecision& p = te.precision;
    boost::add_edge(boost::source(e, g), boost::target(e, g),
                    RawEdge{te.tensor, std::string(role_name(te.role)), p.format.str(),
                            p.mode == QuantMode::kFake ? "fake" : "real", std::string(traits(p.storage).name),
                            std::string(compute_name(p.compute)), std::string(traits(p.accumulate).name)},
                    raw);
  }
  return raw;
}

// ---- DOT -------------------------------------------------------------------------------------

/// A DOT double-quoted string body: quotes and backslashes escaped, newlines as DOT's "\n".
std::string escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

/// A name with its layer index replaced by '#' and its expert index by '*':
/// "layers.12.mlp.experts.7.up_proj" -> "layers.#.mlp.experts.*.up_proj". `layer_at` is where
/// the '#' is, npos when the name does not start with "layers.<n>." (a GraphML graph may name
/// its operators otherwise, or hold a '#' of its own).
struct Neutral {
  std::string name;
  std::size_t layer_at = std::string::npos;
};

/// Replaces the digits after `marker` (which must be followed by digits and a '.') with `with`.
bool replace_index(std::string& name, std::string_view marker, std::string_view with, std::size_t from) {
  const std::size_t at = name.find(marker, from);
  if (at == std::string::npos) return false;
  const std::size_t begin = at + marker.size();
  std::size_t end = begin;
  while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
  if (end == begin || end >= name.size() || name[end] != '.') return false;
  name.replace(begin, end - begin, with);
  return true;
}

Neutral neutral_name(const std::string& name) {
  constexpr std::string_view kLayers = "layers.";
  Neutral n{name};
  if (n.name.starts_with(kLayers) && replace_index(n.name, kLayers, "#", 0)) n.layer_at = kLayers.size();
  replace_index(n.name, ".experts.", "*", 0);
  return n;
}

std::string ranges(const std::vector<int>& layers) {
  std::string out;
  for (std::size_t i = 0; i < layers.size();) {
    std::size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? std::to_string(layers[i]) : fmt::format("{}-{}", layers[i], layers[j]);
    i = j + 1;
  }
  return out;
}

struct DotNode {
  std::string id, label;
  OpKind kind = OpKind::kParameter;
  std::size_t count = 0;
  bool red = false;
};
struct DotEdge {
  std::string label;
  std::size_t count = 0;
  bool red = false;
  bool mixed = false;
};
using DotGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, DotNode, DotEdge>;

}  // namespace

void write_graphml(std::ostream& out, const PrecisionGraph& g) {
  RawGraph raw = to_raw(g);
  boost::write_graphml(out, raw, boost::get(boost::vertex_index, raw), raw_properties(raw), true);
}

PrecisionGraph read_graphml(std::istream& in, const std::string& file) {
  RawGraph raw;
  boost::dynamic_properties dp = raw_properties(raw);
  try {
    boost::read_graphml(in, raw, dp);
  } catch (const boost::property_not_found& e) {
    throw GraphError(
        fmt::format("{}: unknown GraphML attribute '{}' (expected node: name, kind, layer; edge: tensor, role, format, "
                    "mode, storage, compute, accumulate; graph: builder, model, recipe, side)",
                    file, e.property));
  } catch (const boost::undirected_graph_error&) {  // Boost's name for "undirected file, directed graph"
    throw GraphError(file + ": the graph must be directed (edgedefault=\"directed\")");
  } catch (const std::exception& e) {
    throw GraphError(fmt::format("{}: not a readable GraphML graph: {}", file, e.what()));
  }
  return from_raw(raw, file);
}

PrecisionGraph read_graphml_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw GraphError(path + ": cannot open");
  return read_graphml(in, path);
}

std::string dot_edge_key(const std::string& src, const std::string& dst, const std::string& tensor) {
  return src + '\x1f' + dst + '\x1f' + tensor;
}

DotMarks mismatch_marks(const std::vector<Mismatch>& mismatches, bool training) {
  DotMarks marks;
  for (const Mismatch& m : mismatches) {
    if (m.tensor.empty()) {
      if (!training && !m.infer_path.empty()) marks.operators.insert(m.op);
      continue;
    }
    if (training) {
      if (!m.train_src.empty()) marks.edges.insert(dot_edge_key(m.train_src, m.train_dst, m.tensor));
    } else {
      for (std::size_t i = 0; i + 1 < m.infer_path.size(); ++i) {
        marks.edges.insert(dot_edge_key(m.infer_path[i], m.infer_path[i + 1], m.tensor));
      }
    }
  }
  return marks;
}

namespace {

// Whether edge `e` of `g` is marked red.
bool marked(const PrecisionGraph& g, const DotMarks& marks, TensorId e) {
  return marks.edges.count(dot_edge_key(g[boost::source(e, g)].name, g[boost::target(e, g)].name, g[e].tensor)) > 0;
}

// Each operator's node label: its full name (`full`), or its name with the layer number replaced
// by the group of decoder layers whose operators, tensors, precisions and marks are identical to
// its layer's ("{0-2,4}"), so that those layers draw as one.
std::vector<std::string> dot_labels(const PrecisionGraph& g, const DotMarks& marks, bool full) {
  const std::size_t n = boost::num_vertices(g);
  std::vector<std::string> label_of(n);
  if (full) {
    for (OpId v = 0; v < n; ++v) label_of[v] = g[v].name;
    return label_of;
  }
  std::vector<Neutral> neutral(n);
  for (OpId v = 0; v < n; ++v) neutral[v] = neutral_name(g[v].name);
  std::map<int, std::vector<std::string>> signature;
  for (OpId v = 0; v < n; ++v) {
    if (g[v].layer < 0) continue;
    signature[g[v].layer].push_back(
        fmt::format("V|{}|{}|{}", neutral[v].name, op_kind_name(g[v].kind), marks.operators.count(g[v].name)));
    for (const TensorId e : boost::make_iterator_range(boost::in_edges(v, g))) {
      const OpId u = boost::source(e, g);
      const std::string src = g[u].layer == g[v].layer ? neutral[u].name : "(outside)";
      signature[g[v].layer].push_back(
          fmt::format("E|{}|{}|{}|{}|{}", src, neutral[v].name, g[e].tensor, g[e].precision.str(), marked(g, marks, e)));
    }
  }
  std::map<std::string, std::vector<int>> groups;
  for (auto& [layer, sig] : signature) {
    std::sort(sig.begin(), sig.end());
    std::string key;
    for (const auto& s : sig) key += s + '\n';
    groups[key].push_back(layer);
  }
  std::map<int, std::string> group_label;
  for (const auto& [key, layers] : groups) {
    for (int l : layers) group_label[l] = layers.size() == 1 ? std::to_string(l) : "{" + ranges(layers) + "}";
  }
  for (OpId v = 0; v < n; ++v) {
    label_of[v] = neutral[v].name;
    if (g[v].layer >= 0 && neutral[v].layer_at != std::string::npos) {
      label_of[v].replace(neutral[v].layer_at, 1, group_label[g[v].layer]);
    }
  }
  return label_of;
}

// The graph as drawn: one node per label, one edge per (node, node, tensor), each counting what it
// merged, and the layers each node merged (to count a node's multiplicity per layer group).
struct MergedDot {
  DotGraph d;
  std::map<std::size_t, std::set<int>> node_layers;
};

MergedDot merge_dot(const PrecisionGraph& g, const DotMarks& marks, const std::vector<std::string>& label_of) {
  const std::size_t n = boost::num_vertices(g);
  MergedDot m;
  DotGraph& d = m.d;
  std::map<std::string, std::size_t> node_index;
  std::vector<std::size_t> node_of(n);
  for (OpId v = 0; v < n; ++v) {
    const auto [it, fresh] = node_index.emplace(label_of[v], boost::num_vertices(d));
    if (fresh) boost::add_vertex(DotNode{label_of[v], label_of[v], g[v].kind, 0, false}, d);
    DotNode& node = d[it->second];
    // An operator merged from several layers counts once per layer group, experts once each.
    ++node.count;
    node.red = node.red || marks.operators.count(g[v].name) > 0;
    node_of[v] = it->second;
  }
  for (OpId v = 0; v < n; ++v) m.node_layers[node_of[v]].insert(g[v].layer);
  std::map<std::tuple<std::size_t, std::size_t, std::string>, DotGraph::edge_descriptor> edge_index;
  for (const TensorId e : boost::make_iterator_range(boost::edges(g))) {
    const std::size_t s = node_of[boost::source(e, g)], t = node_of[boost::target(e, g)];
    const std::string label = fmt::format("{}: {}", g[e].tensor, g[e].precision.str());
    const auto key = std::make_tuple(s, t, g[e].tensor);
    auto it = edge_index.find(key);
    if (it == edge_index.end())
      it = edge_index.emplace(key, boost::add_edge(s, t, DotEdge{label, 0, false, false}, d).first).first;
    DotEdge& de = d[it->second];
    ++de.count;
    de.red = de.red || marked(g, marks, e);
    de.mixed = de.mixed || de.label != label;
  }
  return m;
}

}  // namespace

void write_dot(std::ostream& out, const PrecisionGraph& g, const DotMarks& marks, const DotOptions& options) {
  MergedDot merged = merge_dot(g, marks, dot_labels(g, marks, options.full));
  const DotGraph& d = merged.d;
  auto& node_layers = merged.node_layers;
  const auto vertex_writer = [&](std::ostream& os, std::size_t v) {
    const DotNode& node = d[v];
    const std::size_t per_group = node.count / std::max<std::size_t>(1, node_layers[v].size());
    std::string label = node.label + "\n" + std::string(op_kind_name(node.kind));
    if (per_group > 1) label += fmt::format(" (x{})", per_group);
    const bool backward = node.kind == OpKind::kDgrad || node.kind == OpKind::kWgrad;
    os << fmt::format("[label=\"{}\", shape={}{}{}]", escape(label), node.kind == OpKind::kParameter ? "note" : "box",
                      backward ? ", style=dashed" : "", node.red ? ", color=red, fontcolor=red, penwidth=2" : "");
  };
  const auto edge_writer = [&](std::ostream& os, DotGraph::edge_descriptor e) {
    const DotEdge& de = d[e];
    std::string label = de.mixed ? de.label.substr(0, de.label.find(':')) + ": (mixed precisions)" : de.label;
    const std::size_t s = boost::source(e, d);
    const std::size_t per_group = de.count / std::max<std::size_t>(1, node_layers[s].size());
    if (per_group > 1) label += fmt::format(" (x{})", per_group);
    os << fmt::format("[label=\"{}\"{}]", escape(label), de.red ? ", color=red, fontcolor=red, penwidth=2" : "");
  };
  const auto graph_writer = [&](std::ostream& os) {
    os << "rankdir=TB;\nnode [fontname=\"Helvetica\", fontsize=10];\nedge [fontname=\"Helvetica\", fontsize=9];\n";
    if (!options.title.empty()) os << fmt::format("label=\"{}\";\nlabelloc=t;\n", escape(options.title));
  };
  boost::write_graphviz(out, d, vertex_writer, edge_writer, graph_writer);
}

}  // namespace rlsim::models
