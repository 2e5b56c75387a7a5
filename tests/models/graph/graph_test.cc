// Precision-flow graphs (models/graph): builder structure, the seven cases of issue 5 from their
// scenario files with exactly the stated mismatch sets, the VF2 path against the name-anchored
// pass, extra operators, GraphML round trips and errors, DOT marks.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <sstream>

#include "analysis/report.h"
#include "models/graph/build.h"
#include "models/graph/io.h"
#include "models/graph/verify.h"
#include "sim/scenario/scenario.h"
#include "tests/models/graph/tiny_archs.h"

namespace rlsim::models {
namespace {

namespace fs = std::filesystem;
using Slot = std::pair<std::string, std::string>;  // (operator, tensor)

std::set<Slot> slots(const VerifyResult& r) {
  std::set<Slot> s;
  for (const auto& m : r.mismatches) s.emplace(m.op, m.tensor);
  return s;
}

VerifyResult verify_scenario(const std::string& file) {
  const sim::Scenario s = sim::load_scenario((fs::path(RLSIM_SOURCE_DIR) / "scenarios" / file).string());
  return verify_recipes(s.model, s.training.precision, analysis::rollout_recipe(s));
}

const char* kDenseLinears[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                               "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

using tiny_archs::tiny_dense;
using tiny_archs::tiny_moe;

Recipe with_kv(Recipe r, const Format& kv) {
  r.kv_cache = kv;
  return r;
}

// ---- builder ------------------------------------------------------------------------------------

TEST(PrecisionGraphBuild, DenseInferenceOperatorCount) {
  const ModelArch a = sim::catalog_model("qwen3-8b");
  const PrecisionGraph g = build_precision_graph(a, builtin_recipe("bf16"), GraphSide::kInference);
  // Per layer: 2 rmsnorm + 2 norm weights, q/k/v/o + 4 weights, 2 rope, scores, softmax, attn_value,
  // 2 KV writes + 2 KV reads, 2 residual adds, gate/up/down + 3 weights, act_fn = 30. Outside the
  // layers: embed_tokens + weight, norm + weight, lm_head + weight, log_softmax = 7.
  EXPECT_EQ(boost::num_vertices(g), 36u * 30 + 7);
  std::size_t kv_writes = 0;
  for (OpId v = 0; v < boost::num_vertices(g); ++v) kv_writes += g[v].kind == OpKind::kKvWrite;
  EXPECT_EQ(kv_writes, 72u);
  EXPECT_EQ(g[boost::graph_bundle].builder, "rlsim");
}

TEST(PrecisionGraphBuild, TrainingHasBackwardAndNoKvCache) {
  const ModelArch a = tiny_moe();
  const PrecisionGraph fwd = build_precision_graph(a, builtin_recipe("bf16"), GraphSide::kTraining, GraphOptions{false});
  const PrecisionGraph g = build_precision_graph(a, builtin_recipe("bf16"), GraphSide::kTraining);
  std::size_t ops = 0, linears = 0, dgrad = 0, wgrad = 0, kv = 0;
  for (OpId v = 0; v < boost::num_vertices(fwd); ++v) {
    ops += fwd[v].kind != OpKind::kParameter;
    linears += is_linear_like(fwd[v].kind);
  }
  for (OpId v = 0; v < boost::num_vertices(g); ++v) {
    dgrad += g[v].kind == OpKind::kDgrad;
    wgrad += g[v].kind == OpKind::kWgrad;
    kv += g[v].kind == OpKind::kKvWrite || g[v].kind == OpKind::kKvRead;
  }
  EXPECT_EQ(dgrad, ops);      // one per forward operator
  EXPECT_EQ(wgrad, linears);  // one per linear-like operator
  EXPECT_EQ(kv, 0u);
  // Linear-like: 2 layers x 4 attention + layer 0 dense 3 + layer 1: router + 4 experts x 3 + shared 3, lm_head.
  EXPECT_EQ(linears, 8u + 3 + 1 + 12 + 3 + 1);
  // Every wgrad reads its saved input, one gradient and writes one weight gradient.
  for (OpId v = 0; v < boost::num_vertices(g); ++v) {
    if (g[v].kind != OpKind::kWgrad) continue;
    std::size_t inputs = 0, grads = 0;
    for (const TensorId e : boost::make_iterator_range(boost::in_edges(v, g))) {
      inputs += g[e].tensor == "input";
      grads += g[e].role == TensorRole::kGradient;
    }
    EXPECT_EQ(inputs, 1u) << g[v].name;
    EXPECT_GE(grads, 1u) << g[v].name;
    EXPECT_EQ(boost::out_degree(v, g), 1u) << g[v].name;
  }
}

TEST(PrecisionGraphBuild, EdgePrecisionFollowsTheRecipe) {
  const ModelArch a = tiny_dense();
  const PrecisionGraph g = build_precision_graph(a, builtin_recipe("int4-qat-g32"), GraphSide::kTraining, GraphOptions{false});
  bool seen = false;
  for (const TensorId e : boost::make_iterator_range(boost::edges(g))) {
    if (g[boost::target(e, g)].name != "layers.1.mlp.down_proj") continue;
    const TensorPrecision& p = g[e].precision;
    if (g[e].tensor == "weight") {
      seen = true;
      EXPECT_EQ(p.format.str(), "int4/group32");
      EXPECT_EQ(p.mode, QuantMode::kFake);
      EXPECT_EQ(p.storage, Element::kBf16);
      EXPECT_EQ(p.compute, ComputeType::kBf16);
      EXPECT_EQ(p.str(), "int4/group32 (fake)");
    } else {
      EXPECT_EQ(p.format.str(), "bf16");
    }
  }
  EXPECT_TRUE(seen);
}

// ---- value equivalence --------------------------------------------------------------------------

TEST(ValueEquivalence, FakeInt4EqualsRealInt4) {
  const Format int4 = parse_format("int4/group32");
  TensorEdge fake{
      "weight", TensorRole::kWeight, {int4, QuantMode::kFake, Element::kBf16, ComputeType::kBf16, Element::kFp32}, {}};
  TensorEdge real{
      "weight", TensorRole::kWeight, {int4, QuantMode::kReal, Element::kInt4, ComputeType::kBf16, Element::kFp32}, {}};
  EXPECT_TRUE(value_equivalent(fake, real, nullptr));
  std::string why;
  real.precision.accumulate = Element::kFp16;
  EXPECT_FALSE(value_equivalent(fake, real, &why));
  EXPECT_NE(why.find("accumulate"), std::string::npos) << why;
  real.precision.accumulate = Element::kFp32;
  real.precision.format = parse_format("int4/group128");
  EXPECT_FALSE(value_equivalent(fake, real, &why));
  EXPECT_NE(why.find("different scaling"), std::string::npos) << why;
}

// ---- the seven cases, from their scenario files -------------------------------------------------

TEST(UnifiedPrecisionCases, Bf16BothSidesIsConsistent) {
  const VerifyResult r = verify_scenario("verify-qwen3-8b-bf16.yaml");
  EXPECT_TRUE(r.consistent);
  EXPECT_TRUE(r.mismatches.empty());
  EXPECT_EQ(r.method, MatchMethod::kNameAnchored);
}

TEST(UnifiedPrecisionCases, Bf16TrainingFp8BlockRolloutBreaksEveryLinearInputAndWeight) {
  const VerifyResult r = verify_scenario("verify-qwen3-8b-bf16-train-fp8-block-rollout.yaml");
  EXPECT_FALSE(r.consistent);
  std::set<Slot> want;
  for (int i = 0; i < 36; ++i) {
    for (const char* l : kDenseLinears) {
      want.emplace(fmt::format("layers.{}.{}", i, l), "input");
      want.emplace(fmt::format("layers.{}.{}", i, l), "weight");
    }
  }
  EXPECT_EQ(slots(r), want);
  EXPECT_EQ(r.mismatches.size(), want.size());
  for (const auto& m : r.mismatches) {
    EXPECT_EQ(m.kind, OpKind::kLinear);
    EXPECT_EQ(m.train, "bf16");
    EXPECT_EQ(m.inference, m.tensor == "input" ? "fp8-e4m3/group1x128" : "fp8-e4m3/block128x128");
    EXPECT_EQ(m.role, m.tensor == "input" ? TensorRole::kActivation : TensorRole::kWeight);
  }
}

TEST(UnifiedPrecisionCases, JetRlFp8BlockBothSidesIsConsistent) {
  EXPECT_TRUE(verify_scenario("verify-qwen3-8b-jet-rl-fp8-block.yaml").consistent);
}

TEST(UnifiedPrecisionCases, Int4QatIsConsistentPostTrainingInt4IsNot) {
  EXPECT_TRUE(verify_scenario("verify-qwen3-8b-int4-qat.yaml").consistent);
  const VerifyResult r = verify_scenario("verify-qwen3-8b-bf16-train-int4-rollout.yaml");
  EXPECT_FALSE(r.consistent);
  std::set<Slot> want;
  for (int i = 0; i < 36; ++i) {
    for (const char* l : kDenseLinears) want.emplace(fmt::format("layers.{}.{}", i, l), "weight");
  }
  EXPECT_EQ(slots(r), want);
  EXPECT_EQ(r.mismatches.size(), want.size());
  for (const auto& m : r.mismatches) EXPECT_EQ(m.inference, "int4/group32");
}

TEST(UnifiedPrecisionCases, Fp8KvCacheInRolloutBreaksOnlyTheKvEdges) {
  const VerifyResult r = verify_scenario("verify-qwen3-8b-fp8-block-fp8-kv.yaml");
  EXPECT_FALSE(r.consistent);
  std::set<Slot> want;
  for (int i = 0; i < 36; ++i) {
    want.emplace(fmt::format("layers.{}.self_attn.scores", i), "key");
    want.emplace(fmt::format("layers.{}.self_attn.attn_value", i), "value");
  }
  EXPECT_EQ(slots(r), want);
  EXPECT_EQ(r.mismatches.size(), want.size());
  for (const auto& m : r.mismatches) {
    EXPECT_EQ(m.role, TensorRole::kKv);
    EXPECT_EQ(m.train, "bf16");
    EXPECT_EQ(m.inference, "fp8-e4m3/tensor");
    EXPECT_NE(m.reason.find("KV cache"), std::string::npos) << m.reason;
  }
}

TEST(UnifiedPrecisionCases, Mxfp8BothSidesIsConsistent) {
  EXPECT_TRUE(verify_scenario("verify-ascend-950dt-qwen3-8b-mxfp8.yaml").consistent);
}

TEST(UnifiedPrecisionCases, MoeRouterPrecisionDiffersOnlyOnTheRouter) {
  const VerifyResult r = verify_scenario("verify-qwen3-30b-a3b-router-fp32.yaml");
  EXPECT_FALSE(r.consistent);
  std::set<Slot> want;
  for (int i = 0; i < 48; ++i) {
    want.emplace(fmt::format("layers.{}.mlp.gate", i), "input");
    want.emplace(fmt::format("layers.{}.mlp.gate", i), "weight");
  }
  EXPECT_EQ(slots(r), want);
  EXPECT_EQ(r.mismatches.size(), want.size());
  for (const auto& m : r.mismatches) {
    EXPECT_EQ(m.kind, OpKind::kRouter);
    EXPECT_EQ(m.train, "fp32");
    EXPECT_EQ(m.inference, "bf16");
  }
}

// ---- MLA (DeepSeek-V3): latent KV cache, experts as vertices -------------------------------------

TEST(UnifiedPrecisionMla, Fp8LatentCacheBreaksLatentAndRopeKeyEdges) {
  const ModelArch a = sim::catalog_model("deepseek-v3");
  const Recipe fp8 = builtin_recipe("fp8-block");
  const VerifyResult r = verify_recipes(a, fp8, with_kv(fp8, parse_format("fp8-e4m3/tensor")));
  std::set<Slot> want;
  for (int i = 0; i < a.layers; ++i) {
    want.emplace(fmt::format("layers.{}.self_attn.kv_b_proj", i), "input");
    want.emplace(fmt::format("layers.{}.self_attn.scores", i), "key_rope");
  }
  EXPECT_EQ(slots(r), want);
  EXPECT_EQ(r.mismatches.size(), want.size());
}

TEST(UnifiedPrecisionMla, Bf16TrainingFp8RolloutCountsEveryExpertLinear) {
  const ModelArch a = sim::catalog_model("deepseek-v3");
  const VerifyResult r = verify_recipes(a, builtin_recipe("bf16"), builtin_recipe("fp8-block"));
  // 5 attention linears per layer (q_a, q_b, kv_a, kv_b, o) in 61 layers, 3 dense FFN linears in
  // 3 layers, (256 routed + 1 shared) x 3 linears in 58 MoE layers; input and weight each.
  EXPECT_EQ(r.mismatches.size(), 2u * (61 * 5 + 3 * 3 + 58 * 257 * 3));
  for (const auto& m : r.mismatches) {
    EXPECT_TRUE(m.kind == OpKind::kLinear || m.kind == OpKind::kExpertLinear) << m.op;
  }
}

// ---- VF2 against the name-anchored pass ---------------------------------------------------------

/// The graph with every operator renamed, and no builder tag: names no longer anchor.
PrecisionGraph renamed(PrecisionGraph g, const std::string& prefix) {
  for (OpId v = 0; v < boost::num_vertices(g); ++v) g[v].name = prefix + g[v].name;
  g[boost::graph_bundle].builder.clear();
  return g;
}

std::multiset<std::string> summary(const VerifyResult& r) {
  std::multiset<std::string> s;
  for (const auto& m : r.mismatches) {
    s.insert(fmt::format("{}|{}|{}|{}|{}|{}", op_kind_name(m.kind), m.tensor, m.layer, m.train, m.inference, m.reason));
  }
  return s;
}

TEST(Vf2, AgreesWithNameAnchoredPassOnRenamedGraphs) {
  struct Case {
    ModelArch arch;
    const char* train;
    Recipe rollout;
  };
  Recipe router_fp8 = builtin_recipe("bf16");
  router_fp8.router = {parse_format("fp8-e4m3/tensor"), parse_format("fp8-e4m3/token"), Element::kFp32};
  const std::vector<Case> cases{
      {tiny_dense(), "bf16", builtin_recipe("bf16")},
      {tiny_dense(), "bf16", builtin_recipe("fp8-block")},
      {tiny_dense(), "fp8-block", with_kv(builtin_recipe("fp8-block"), parse_format("fp8-e4m3/tensor"))},
      {tiny_moe(), "int4-qat-g32", builtin_recipe("int4-w4a16-g32")},
      {tiny_moe(), "bf16", builtin_recipe("nvfp4")},
      {tiny_moe(), "bf16", router_fp8},
  };
  for (const Case& c : cases) {
    const PrecisionGraph t = build_precision_graph(c.arch, builtin_recipe(c.train), GraphSide::kTraining);
    const PrecisionGraph i = build_precision_graph(c.arch, c.rollout, GraphSide::kInference);
    const VerifyResult anchored = verify(t, i);
    ASSERT_EQ(anchored.method, MatchMethod::kNameAnchored);
    const VerifyResult vf2 = verify(renamed(t, "model."), renamed(i, "engine."));
    EXPECT_EQ(vf2.method, MatchMethod::kVf2);
    EXPECT_EQ(vf2.consistent, anchored.consistent) << c.arch.name << " " << c.train << " / " << c.rollout.name;
    EXPECT_EQ(summary(vf2), summary(anchored)) << c.arch.name << " " << c.train << " / " << c.rollout.name;
    VerifyOptions force;
    force.force_vf2 = true;
    EXPECT_EQ(summary(verify(t, i, force)), summary(anchored));
  }
}

// ---- an inference operator absent from training -------------------------------------------------

/// The inference graph with an extra operator: a logit soft-cap the trainer does not apply.
PrecisionGraph with_extra_operator(const PrecisionGraph& g) {
  PrecisionGraph out = g;
  OpId scores = 0, softmax = 0;
  for (OpId v = 0; v < boost::num_vertices(out); ++v) {
    if (out[v].name == "layers.0.self_attn.scores") scores = v;
    if (out[v].name == "layers.0.self_attn.softmax") softmax = v;
  }
  boost::remove_edge(scores, softmax, out);
  const OpId cap = boost::add_vertex(OpVertex{"layers.0.self_attn.logit_softcap", OpKind::kResidualAdd, 0}, out);
  const TensorPrecision fp32{Format{Element::kFp32, {}}, QuantMode::kReal, Element::kFp32, ComputeType::kFp32, Element::kFp32};
  boost::add_edge(scores, cap, TensorEdge{"input", TensorRole::kActivation, fp32, {}}, out);
  boost::add_edge(cap, softmax, TensorEdge{"input", TensorRole::kActivation, fp32, {}}, out);
  return out;
}

TEST(ExtraOperator, ReportedByNameAnchoredPassAndByVf2) {
  const ModelArch a = tiny_dense();
  const PrecisionGraph t = build_precision_graph(a, builtin_recipe("bf16"), GraphSide::kTraining);
  const PrecisionGraph i = with_extra_operator(build_precision_graph(a, builtin_recipe("bf16"), GraphSide::kInference));
  for (const bool same_builder : {true, false}) {
    PrecisionGraph inf = i;
    if (!same_builder) inf[boost::graph_bundle].builder.clear();
    const VerifyResult r = verify(t, inf);
    EXPECT_EQ(r.method, same_builder ? MatchMethod::kNameAnchored : MatchMethod::kVf2);
    EXPECT_FALSE(r.consistent);
    ASSERT_EQ(r.mismatches.size(), 1u) << r.note;
    EXPECT_EQ(r.mismatches[0].op, "layers.0.self_attn.logit_softcap");
    EXPECT_EQ(r.mismatches[0].train, "absent");
    EXPECT_NE(r.mismatches[0].reason.find("absent from the training graph"), std::string::npos);
  }
}

TEST(ExtraOperator, KindsWithoutSharedNamesAreCounted) {
  const ModelArch a = tiny_dense();
  const PrecisionGraph t = renamed(build_precision_graph(a, builtin_recipe("bf16"), GraphSide::kTraining), "t.");
  const PrecisionGraph i =
      renamed(with_extra_operator(build_precision_graph(a, builtin_recipe("bf16"), GraphSide::kInference)), "i.");
  const VerifyResult r = verify(t, i);
  EXPECT_FALSE(r.consistent);
  ASSERT_EQ(r.mismatches.size(), 1u);
  EXPECT_EQ(r.mismatches[0].kind, OpKind::kResidualAdd);
  EXPECT_NE(r.mismatches[0].reason.find("inference has 5 residual_add operators, training 4"), std::string::npos)
      << r.mismatches[0].reason;
}

// ---- KV-cache contraction -----------------------------------------------------------------------

TEST(KvContraction, ReplacesEachStoreByOneEdgeAndRejectsDanglingReads) {
  const ModelArch a = tiny_dense();
  const PrecisionGraph i =
      build_precision_graph(a, with_kv(builtin_recipe("bf16"), parse_format("fp8-e4m3/tensor")), GraphSide::kInference);
  const PrecisionGraph c = contract_kv_cache(i);
  EXPECT_EQ(boost::num_vertices(c), boost::num_vertices(i) - 2 * 2 * 2);  // 2 layers x (K, V) x (write, read)
  EXPECT_EQ(boost::num_edges(c), boost::num_edges(i) - 2 * 2 * 2);        // 3 edges become 1 per store
  std::size_t lossy = 0;
  for (const TensorId e : boost::make_iterator_range(boost::edges(c))) lossy += c[e].kv && !c[e].kv->lossless;
  EXPECT_EQ(lossy, 4u);

  // A trainer that emulates the same FP8 cache (a graph with the same stores) matches; one that
  // stores in BF16 does not.
  EXPECT_TRUE(verify(i, i).consistent);
  const PrecisionGraph bf16_cache = build_precision_graph(a, builtin_recipe("bf16"), GraphSide::kInference);
  const VerifyResult r = verify(bf16_cache, i);
  EXPECT_EQ(r.mismatches.size(), 4u);
  EXPECT_EQ(verify(i, bf16_cache).mismatches.size(), 4u);
  EXPECT_TRUE(verify(bf16_cache, bf16_cache).consistent);

  PrecisionGraph broken = i;
  const OpId read = boost::add_vertex(OpVertex{"orphan.read", OpKind::kKvRead, 0}, broken);
  boost::add_edge(read, 0, TensorEdge{"input", TensorRole::kKv, {}, {}}, broken);
  EXPECT_THROW(contract_kv_cache(broken), GraphError);
}

// ---- GraphML ------------------------------------------------------------------------------------

TEST(GraphMl, RoundTripKeepsEveryAttributeAndTheVerdict) {
  const ModelArch a = tiny_moe();
  const PrecisionGraph t = build_precision_graph(a, builtin_recipe("int4-qat-g32"), GraphSide::kTraining);
  const PrecisionGraph i =
      build_precision_graph(a, with_kv(builtin_recipe("nvfp4"), parse_format("fp8-e4m3/tensor")), GraphSide::kInference);
  for (const PrecisionGraph* g : {&t, &i}) {
    std::stringstream xml;
    write_graphml(xml, *g);
    const PrecisionGraph back = read_graphml(xml, "mem.graphml");
    ASSERT_EQ(boost::num_vertices(back), boost::num_vertices(*g));
    ASSERT_EQ(boost::num_edges(back), boost::num_edges(*g));
    EXPECT_EQ(back[boost::graph_bundle].builder, "rlsim");
    EXPECT_EQ(back[boost::graph_bundle].side, (*g)[boost::graph_bundle].side);
    for (OpId v = 0; v < boost::num_vertices(back); ++v) {
      EXPECT_EQ(back[v].name, (*g)[v].name);
      EXPECT_EQ(back[v].kind, (*g)[v].kind);
      EXPECT_EQ(back[v].layer, (*g)[v].layer);
    }
    auto ea = boost::edges(*g);
    auto eb = boost::edges(back);
    for (; ea.first != ea.second; ++ea.first, ++eb.first) {
      EXPECT_EQ(boost::source(*ea.first, *g), boost::source(*eb.first, back));
      EXPECT_EQ(boost::target(*ea.first, *g), boost::target(*eb.first, back));
      EXPECT_EQ((*g)[*ea.first].tensor, back[*eb.first].tensor);
      EXPECT_EQ((*g)[*ea.first].role, back[*eb.first].role);
      EXPECT_EQ((*g)[*ea.first].precision, back[*eb.first].precision);
    }
  }
  std::stringstream xt, xi;
  write_graphml(xt, t);
  write_graphml(xi, i);
  EXPECT_EQ(summary(verify(read_graphml(xt, "t"), read_graphml(xi, "i"))), summary(verify(t, i)));
}

std::string graphml_error(const std::string& xml) {
  std::istringstream in(xml);
  try {
    read_graphml(in, "dump.graphml");
  } catch (const GraphError& e) {
    return e.what();
  }
  return "(no error)";
}

constexpr const char* kHead = R"(<?xml version="1.0"?>
<graphml xmlns="http://graphml.graphdrawing.org/xmlns">
  <key id="n" for="node" attr.name="name" attr.type="string"/>
  <key id="k" for="node" attr.name="kind" attr.type="string"/>
  <key id="t" for="edge" attr.name="tensor" attr.type="string"/>
  <key id="r" for="edge" attr.name="role" attr.type="string"/>
  <key id="f" for="edge" attr.name="format" attr.type="string"/>
)";

TEST(GraphMl, BadInputNamesTheFileAndTheElement) {
  const std::string ok_nodes = R"(<graph edgedefault="directed">
    <node id="a"><data key="n">x.weight</data><data key="k">parameter</data></node>
    <node id="b"><data key="n">x</data><data key="k">linear</data></node>
)";
  const std::string edge =
      R"(<edge source="a" target="b"><data key="t">weight</data><data key="r">weight</data><data key="f">FMT</data></edge>
  </graph></graphml>)";
  auto with_format = [&](const std::string& f) {
    std::string e = edge;
    e.replace(e.find("FMT"), 3, f);
    return std::string(kHead) + ok_nodes + e;
  };
  std::istringstream good(with_format("fp8-e4m3/block128x128"));
  const PrecisionGraph g = read_graphml(good, "dump.graphml");
  EXPECT_EQ(boost::num_edges(g), 1u);
  EXPECT_EQ(g[*boost::edges(g).first].precision.compute, ComputeType::kFp8);  // default: the element's native type

