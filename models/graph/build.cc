#include "models/graph/build.h"

#include <fmt/format.h>

#include <string>
#include <vector>

namespace rlsim::models {
namespace {

constexpr OpId kNone = static_cast<OpId>(-1);

TensorPrecision plain(Element e, ComputeType compute = ComputeType::kFp32) {
  return TensorPrecision{Format{e, {}}, QuantMode::kReal, e, compute, Element::kFp32};
}

class Builder {
 public:
  Builder(PrecisionGraph& g, const ModelArch& a, const Recipe& r, GraphSide side)
      : g_(g), a_(a), r_(r), inference_(side == GraphSide::kInference), hidden_(r.hidden_element()) {}

  void forward() {
    const OpId embed_w = param("embed_tokens");
    const OpId embed = op("embed_tokens", OpKind::kEmbedding, -1);
    edge(embed_w, embed, "weight", TensorRole::kWeight,
         TensorPrecision{r_.embedding, QuantMode::kReal, r_.embedding.element, ComputeType::kFp32, Element::kFp32});
    OpId h = embed;
    for (int i = 0; i < a_.layers; ++i) h = layer(i, h);
    const OpId nf = norm("norm", -1, h);
    const OpId head_w = a_.tied_embeddings ? embed_w : param("lm_head");
    const OpId head = linear("lm_head", OpKind::kLmHead, -1, nf, r_.lm_head, head_w);
    const OpId logp = op("log_softmax", OpKind::kLogSoftmax, -1);
    edge(head, logp, "logits", TensorRole::kActivation, plain(r_.lm_head.accumulate));
  }

  void backward() {
    const std::size_t n = boost::num_vertices(g_);
    std::vector<OpId> dgrad(n, kNone), wgrad(n, kNone);
    for (OpId v = 0; v < n; ++v) {
      const OpVertex& fv = g_[v];
      if (fv.kind == OpKind::kParameter) continue;
      const std::string name = fv.name;
      const int layer = fv.layer;
      const bool lin = is_linear_like(fv.kind);
      dgrad[v] = op(name + ".dgrad", OpKind::kDgrad, layer);
      if (lin) wgrad[v] = op(name + ".wgrad", OpKind::kWgrad, layer);
    }
    struct Fwd {
      OpId u, v;
      std::string tensor;
      TensorPrecision precision;
    };
    std::vector<Fwd> fwd;
    fwd.reserve(boost::num_edges(g_));
    for (const TensorId e : boost::make_iterator_range(boost::edges(g_))) {
      fwd.push_back({boost::source(e, g_), boost::target(e, g_), g_[e].tensor, g_[e].precision});
    }
    for (const Fwd& f : fwd) {
      const OpKind uk = g_[f.u].kind, vk = g_[f.v].kind;
      if (uk == OpKind::kParameter) {
        if (is_linear_like(vk) && f.tensor == "weight") {
          edge(f.u, dgrad[f.v], "weight", TensorRole::kWeight, f.precision);
          edge(wgrad[f.v], f.u, "weight_grad", TensorRole::kGradient, plain(Element::kFp32));
        }
        continue;
      }
      // The gradient of u's output arrives from the backward of each of its consumers.
      const TensorPrecision gp = is_linear_like(uk) ? gradient(*linear_of_[f.u]) : plain(hidden_);
      edge(dgrad[f.v], dgrad[f.u], "grad_output", TensorRole::kGradient, gp);
      if (is_linear_like(uk)) edge(dgrad[f.v], wgrad[f.u], "grad_output", TensorRole::kGradient, gp);
      // wgrad of a linear re-reads the input it saved in the forward pass.
      if (is_linear_like(vk) && f.tensor == "input") edge(f.u, wgrad[f.v], "input", TensorRole::kActivation, f.precision);
    }
  }

 private:
  OpId op(std::string name, OpKind kind, int layer) {
    const OpId v = boost::add_vertex(OpVertex{std::move(name), kind, layer}, g_);
    linear_of_.push_back(nullptr);
    return v;
  }

  void edge(OpId from, OpId to, std::string_view tensor, TensorRole role, const TensorPrecision& p) {
    boost::add_edge(from, to, TensorEdge{std::string(tensor), role, p, std::nullopt}, g_);
  }

  OpId param(const std::string& owner, int layer = -1) { return op(owner + ".weight", OpKind::kParameter, layer); }

  /// Precision of a GEMM operand in format f of linear precision lp.
  TensorPrecision operand(const Format& f, const LinearPrecision& lp) const {
    const bool q = f.quantised();
    const QuantMode mode = q ? r_.mode : QuantMode::kReal;
    const Element storage = q && mode == QuantMode::kFake ? hidden_ : f.element;
    return TensorPrecision{f, mode, storage, lp.compute(r_.mode), lp.accumulate};
  }

