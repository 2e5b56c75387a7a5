#include "models/graph/verify.h"

#include <fmt/format.h>

#include <boost/graph/vf2_sub_graph_iso.hpp>
#include <chrono>
#include <map>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "models/graph/build.h"

namespace rlsim::models {
namespace {

constexpr OpId kNone = static_cast<OpId>(-1);

std::string scaling_str(const Format& f) {
  const std::string s = f.str();
  const auto slash = s.find('/');
  return slash == std::string::npos ? "unscaled" : s.substr(slash + 1);
}

std::string format_reason(const Format& a, const Format& b, TensorRole role) {
  const std::string what = role == TensorRole::kWeight ? "weights" : role == TensorRole::kKv ? "KV values" : "values";
  if (!a.quantised() && b.quantised()) {
    return fmt::format("rollout quantises {} to {}; training uses {} (quantisation at inference only)", what, b.str(), a.str());
  }
  if (a.quantised() && !b.quantised()) {
    return fmt::format("training quantises {} to {}; rollout uses {}", what, a.str(), b.str());
  }
  if (a.element == b.element) {
    return fmt::format("same element {}, different scaling: training {}, rollout {}", traits(a.element).name, scaling_str(a),
                       scaling_str(b));
  }
  return fmt::format("different element: training {}, rollout {}", traits(a.element).name, traits(b.element).name);
}

bool names_unique(const PrecisionGraph& g, std::unordered_map<std::string_view, OpId>* index) {
  index->reserve(boost::num_vertices(g));
  for (OpId v = 0; v < boost::num_vertices(g); ++v) {
    if (g[v].name.empty() || !index->emplace(g[v].name, v).second) return false;
  }
  return true;
}

/// The training edge mu -> mv with the inference edge's operand slot, if any.
std::optional<TensorId> find_edge(const PrecisionGraph& g, OpId mu, OpId mv, const std::string& tensor) {
  for (const TensorId e : boost::make_iterator_range(boost::out_edges(mu, g))) {
    if (boost::target(e, g) == mv && g[e].tensor == tensor) return e;
  }
  return std::nullopt;
}

std::vector<std::string> infer_path(const PrecisionGraph& g, TensorId e) {
  std::vector<std::string> path{g[boost::source(e, g)].name};
  if (g[e].kv) {
    path.push_back(g[e].kv->write);
    path.push_back(g[e].kv->read);
  }
  path.push_back(g[boost::target(e, g)].name);
  return path;
}

/// An inference operator with no training counterpart.
Mismatch absent_operator(const OpVertex& v) {
  return Mismatch{v.name,
                  v.kind,
                  "",
                  TensorRole::kActivation,
                  "absent",
                  "-",
                  fmt::format("{} operator absent from the training graph", op_kind_name(v.kind)),
                  v.layer,
                  "",
                  "",
                  {v.name}};
}

/// Mismatches of a (possibly partial) map from inference operators to training operators.
std::vector<Mismatch> compare(const PrecisionGraph& train, const PrecisionGraph& inf, const std::vector<OpId>& map) {
  std::vector<Mismatch> out;
  for (OpId v = 0; v < boost::num_vertices(inf); ++v) {
    const OpVertex& iv = inf[v];
    if (map[v] == kNone) {
      out.push_back(absent_operator(iv));
      continue;
    }
    const OpVertex& tv = train[map[v]];
    if (tv.kind != iv.kind) {
      out.push_back(Mismatch{iv.name,
                             iv.kind,
                             "",
                             TensorRole::kActivation,
                             std::string(op_kind_name(tv.kind)),
                             std::string(op_kind_name(iv.kind)),
                             fmt::format("operator kind differs: training '{}' is {}", tv.name, op_kind_name(tv.kind)),
                             iv.layer,
                             "",
                             "",
                             {iv.name}});
    }
    for (const TensorId e : boost::make_iterator_range(boost::in_edges(v, inf))) {
      const OpId u = boost::source(e, inf);
      if (map[u] == kNone) continue;  // reported with the operator
      const TensorEdge& ie = inf[e];
      const std::string inf_prec = ie.kv && !ie.kv->lossless ? ie.kv->format.str() : ie.precision.str();
      const auto te = find_edge(train, map[u], map[v], ie.tensor);
      if (!te) {
        out.push_back(Mismatch{iv.name, iv.kind, ie.tensor, ie.role, "absent", inf_prec,
                               fmt::format("tensor absent from the training graph: no '{}' edge from '{}' to '{}'", ie.tensor,
                                           train[map[u]].name, train[map[v]].name),
                               iv.layer, "", "", infer_path(inf, e)});
        continue;
      }
      std::string reason;
      if (!value_equivalent(train[*te], ie, &reason)) {
        out.push_back(Mismatch{iv.name, iv.kind, ie.tensor, ie.role, train[*te].precision.str(), inf_prec, reason, iv.layer,
                               train[map[u]].name, train[map[v]].name, infer_path(inf, e)});
      }
    }
  }
  return out;
}

struct Vf2Timeout {};

struct Deadline {
  std::chrono::steady_clock::time_point end;
  mutable std::size_t calls = 0;
  void check() const {
    if (++calls % 1024 == 0 && std::chrono::steady_clock::now() > end) throw Vf2Timeout{};
  }
};

struct VertexEq {
  const PrecisionGraph* small;
  const PrecisionGraph* large;
  const Deadline* deadline;
  bool operator()(OpId a, OpId b) const {
    deadline->check();
    const OpVertex& x = (*small)[a];
    const OpVertex& y = (*large)[b];
    return x.kind == y.kind && (x.layer < 0 || y.layer < 0 || x.layer == y.layer);
  }
};

struct EdgeEq {
  const PrecisionGraph* small;
  const PrecisionGraph* large;
  bool precise;
  bool operator()(TensorId a, TensorId b) const {
    const TensorEdge& x = (*small)[a];
    const TensorEdge& y = (*large)[b];
    return x.tensor == y.tensor && (!precise || value_equivalent(y, x, nullptr));
  }
};

struct Capture {
  std::vector<OpId>* map;
  const PrecisionGraph* small;
  template <typename Map1To2, typename Map2To1>
  bool operator()(Map1To2 f, Map2To1) const {
    for (OpId v = 0; v < boost::num_vertices(*small); ++v) (*map)[v] = boost::get(f, v);
    return false;  // the first embedding is enough
  }
};

enum class Vf2Outcome { kFound, kNone, kTimeout };

Vf2Outcome run_vf2(const PrecisionGraph& inf, const PrecisionGraph& train, bool precise, double budget_s,
                   std::vector<OpId>* map) {
  Deadline deadline{std::chrono::steady_clock::now() +
                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(budget_s))};
  map->assign(boost::num_vertices(inf), kNone);
  if (boost::num_vertices(inf) == 0) return Vf2Outcome::kFound;
  try {
    const bool found = boost::vf2_subgraph_mono(
        inf, train, Capture{map, &inf}, boost::vertex_order_by_mult(inf),
        boost::edges_equivalent(EdgeEq{&inf, &train, precise}).vertices_equivalent(VertexEq{&inf, &train, &deadline}));
    return found ? Vf2Outcome::kFound : Vf2Outcome::kNone;
  } catch (const Vf2Timeout&) {
    return Vf2Outcome::kTimeout;
  }
}

/// Why no embedding exists, as mismatches: inference operators whose names training lacks (when
/// names are shared at all), else operator kinds inference has more of.
std::vector<Mismatch> explain_no_embedding(const PrecisionGraph& train, const PrecisionGraph& inf) {
  std::unordered_map<std::string_view, OpKind> train_names;
  for (OpId v = 0; v < boost::num_vertices(train); ++v) train_names.emplace(train[v].name, train[v].kind);
  std::vector<Mismatch> out;
  bool shared = false;
  for (OpId v = 0; v < boost::num_vertices(inf); ++v) {
    const auto it = train_names.find(inf[v].name);
    if (it != train_names.end() && it->second == inf[v].kind) shared = true;
  }
  if (shared) {
    for (OpId v = 0; v < boost::num_vertices(inf); ++v) {
      const auto it = train_names.find(inf[v].name);
      if (it == train_names.end() || it->second != inf[v].kind) {
        out.push_back(absent_operator(inf[v]));
      }
    }
  }
  if (out.empty()) {
    std::map<OpKind, std::pair<std::size_t, std::size_t>> counts;  // kind -> (training, inference)
    for (OpId v = 0; v < boost::num_vertices(train); ++v) ++counts[train[v].kind].first;
    for (OpId v = 0; v < boost::num_vertices(inf); ++v) ++counts[inf[v].kind].second;
    for (const auto& [kind, c] : counts) {
      if (c.second > c.first) {
        out.push_back(Mismatch{fmt::format("({} operators)", op_kind_name(kind)),
                               kind,
                               "",
                               TensorRole::kActivation,
                               std::to_string(c.first),
                               std::to_string(c.second),
                               fmt::format("inference has {} {} operators, training {}", c.second, op_kind_name(kind), c.first),
                               -1,
                               "",
                               "",
                               {}});
      }
    }
  }
  if (out.empty()) {
    out.push_back(Mismatch{"(graph)",
                           OpKind::kParameter,
                           "",
                           TensorRole::kActivation,
                           "-",
                           "-",
                           "no structure-preserving map: some inference edge has no counterpart among the training graph's edges",
                           -1,
                           "",
                           "",
                           {}});
  }
  return out;
}

}  // namespace