  EXPECT_NE(graphml_error(with_format("fp8-e4m3/blokc128x128")).find("dump.graphml: edge #0 ('x.weight' -> 'x'): format"),
            std::string::npos);
  std::string bad_kind = with_format("bf16");
  bad_kind.replace(bad_kind.find(">linear<"), 8, ">linaer<");
  EXPECT_NE(graphml_error(bad_kind).find("dump.graphml: node #1 ('x'): unknown kind 'linaer'"), std::string::npos);
  std::string no_role = with_format("bf16");
  no_role.replace(no_role.find(R"(<data key="r">weight</data>)"), 27, "");
  EXPECT_NE(graphml_error(no_role).find("missing attribute 'role'"), std::string::npos) << graphml_error(no_role);
  std::string extra = with_format("bf16");
  extra.replace(extra.find("<graph "), 0, R"(<key id="z" for="edge" attr.name="dtpye" attr.type="string"/>)");
  extra.replace(extra.find("</edge>"), 0, R"(<data key="z">x</data>)");
  EXPECT_NE(graphml_error(extra).find("unknown GraphML attribute 'dtpye'"), std::string::npos) << graphml_error(extra);
  std::string undirected = with_format("bf16");
  undirected.replace(undirected.find("directed"), 8, "undirected");
  EXPECT_NE(graphml_error(undirected).find("must be directed"), std::string::npos) << graphml_error(undirected);
  EXPECT_NE(graphml_error("<graphml><graph").find("dump.graphml: not a readable GraphML graph"), std::string::npos);
}