  TensorPrecision gradient(const LinearPrecision& lp) const {
    if (r_.mode == QuantMode::kReal && lp.activation.quantised()) return operand(lp.activation, lp);
    return plain(hidden_, compute_of(hidden_));
  }

  static ComputeType compute_of(Element e) { return traits(e).compute; }

  TensorPrecision attention_operand() const { return plain(r_.attention, compute_of(r_.attention)); }

  /// A tensor from `src` to `dst`; on the inference side it passes through the KV cache `cache`.
  void kv_edge(OpId src, OpId dst, std::string_view slot, const std::string& cache, int layer, const TensorPrecision& consumer) {
    if (!inference_) {
      edge(src, dst, slot, TensorRole::kActivation, consumer);
      return;
    }
    const OpId w = op(cache + ".write", OpKind::kKvWrite, layer);
    const OpId rd = op(cache + ".read", OpKind::kKvRead, layer);
    edge(src, w, slot, TensorRole::kKv, plain(hidden_));
    edge(w, rd, slot, TensorRole::kKv,
         TensorPrecision{r_.kv_cache, QuantMode::kReal, r_.kv_cache.element, ComputeType::kFp32, Element::kFp32});
    edge(rd, dst, slot, TensorRole::kKv, consumer);
  }

  OpId norm(const std::string& name, int layer, OpId input) {
    const OpId w = param(name, layer);
    const OpId n = op(name, OpKind::kRmsNorm, layer);
    edge(input, n, "input", TensorRole::kActivation, plain(hidden_));
    edge(w, n, "weight", TensorRole::kWeight, plain(hidden_));
    return n;
  }

  /// A linear-like operator reading `input` (or, with a cache name on the inference side, reading
  /// it back from the KV cache) and the weight `w` (created when kNone).
  OpId linear(const std::string& name, OpKind kind, int layer, OpId input, const LinearPrecision& lp, OpId w = kNone,
              const std::string& cache = {}) {
    if (w == kNone) w = param(name, layer);
    const OpId v = op(name, kind, layer);
    linear_of_[v] = &lp;
    if (cache.empty()) {
      edge(input, v, "input", TensorRole::kActivation, operand(lp.activation, lp));
    } else {
      kv_edge(input, v, "input", cache, layer, operand(lp.activation, lp));
    }
    edge(w, v, "weight", TensorRole::kWeight, operand(lp.weight, lp));
    if (a_.qkv_bias && kind == OpKind::kLinear &&
        (name.ends_with("q_proj") || name.ends_with("k_proj") || name.ends_with("v_proj"))) {
      const OpId b = op(name + ".bias", OpKind::kParameter, layer);
      edge(b, v, "bias", TensorRole::kWeight, plain(hidden_));
    }
    return v;
  }

  OpId unary(const std::string& name, OpKind kind, int layer, OpId input, const TensorPrecision& p) {
    const OpId v = op(name, kind, layer);
    edge(input, v, "input", TensorRole::kActivation, p);
    return v;
  }

  /// Attention of layer i on the normalised hidden state n; returns o_proj.
  OpId attention(int i, const std::string& p, OpId n) {
    const LinearPrecision& lp = r_.linear;
    const OpId scores = op(p + "self_attn.scores", OpKind::kAttentionScores, i);
    const OpId softmax = op(p + "self_attn.softmax", OpKind::kSoftmax, i);
    const OpId pv = op(p + "self_attn.attn_value", OpKind::kAttentionValue, i);
    if (a_.mla) {
      OpId q;
      if (a_.mla->q_lora_rank > 0) {
        const OpId qa = linear(p + "self_attn.q_a_proj", OpKind::kLinear, i, n, lp);
        const OpId qn = norm(p + "self_attn.q_a_layernorm", i, qa);
        q = linear(p + "self_attn.q_b_proj", OpKind::kLinear, i, qn, lp);
      } else {
        q = linear(p + "self_attn.q_proj", OpKind::kLinear, i, n, lp);
      }
      const OpId qr = unary(p + "self_attn.q_rope", OpKind::kRope, i, q, plain(hidden_));
      const OpId kva = linear(p + "self_attn.kv_a_proj_with_mqa", OpKind::kLinear, i, n, lp);
      const OpId kvn = norm(p + "self_attn.kv_a_layernorm", i, kva);
      const OpId kr = unary(p + "self_attn.k_rope", OpKind::kRope, i, kva, plain(hidden_));
      const OpId kvb = linear(p + "self_attn.kv_b_proj", OpKind::kLinear, i, kvn, lp, kNone, p + "self_attn.latent_cache");
      edge(qr, scores, "query", TensorRole::kActivation, attention_operand());
      edge(kvb, scores, "key", TensorRole::kActivation, attention_operand());
      kv_edge(kr, scores, "key_rope", p + "self_attn.k_rope_cache", i, attention_operand());
      edge(kvb, pv, "value", TensorRole::kActivation, attention_operand());
    } else {
      const OpId q = linear(p + "self_attn.q_proj", OpKind::kLinear, i, n, lp);
      const OpId k = linear(p + "self_attn.k_proj", OpKind::kLinear, i, n, lp);
      const OpId v = linear(p + "self_attn.v_proj", OpKind::kLinear, i, n, lp);
      const OpId qr = unary(p + "self_attn.q_rope", OpKind::kRope, i, q, plain(hidden_));
      const OpId kr = unary(p + "self_attn.k_rope", OpKind::kRope, i, k, plain(hidden_));
      edge(qr, scores, "query", TensorRole::kActivation, attention_operand());
      kv_edge(kr, scores, "key", p + "self_attn.k_cache", i, attention_operand());
      kv_edge(v, pv, "value", p + "self_attn.v_cache", i, attention_operand());
    }
    edge(scores, softmax, "input", TensorRole::kActivation, plain(r_.softmax));
    edge(softmax, pv, "probs", TensorRole::kActivation, attention_operand());
    return linear(p + "self_attn.o_proj", OpKind::kLinear, i, pv, lp);
  }