PrecisionGraph contract_kv_cache(const PrecisionGraph& in) {
  const auto is_kv = [&](OpId v) { return in[v].kind == OpKind::kKvWrite || in[v].kind == OpKind::kKvRead; };
  PrecisionGraph out;
  out[boost::graph_bundle] = in[boost::graph_bundle];
  std::vector<OpId> map(boost::num_vertices(in), kNone);
  for (OpId v = 0; v < boost::num_vertices(in); ++v) {
    if (!is_kv(v)) map[v] = boost::add_vertex(in[v], out);
  }
  for (OpId v = 0; v < boost::num_vertices(in); ++v) {
    if (is_kv(v)) continue;
    for (const TensorId e : boost::make_iterator_range(boost::in_edges(v, in))) {
      const OpId u = boost::source(e, in);
      if (!is_kv(u)) {
        boost::add_edge(map[u], map[v], in[e], out);
        continue;
      }
      if (in[u].kind != OpKind::kKvRead) {
        throw GraphError(fmt::format("kv_write '{}' feeds '{}' directly; a kv_write must feed kv_read operators only", in[u].name,
                                     in[v].name));
      }
      const auto reads = boost::in_edges(u, in);
      if (std::distance(reads.first, reads.second) != 1 || in[boost::source(*reads.first, in)].kind != OpKind::kKvWrite) {
        throw GraphError(fmt::format("kv_read '{}' must read exactly one kv_write", in[u].name));
      }
      const TensorId e2 = *reads.first;
      const OpId w = boost::source(e2, in);
      const auto writes = boost::in_edges(w, in);
      if (std::distance(writes.first, writes.second) != 1 || is_kv(boost::source(*writes.first, in))) {
        throw GraphError(fmt::format("kv_write '{}' must store exactly one tensor from a non-cache operator", in[w].name));
      }
      const TensorId e1 = *writes.first;
      TensorEdge te = in[e];
      te.role = TensorRole::kKv;
      te.kv = KvStore{in[e2].precision.format, in[e2].precision.format == in[e1].precision.format, in[w].name, in[u].name};
      boost::add_edge(map[boost::source(e1, in)], map[v], std::move(te), out);
    }
  }
  return out;
}