// ---- DOT ----------------------------------------------------------------------------------------

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Dot, CollapsesIdenticalLayersAndMarksMismatchesInRed) {
  const ModelArch a = sim::catalog_model("qwen3-8b");
  const PrecisionGraph t = build_precision_graph(a, builtin_recipe("bf16"), GraphSide::kTraining);
  const PrecisionGraph i = build_precision_graph(a, builtin_recipe("fp8-block"), GraphSide::kInference);
  const VerifyResult r = verify(t, i);
  std::ostringstream collapsed, full, train;
  write_dot(collapsed, i, mismatch_marks(r.mismatches, false));
  write_dot(full, i, mismatch_marks(r.mismatches, false), DotOptions{true, ""});
  write_dot(train, t, mismatch_marks(r.mismatches, true));
  EXPECT_NE(collapsed.str().find("layers.{0-35}.self_attn.q_proj"), std::string::npos);
  EXPECT_EQ(collapsed.str().find("layers.35."), std::string::npos);
  EXPECT_EQ(count(collapsed.str(), " color=red"), 14u);  // 7 linears x (input, weight), once for all layers
  EXPECT_EQ(count(full.str(), " color=red"), 504u);
  // Training: the last layer's output has one consumer (the final norm), the others two (the next
  // layer's norm and residual add), so its backward differs and it is drawn apart.
  EXPECT_NE(train.str().find("layers.{0-34}.self_attn.q_proj.wgrad"), std::string::npos);
  EXPECT_NE(train.str().find("layers.35.self_attn.q_proj.wgrad"), std::string::npos);
  EXPECT_EQ(count(train.str(), " color=red"), 28u);
  EXPECT_EQ(collapsed.str().rfind("digraph", 0), 0u);

  const PrecisionGraph m = build_precision_graph(tiny_moe(), builtin_recipe("bf16"), GraphSide::kInference);
  std::ostringstream moe;
  write_dot(moe, m, {});
  EXPECT_NE(moe.str().find("layers.1.mlp.experts.*.gate_proj\\nexpert_linear (x4)"), std::string::npos);
  EXPECT_NE(moe.str().find("layers.0.mlp.gate_proj"), std::string::npos);  // the dense layer stays apart
}