  /// SwiGLU FFN (dense, shared or routed expert) named `p`; returns down_proj.
  OpId swiglu(const std::string& p, OpKind kind, int i, OpId n) {
    const OpId gate = linear(p + "gate_proj", kind, i, n, r_.linear);
    const OpId up = linear(p + "up_proj", kind, i, n, r_.linear);
    const OpId act = op(p + "act_fn", OpKind::kSiluMul, i);
    edge(gate, act, "gate", TensorRole::kActivation, plain(hidden_));
    edge(up, act, "up", TensorRole::kActivation, plain(hidden_));
    return linear(p + "down_proj", kind, i, act, r_.linear);
  }

  OpId moe(int i, const std::string& p, OpId n) {
    const MoeSpec& m = *a_.moe;
    const OpId router = linear(p + "mlp.gate", OpKind::kRouter, i, n, r_.router);
    const OpId topk = op(p + "mlp.topk", OpKind::kTopK, i);
    const OpId combine = op(p + "mlp.combine", OpKind::kMoeCombine, i);
    edge(router, topk, "logits", TensorRole::kRouter, plain(r_.router.accumulate));
    edge(topk, combine, "routing_weights", TensorRole::kRouter, plain(r_.router.accumulate));
    for (int e = 0; e < m.experts; ++e) {
      const OpId down = swiglu(fmt::format("{}mlp.experts.{}.", p, e), OpKind::kExpertLinear, i, n);
      edge(down, combine, "expert_output", TensorRole::kActivation, plain(hidden_));
    }
    for (int s = 0; s < m.shared_experts; ++s) {
      const std::string sp = m.shared_experts == 1 ? p + "mlp.shared_experts." : fmt::format("{}mlp.shared_experts.{}.", p, s);
      const OpId down = swiglu(sp, OpKind::kLinear, i, n);
      edge(down, combine, "shared_output", TensorRole::kActivation, plain(hidden_));
    }
    return combine;
  }

  OpId layer(int i, OpId h) {
    const std::string p = fmt::format("layers.{}.", i);
    const OpId n1 = norm(p + "input_layernorm", i, h);
    const OpId o = attention(i, p, n1);
    const OpId r1 = op(p + "attn_residual", OpKind::kResidualAdd, i);
    edge(h, r1, "residual", TensorRole::kActivation, plain(hidden_));
    edge(o, r1, "input", TensorRole::kActivation, plain(hidden_));
    const OpId n2 = norm(p + "post_attention_layernorm", i, r1);
    const bool moe_layer = a_.moe && i >= a_.moe->dense_layers;
    const OpId out = moe_layer ? moe(i, p, n2) : swiglu(p + "mlp.", OpKind::kLinear, i, n2);
    const OpId r2 = op(p + "mlp_residual", OpKind::kResidualAdd, i);
    edge(r1, r2, "residual", TensorRole::kActivation, plain(hidden_));
    edge(out, r2, "input", TensorRole::kActivation, plain(hidden_));
    return r2;
  }

  PrecisionGraph& g_;
  const ModelArch& a_;
  const Recipe& r_;
  bool inference_;
  Element hidden_;
  std::vector<const LinearPrecision*> linear_of_;  // per vertex: its LinearPrecision when linear-like
};

}  // namespace

PrecisionGraph build_precision_graph(const ModelArch& arch, const Recipe& recipe, GraphSide side, const GraphOptions& options) {
  PrecisionGraph g;
  const bool training = side == GraphSide::kTraining;
  g[boost::graph_bundle] = GraphInfo{"rlsim", arch.name, recipe.name, training ? "training" : "inference"};
  Builder b(g, arch, recipe, side);
  b.forward();
  if (training && options.backward) b.backward();
  return g;
}

}  // namespace rlsim::models