bool value_equivalent(const TensorEdge& train, const TensorEdge& inference, std::string* reason) {
  const TensorPrecision& a = train.precision;
  const TensorPrecision& b = inference.precision;
  const bool train_lossy = train.kv && !train.kv->lossless;
  const bool inf_lossy = inference.kv && !inference.kv->lossless;
  if (inf_lossy && !(train_lossy && train.kv->format == inference.kv->format)) {
    if (reason) {
      *reason = fmt::format("KV cache stores {} values; training never stores this {}: it reads it as {}",
                            inference.kv->format.str(), inference.tensor, a.format.str());
    }
    return false;
  }
  if (train_lossy && !inf_lossy) {
    if (reason) {
      *reason = fmt::format("training stores this {} as {} (emulated KV cache); the rollout keeps {}", inference.tensor,
                            train.kv->format.str(), inference.kv ? inference.kv->format.str() : b.format.str());
    }
    return false;
  }
  if (a.format != b.format) {
    if (reason) *reason = format_reason(a.format, b.format, inference.role);
    return false;
  }
  if (a.accumulate != b.accumulate) {
    if (reason) {
      *reason = fmt::format("accumulate differs: training {}, rollout {}", traits(a.accumulate).name, traits(b.accumulate).name);
    }
    return false;
  }
  return true;
}