// A GraphML graph need not name its layer operators "layers.<n>....": a framework's dump says
// "model.layers.0.mlp.up_proj" (found by tests/fuzz/fuzz_graphml: the collapsed view looked for a
// layer placeholder such names do not have and threw std::out_of_range, an internal error).
TEST(Dot, DrawsLayerOperatorsNamedOtherwiseUnderTheirOwnNames) {
  const std::string xml = std::string(kHead) + R"(<key id="l" for="node" attr.name="layer" attr.type="int"/>
  <graph edgedefault="directed">
    <node id="a"><data key="n">model.layers.0.mlp.up_proj.weight</data><data key="k">parameter</data><data key="l">0</data></node>
    <node id="b"><data key="n">model.layers.0.mlp.up_proj</data><data key="k">linear</data><data key="l">0</data></node>
    <node id="c"><data key="n">layers.1#.mlp.up_proj</data><data key="k">linear</data><data key="l">1</data></node>
    <edge source="a" target="b"><data key="t">weight</data><data key="r">weight</data><data key="f">bf16</data></edge>
    <edge source="b" target="c"><data key="t">input</data><data key="r">activation</data><data key="f">bf16</data></edge>
  </graph></graphml>)";
  std::istringstream in(xml);
  const PrecisionGraph g = read_graphml(in, "dump.graphml");
  std::ostringstream dot;
  ASSERT_NO_THROW(write_dot(dot, g, {}));
  EXPECT_NE(dot.str().find("model.layers.0.mlp.up_proj\\nlinear"), std::string::npos) << dot.str();
  EXPECT_NE(dot.str().find("layers.1#.mlp.up_proj\\nlinear"), std::string::npos) << dot.str();
}

}  // namespace
}  // namespace rlsim::models