VerifyResult verify(const PrecisionGraph& training_in, const PrecisionGraph& inference, const VerifyOptions& options) {
  VerifyResult r;
  r.train_vertices = boost::num_vertices(training_in);
  r.train_edges = boost::num_edges(training_in);
  r.infer_vertices = boost::num_vertices(inference);
  r.infer_edges = boost::num_edges(inference);
  const PrecisionGraph inf = contract_kv_cache(inference);
  const std::size_t n = boost::num_vertices(inf);
  // A training graph with KV-cache operators (one that emulates the rollout's cache) is contracted
  // the same way; the usual training graph has none and is used as is. The contracted graph is
  // initialised from contract_kv_cache's result, not assigned: Boost 1.74's adjacency_list has no
  // move assignment, so an assignment would copy it.
  bool training_has_kv = false;
  for (OpId v = 0; v < boost::num_vertices(training_in) && !training_has_kv; ++v) {
    training_has_kv = training_in[v].kind == OpKind::kKvWrite || training_in[v].kind == OpKind::kKvRead;
  }
  const PrecisionGraph train_contracted = training_has_kv ? contract_kv_cache(training_in) : PrecisionGraph{};
  const PrecisionGraph& training = training_has_kv ? train_contracted : training_in;

  if (!options.force_vf2) {
    std::unordered_map<std::string_view, OpId> train_index, inf_index;
    if (names_unique(training, &train_index) && names_unique(inf, &inf_index)) {
      std::vector<OpId> map(n, kNone);
      bool complete = true;
      for (OpId v = 0; v < n; ++v) {
        const auto it = train_index.find(inf[v].name);
        if (it != train_index.end()) map[v] = it->second;
        complete = complete && it != train_index.end() && training[it->second].kind == inf[v].kind;
      }
      const bool same_builder = !training[boost::graph_bundle].builder.empty() &&
                                training[boost::graph_bundle].builder == inf[boost::graph_bundle].builder;
      if (complete || same_builder) {
        r.method = MatchMethod::kNameAnchored;
        r.mismatches = compare(training, inf, map);
        r.consistent = r.mismatches.empty();
        return r;
      }
      r.note = "operator names differ between the graphs";
    } else {
      r.note = "operator names are not unique";
    }
  }

  r.method = MatchMethod::kVf2;
  std::vector<OpId> map;
  const Vf2Outcome structural = run_vf2(inf, training, false, options.vf2_budget_s, &map);
  if (structural == Vf2Outcome::kTimeout) {
    r.note = fmt::format("VF2 found no embedding within {:g} s", options.vf2_budget_s);
    r.mismatches.push_back(
        Mismatch{"(graph)",
                 OpKind::kParameter,
                 "",
                 TensorRole::kActivation,
                 "-",
                 "-",
                 fmt::format("undecided: VF2 search exceeded its {:g} s budget; give operators names shared by both graphs "
                             "(name-anchored pass) or layer indices",
                             options.vf2_budget_s),
                 -1,
                 "",
                 "",
                 {}});
    return r;
  }
  if (structural == Vf2Outcome::kNone) {
    r.note = "the inference graph does not embed into the training graph";
    r.mismatches = explain_no_embedding(training, inf);
    return r;
  }
  r.mismatches = compare(training, inf, map);
  if (!r.mismatches.empty()) {
    // Another embedding (e.g. experts permuted) may match precisions where the first did not.
    std::vector<OpId> precise_map;
    if (run_vf2(inf, training, true, std::min(1.0, options.vf2_budget_s), &precise_map) == Vf2Outcome::kFound) {
      r.mismatches.clear();
    }
  }
  r.consistent = r.mismatches.empty();
  return r;
}

VerifyResult verify_recipes(const ModelArch& arch, const Recipe& training, const Recipe& rollout) {
  const PrecisionGraph t = build_precision_graph(arch, training, GraphSide::kTraining);
  const PrecisionGraph i = build_precision_graph(arch, rollout, GraphSide::kInference);
  return verify(t, i);
}

std::vector<MismatchGroup> group_mismatches(const std::vector<Mismatch>& mismatches) {
  std::vector<MismatchGroup> groups;
  std::map<std::string, std::size_t> index;
  for (const Mismatch& m : mismatches) {
    const std::string key = fmt::format("{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}", op_kind_name(m.kind), m.tensor, role_name(m.role),
                                        m.train, m.inference, m.reason);
    const auto [it, fresh] = index.emplace(key, groups.size());
    if (fresh) groups.push_back(MismatchGroup{m.kind, m.tensor, m.role, m.train, m.inference, m.reason, 0, m.op});
    ++groups[it->second].count;
  }
  return groups;
}

}  // namespace rlsim::models
