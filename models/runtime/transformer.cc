#include "models/runtime/transformer.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <stdexcept>

#include "models/precision/quantize.h"
#include "models/runtime/gemm.h"

namespace rlsim::models {
namespace {

// Query rows per attention task of a multi-token pass (default kernels).
constexpr Eigen::Index kAttentionRows = 64;

// The most bytes of cached keys and values a decode step reads into cache before its heads'
// passes (attention_block): half a megabyte, a quarter of the L2 of two Zen 4 cores (1 MiB each,
// AMD's Zen 4 software optimization guide) and half that of two Zen 3 cores (512 KiB each), so
// the block is still there when the heads read it. SmolLM2-135M reaches it at 341 positions.
constexpr std::size_t kDecodeWarmBytes = std::size_t{1} << 19;

bool is_fp32(const Format& f) { return f.element == Element::kFp32 && f.scaling.kind == ScaleKind::kNone; }

void round_rows(float* x, std::int64_t rows, std::int64_t cols, const Format& f, bool static_tensor_scale) {
  const std::int64_t n = rows * cols;
  if (f.scaling.kind == ScaleKind::kNone || (static_tensor_scale && f.scaling.kind == ScaleKind::kTensor)) {
    if (f.element == Element::kBf16) {
      for (std::int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
      return;
    }
    if (f.element != Element::kHif4) {
      for (std::int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(round_to(f.element, x[i]));
      return;
    }
  }
  fake_quantize(f, rows, cols, x);
}

}  // namespace

bool rows_round_independently(const Format& f, bool static_tensor_scale) {
  switch (f.scaling.kind) {
    case ScaleKind::kNone:
    case ScaleKind::kToken:
    case ScaleKind::kGroup1xN:
    case ScaleKind::kGroupN:
    case ScaleKind::kMx32:
      return true;
    case ScaleKind::kTensor:
      return static_tensor_scale;
    default:
      return false;
  }
}

void round_to_format(float* x, std::int64_t rows, std::int64_t cols, const Format& f, bool static_tensor_scale) {
  if (is_fp32(f)) return;
  constexpr std::int64_t kRowsPerTask = 16;
  if (rows > kRowsPerTask && rows * cols >= (1 << 16) && rows_round_independently(f, static_tensor_scale)) {
    const std::int64_t tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
#pragma omp parallel for schedule(static)
    for (std::int64_t t = 0; t < tasks; ++t) {
      const std::int64_t r0 = t * kRowsPerTask, nr = std::min(kRowsPerTask, rows - r0);
      round_rows(x + r0 * cols, nr, cols, f, static_tensor_scale);
    }
    return;
  }
  round_rows(x, rows, cols, f, static_tensor_scale);
}

std::vector<float> rope_inv_freq(const TransformerConfig& c) {
  std::vector<float> f(static_cast<std::size_t>(c.head_dim / 2));
  for (int j = 0; j < c.head_dim / 2; ++j) {
    f[static_cast<std::size_t>(j)] = 1.0f / std::pow(c.rope_theta, static_cast<float>(2 * j) / static_cast<float>(c.head_dim));
  }
  return f;
}

RuntimePrecision runtime_precision(std::string_view name) {
  if (name == "fp32") return RuntimePrecision{};
  try {
    return RuntimePrecision{std::string(name), builtin_recipe(name)};
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("unknown precision '{}' (expected fp32 or a recipe: {})", name, recipe_names()));
  }
}

std::string_view kernel_mode_name(KernelMode m) { return m == KernelMode::kBatchInvariant ? "batch-invariant" : "default"; }

Transformer::Transformer(const ModelWeights& w, const RuntimePrecision& p, KernelMode kernels)
    : config_(w.config), precision_name_(p.name), recipe_(p.recipe), kernels_(kernels) {
  const TransformerConfig& c = config_;
  check_moe_config(c);
  if (recipe_) {
    hidden_ = recipe_->hidden_element();
    attention_ = recipe_->attention;
    softmax_ = recipe_->softmax;
    kv_ = recipe_->kv_cache;
  }
  const Format none{Element::kFp32, {}};
  auto make = [&](std::string name, Eigen::Index rows, Eigen::Index cols, const LinearPrecision* lp) {
    return Linear{QuantizedLinear(std::move(name), lp ? lp->weight : none, rows, cols), VectorF(), lp ? lp->activation : none};
  };
  const LinearPrecision* lin = recipe_ ? &recipe_->linear : nullptr;
  const LinearPrecision* head = recipe_ ? &recipe_->lm_head : nullptr;
  const LinearPrecision* router = recipe_ ? &recipe_->router : nullptr;
  const Eigen::Index d = c.dim, qd = static_cast<Eigen::Index>(c.heads) * c.head_dim,
                     kvd = static_cast<Eigen::Index>(c.kv_heads) * c.head_dim;
  for (int i = 0; i < c.layers; ++i) {
    const std::string pre = fmt::format("layers.{}.", i);
    Layer l;
    l.q = make(pre + "q_proj", qd, d, lin);
    l.k = make(pre + "k_proj", kvd, d, lin);
    l.v = make(pre + "v_proj", kvd, d, lin);
    l.o = make(pre + "o_proj", d, qd, lin);
    if (c.experts > 0) {
      l.router = make(pre + "router", c.experts, d, router);
      l.experts = QuantizedExpertGroup(pre + "experts", lin ? lin->weight : none, c.experts, d, c.expert_hidden_dim);
      l.expert_activation = lin ? lin->activation : none;
    } else {
      l.gate = make(pre + "gate_proj", c.hidden_dim, d, lin);
      l.up = make(pre + "up_proj", c.hidden_dim, d, lin);
      l.down = make(pre + "down_proj", d, c.hidden_dim, lin);
    }
    layers_.push_back(std::move(l));
  }
  head_ = make("lm_head", c.vocab, d, head);
  // The embedding table in recipe.embedding, held and reloaded as a linear's weight; its rows are
  // looked up (embed()), never multiplied.
  embedding_ = Linear{QuantizedLinear("embed_tokens", recipe_ ? recipe_->embedding : none, c.vocab, d), VectorF(), none};
  inv_freq_ = rope_inv_freq(c);
  k_cache_.assign(static_cast<std::size_t>(c.layers), MatrixRM::Zero(c.max_seq, kvd));
  v_cache_.assign(static_cast<std::size_t>(c.layers), MatrixRM::Zero(c.max_seq, kvd));
  // A fresh load: the loader's copy, then quantise and transform.
  load_weights(w);
  process_weights_after_loading();
}

std::vector<Transformer::Linear*> Transformer::all_linears() {
  std::vector<Linear*> out;
  for (Layer& l : layers_) {
    for (Linear* p : {&l.q, &l.k, &l.v, &l.o}) out.push_back(p);
    if (config_.experts > 0) {
      out.push_back(&l.router);
    } else {
      for (Linear* p : {&l.gate, &l.up, &l.down}) out.push_back(p);
    }
  }
  out.push_back(&head_);
  out.push_back(&embedding_);
  return out;
}

namespace {

// dst = src in place (the storage of dst is kept once it exists); throws when a reload changes the shape.
template <typename M>
void copy_in_place(M& dst, const M& src, const std::string& what) {
  if (dst.size() != 0 && (dst.rows() != src.rows() || dst.cols() != src.cols())) {
    throw std::invalid_argument(fmt::format("{}: shape [{}, {}] differs from the engine's [{}, {}]", what, src.rows(), src.cols(),
                                            dst.rows(), dst.cols()));
  }
  if (dst.size() == 0) {
    dst = src;
  } else {
    std::copy(src.data(), src.data() + src.size(), dst.data());
  }
}

void check_shape(const MatrixRM& m, std::int64_t rows, std::int64_t cols, const std::string& what) {
  if (m.rows() != rows || m.cols() != cols) {
    throw std::invalid_argument(fmt::format("{}: shape [{}, {}], expected [{}, {}]", what, m.rows(), m.cols(), rows, cols));
  }
}

}  // namespace

ReloadStats Transformer::load_layer(int li, const LayerWeights& w) {
  if (li < 0 || li >= static_cast<int>(layers_.size()))
    throw std::invalid_argument(fmt::format("load_layer: layer {} of {}", li, layers_.size()));
  Layer& l = layers_[static_cast<std::size_t>(li)];
  const std::string pre = fmt::format("layers.{}.", li);
  // Nothing is written (norms and biases included) while a tensor of the layer is in the kernel layout.
  for (const Linear* p : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down, &l.router}) {
    if (p->weight.state() == WeightState::kTransformed) {
      throw WeightStateError(fmt::format(
          "{}: load called in state 'transformed': it holds the kernel layout; call restore_weights_for_loading first",
          p->weight.name()));
    }
  }
  if (config_.experts > 0 && l.experts.state() == WeightState::kTransformed) {
    throw WeightStateError(
        fmt::format("{}: load called in state 'transformed': call restore_weights_for_loading first", l.experts.name()));
  }
  ReloadStats st;
  const auto t0 = std::chrono::steady_clock::now();
  auto vec = [&](VectorF& dst, const VectorF& src, const char* what) {
    copy_in_place(dst, src, pre + what);
    st.load_bytes += 2 * static_cast<std::size_t>(src.size()) * sizeof(float);
  };
  vec(l.attn_norm, w.attn_norm, "input_layernorm");
  vec(l.ffn_norm, w.ffn_norm, "post_attention_layernorm");
  vec(l.q_norm, w.q_norm, "q_norm");
  vec(l.k_norm, w.k_norm, "k_norm");
  vec(l.q.bias, w.bq, "q_proj.bias");
  vec(l.k.bias, w.bk, "k_proj.bias");
  vec(l.v.bias, w.bv, "v_proj.bias");
  st.load_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto lin = [&](Linear& dst, const MatrixRM& m) {
    check_shape(m, dst.weight.rows(), dst.weight.cols(), dst.weight.name());
    dst.weight.load_weight(std::span<const float>(m.data(), static_cast<std::size_t>(m.size())), st);
  };
  lin(l.q, w.wq);
  lin(l.k, w.wk);
  lin(l.v, w.wv);
  lin(l.o, w.wo);
  if (config_.experts > 0) {
    lin(l.router, w.router);
    if (static_cast<int>(w.experts.size()) != config_.experts) {
      throw std::invalid_argument(fmt::format("{}experts: {} experts, expected {}", pre, w.experts.size(), config_.experts));
    }
    const std::int64_t d = config_.dim, h = config_.expert_hidden_dim;
    for (int e = 0; e < config_.experts; ++e) {
      const ExpertWeights& ew = w.experts[static_cast<std::size_t>(e)];
      const std::string en = fmt::format("{}experts.{}.", pre, e);
      check_shape(ew.w_gate, h, d, en + "gate_proj");
      check_shape(ew.w_up, h, d, en + "up_proj");
      check_shape(ew.w_down, d, h, en + "down_proj");
      auto span = [](const MatrixRM& m) { return std::span<const float>(m.data(), static_cast<std::size_t>(m.size())); };
      l.experts.load_expert(e, ExpertShard::kW1, span(ew.w_gate), st);
      l.experts.load_expert(e, ExpertShard::kW3, span(ew.w_up), st);
      l.experts.load_expert(e, ExpertShard::kW2, span(ew.w_down), st);
    }
  } else {
    lin(l.gate, w.w_gate);
    lin(l.up, w.w_up);
    lin(l.down, w.w_down);
  }
  ready_ = false;
  return st;
}

ReloadStats Transformer::load_weights(const ModelWeights& m) {
  const TransformerConfig& c = config_;
  if (static_cast<int>(m.layers.size()) != c.layers)
    throw std::invalid_argument(fmt::format("load_weights: {} layers, the engine has {}", m.layers.size(), c.layers));
  check_shape(m.embedding, c.vocab, c.dim, "embed_tokens");
  check_shape(m.classifier(), c.vocab, c.dim, "lm_head");
  ReloadStats st;
  for (int i = 0; i < c.layers; ++i) st += load_layer(i, m.layers[static_cast<std::size_t>(i)]);
  const auto t0 = std::chrono::steady_clock::now();
  copy_in_place(final_norm_, m.final_norm, "norm");
  st.load_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  st.load_bytes += 2 * static_cast<std::size_t>(m.final_norm.size()) * sizeof(float);
  embedding_.weight.load_weight(std::span<const float>(m.embedding.data(), static_cast<std::size_t>(m.embedding.size())), st);
  const MatrixRM& cls = m.classifier();
  head_.weight.load_weight(std::span<const float>(cls.data(), static_cast<std::size_t>(cls.size())), st);
  ready_ = false;
  return st;
}

ReloadStats Transformer::process_weights_after_loading() {
  ReloadStats st;
  for (Linear* l : all_linears()) l->weight.process_weights_after_loading(st);
  if (config_.experts > 0) {
    for (Layer& l : layers_) l.experts.process_weights_after_loading(st);
  }
  ready_ = true;
  return st;
}

ReloadStats Transformer::restore_weights_for_loading() {
  ReloadStats st;
  ready_ = false;
  for (Linear* l : all_linears()) l->weight.restore_weights_for_loading(st);
  if (config_.experts > 0) {
    for (Layer& l : layers_) l.experts.restore_weights_for_loading(st);
  }
  return st;
}

bool Transformer::weights_ready() const { return ready_; }

std::vector<const void*> Transformer::weight_buffers() const {
  std::vector<const void*> out;
  for (Linear* l : const_cast<Transformer*>(this)->all_linears()) l->weight.buffers(out);
  if (config_.experts > 0) {
    for (const Layer& l : layers_) l.experts.buffers(out);
  }
  return out;
}

void Transformer::check_ready() const {
  if (!ready_) {
    throw WeightStateError(
        "forward pass on weights that are not all in the kernel layout: call process_weights_after_loading after loading");
  }
}

MatrixRM Transformer::linear(const Linear& l, const MatrixRM& x) const {
  MatrixRM y;
  linears({{&l, &y}}, x);
  return y;
}

void Transformer::linears(std::initializer_list<std::pair<const Linear*, MatrixRM*>> outs, const MatrixRM& x) const {
  if (x.rows() > 1 && kernels_ == KernelMode::kDefault) {
    // Several tokens: the prefill GEMM on the packed weights, the activations rounded and laid
    // out once per distinct (format, kernel) (q/k/v and gate/up share one).
    std::vector<std::unique_ptr<GemmActivations>> acts;
    std::vector<std::pair<const Format*, bool>> keys;
    std::vector<GemmJob> jobs;
    for (const auto& [l, y] : outs) {
      const PackedWeight& w = l->weight.packed();
      const bool bf16 = gemm_bf16_applies(w, l->activation);
      std::size_t k = 0;
      while (k < keys.size() && !(*keys[k].first == l->activation && keys[k].second == bf16)) ++k;
      if (k == keys.size()) {
        keys.emplace_back(&l->activation, bf16);
        acts.push_back(std::make_unique<GemmActivations>(x.data(), x.rows(), x.cols(), l->activation, bf16));
      }
      y->resize(x.rows(), w.rows());
      jobs.push_back({&w, acts[k].get(), y->data(), w.rows()});
    }
    gemm(jobs);
  } else {
    // One token, or batch-invariant kernels: the GEMV kernels, whose per-token sums do not
    // depend on the number of tokens. The input rounded to each distinct activation format.
    std::vector<std::pair<const Format*, MatrixRM>> inputs;
    inputs.reserve(outs.size());
    auto input_for = [&](const Format& f) -> const MatrixRM& {
      if (is_fp32(f)) return x;
      for (const auto& [g, m] : inputs) {
        if (*g == f) return m;
      }
      inputs.emplace_back(&f, x);
      MatrixRM& m = inputs.back().second;
      round_activation(m, f);
      return m;
    };
    // NVFP4 weights with NVFP4 activations (W4A4): the integer kernel on the activations' codes,
    // each token quantised on its own as round_activation rounds it here (one token, or every row
    // in the batch-invariant mode).
    std::vector<std::pair<const Format*, std::unique_ptr<E2M1Activations>>> codes;
    auto codes_for = [&](const Format& f) -> const E2M1Activations* {
      for (const auto& [g, c] : codes) {
        if (*g == f) return c.get();
      }
      codes.emplace_back(&f, std::make_unique<E2M1Activations>(x.data(), x.rows(), x.cols(), f));
      return codes.back().second.get();
    };
    for (const auto& [l, y] : outs) {  // all roundings first: `inputs` stops growing
      if (!l->weight.packed().e2m1_dot_applies(l->activation)) input_for(l->activation);
    }
    std::vector<GemvJob> jobs;
    for (const auto& [l, y] : outs) {
      const PackedWeight& w = l->weight.packed();
      if (w.e2m1_dot_applies(l->activation)) {
        y->resize(x.rows(), w.rows());
        jobs.push_back({&w, nullptr, y->data(), x.rows(), false, codes_for(l->activation)});
        continue;
      }
      y->resize(x.rows(), w.rows());
      // The lm_head with BF16 activations takes the BF16 dot-product kernel (gemm_rows): its
      // outputs are the logits, never rounded again, so its other pair order stays an FP32
      // rounding difference. Inside the layers the FP32 kernel's order is kept: a different order
      // flips BF16 activation roundings that then compound through the KV cache (the bf16
      // recipe's prefill-decode gap on stories260K grew from under to over half its format error).
      const bool x_bf16 =
          l == &head_ && l->activation.element == Element::kBf16 && l->activation.scaling.kind == ScaleKind::kNone;
      jobs.push_back({&w, input_for(l->activation).data(), y->data(), x.rows(), x_bf16});
    }
    gemv(jobs);
  }
  for (const auto& [l, y] : outs) {
    if (l->bias.size() > 0) y->rowwise() += l->bias.transpose();
  }
}

void Transformer::round_activation(MatrixRM& x, const Format& f) const {
  if (kernels_ == KernelMode::kBatchInvariant && !rows_round_independently(f, false) && x.rows() > 1) {
#pragma omp parallel for schedule(static)
    for (Eigen::Index r = 0; r < x.rows(); ++r) round_to_format(x.row(r).data(), 1, x.cols(), f);
    return;
  }
  round_to_format(x.data(), x.rows(), x.cols(), f);
}

std::size_t Transformer::decode_weight_bytes() const {
  const PackedWeight& emb = embedding_.weight.packed();
  std::size_t b = head_.weight.packed().bytes() + emb.bytes() / static_cast<std::size_t>(emb.rows());  // one embedding row
  for (const Layer& l : layers_) {
    for (const Linear* p : {&l.q, &l.k, &l.v, &l.o}) b += p->weight.packed().bytes();
    if (config_.experts > 0) {
      b += l.router.weight.packed().bytes() +
           static_cast<std::size_t>(config_.experts_per_token) * (l.experts.w13(0).bytes() + l.experts.w2(0).bytes());
    } else {
      for (const Linear* p : {&l.gate, &l.up, &l.down}) b += p->weight.packed().bytes();
    }
  }
  return b;
}

std::size_t Transformer::kv_cache_bytes_per_position() const {
  return 2 * static_cast<std::size_t>(config_.layers) * static_cast<std::size_t>(config_.kv_heads * config_.head_dim) *
         sizeof(float);
}

Transformer::WeightMemory Transformer::weight_memory() const {
  WeightMemory m;
  auto add = [&](const PackedWeight& w) { m.resident += w.resident_bytes(), m.packed += w.packed_bytes(); };
  for (Linear* l : const_cast<Transformer*>(this)->all_linears()) add(l->weight.packed());
  if (config_.experts > 0) {
    for (const Layer& l : layers_) {
      for (int e = 0; e < l.experts.experts(); ++e) add(l.experts.w13(e)), add(l.experts.w2(e));
    }
  }
  return m;
}

void Transformer::round_hidden(MatrixRM& x) const {
  if (hidden_ != Element::kFp32) round_to_format(x.data(), x.rows(), x.cols(), Format{hidden_, {}});
}

void Transformer::rmsnorm(MatrixRM& x, const VectorF& w) const {
  // Rows are independent: split among the threads for a prefill (each row computed alike).
  parallel_for_if(x.rows(), x.rows() >= 64, [&](Eigen::Index r) {
    float ss = 0;
    for (Eigen::Index j = 0; j < x.cols(); ++j) ss += x(r, j) * x(r, j);
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(x.cols()) + config_.norm_eps);
    for (Eigen::Index j = 0; j < x.cols(); ++j) x(r, j) = w[j] * (inv * x(r, j));
  });
}

std::vector<float> Transformer::rope_table(int first_pos, Eigen::Index rows) const {
  const int hd = config_.head_dim;
  std::vector<float> cs(static_cast<std::size_t>(rows * hd));
  for (Eigen::Index r = 0; r < rows; ++r) {
    const float pos = static_cast<float>(first_pos + r);
    for (int j = 0; j < hd / 2; ++j) {
      const float val = pos * inv_freq_[static_cast<std::size_t>(j)];
      cs[static_cast<std::size_t>(r * hd + 2 * j)] = std::cos(val),
                                               cs[static_cast<std::size_t>(r * hd + 2 * j + 1)] = std::sin(val);
    }
  }
  return cs;
}

void Transformer::rope(MatrixRM& x, int heads, const std::vector<float>& table) const {
  const int hd = config_.head_dim;
  parallel_for_if(x.rows(), x.rows() >= 64, [&](Eigen::Index r) {
    const float* cs = table.data() + r * hd;
    for (int h = 0; h < heads; ++h) {
      float* v = x.row(r).data() + static_cast<std::ptrdiff_t>(h) * hd;
      for (int j = 0; j < hd / 2; ++j) {
        const float fcr = cs[2 * j], fci = cs[2 * j + 1];
        // llama2.c: consecutive pairs (2j, 2j+1); Hugging Face rotate_half: (j, j + hd/2).
        const int a = config_.rope_interleaved ? 2 * j : j;
        const int b = config_.rope_interleaved ? 2 * j + 1 : j + hd / 2;
        const float v0 = v[a], v1 = v[b];
        v[a] = v0 * fcr - v1 * fci;
        v[b] = v0 * fci + v1 * fcr;
      }
    }
  });
}

void Transformer::store_kv(MatrixRM& kv) const {
  if (!is_fp32(kv_)) {
    // Per token, so prefill and decode store the same values.
    for (Eigen::Index r = 0; r < kv.rows(); ++r) round_to_format(kv.row(r).data(), 1, kv.cols(), kv_, true);
  }
  if (attention_ != Element::kFp32) round_to_format(kv.data(), kv.rows(), kv.cols(), Format{attention_, {}});
}

void Transformer::attention_block(const Layer& l, const MatrixRM& xb, int first_pos, const std::vector<float>& rope_cs,
                                  MatrixRM& kc, MatrixRM& vc, MatrixRM& out) const {
  const TransformerConfig& c = config_;
  const Eigen::Index T = xb.rows(), hd = c.head_dim;
  const Format attn_fmt{attention_, {}};
  MatrixRM q, k, v;
  linears({{&l.q, &q}, {&l.k, &k}, {&l.v, &v}}, xb);
  round_hidden(q);
  round_hidden(k);
  round_hidden(v);
  if (c.qk_norm) {
    for (MatrixRM* m : {&q, &k}) {
      const VectorF& nw = m == &q ? l.q_norm : l.k_norm;
      Eigen::Map<MatrixRM> heads(m->data(), m->rows() * (m->cols() / hd), hd);
      MatrixRM tmp = heads;
      rmsnorm(tmp, nw);
      heads = tmp;
      round_hidden(*m);
    }
  }
  rope(q, c.heads, rope_cs);
  rope(k, c.kv_heads, rope_cs);
  round_hidden(q);
  round_hidden(k);
  if (attention_ != Element::kFp32) round_to_format(q.data(), q.rows(), q.cols(), attn_fmt);
  store_kv(k);
  store_kv(v);
  kc.middleRows(first_pos, T) = k;
  vc.middleRows(first_pos, T) = v;

  out.resize(T, static_cast<Eigen::Index>(c.heads) * hd);
  if (kernels_ == KernelMode::kBatchInvariant) {
    attention_fixed_order(q, kc, vc, first_pos, out);
    return;
  }
  // Tasks of (head, block of query rows) in parallel, each writing its own block of `out`; a
  // block's queries see positions up to its last row only (causal), so the blocks of a head cost
  // more the later they are and are handed out dynamically. A decode step's heads run in parallel
  // from the first position: a head's scores, softmax and values cost about a microsecond even
  // on a short cache, and SmolLM2-135M's 9 heads in parallel on 2 threads decoded 2-3 % faster
  // than serial heads below 256 positions (64-token int4 decodes, Zen 4, 2026-11-28). Each
  // head's result is computed alike either way.
  const int group = c.heads / c.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const Eigen::Index rows_per_task = T > 1 ? kAttentionRows : 1;
  const Eigen::Index blocks = (T + rows_per_task - 1) / rows_per_task;
  // A decode step's cached rows come from DRAM (the weights streamed since the last step evict
  // them), and each head reads its group's hd of every row's kv_dim values: a strided pass that
  // the hardware prefetchers ramp up on anew for every head. The threads first read the rows
  // once in address order, each a contiguous share (read_into_cache), while the block fits in
  // their L2 caches (kDecodeWarmBytes). The same bits either way. SmolLM2-135M at 1-120
  // positions, 2 threads of a Zen 4 VM, the two ways alternating token by token in one process
  // (2026-11-29, two series of 4-10 rounds of 120 tokens): 14.9 -> 9.7 us of attention a layer;
  // ms a token, means: int4-w4a16-g32 5.26 -> 5.12 and 4.65 -> 4.59, mxfp8 8.69 -> 8.56 and
  // 7.38 -> 7.36, fp8-block 8.98 -> 8.75, bf16 13.62 -> 13.48.
  const std::size_t cached = static_cast<std::size_t>(first_pos) * static_cast<std::size_t>(kc.cols()) * sizeof(float);
  const bool warm = T == 1 && first_pos > 0 && 2 * cached <= kDecodeWarmBytes;
#pragma omp parallel
  {
    if (warm) {
      read_into_cache(kc.data(), cached);  // rows [0, first_pos): contiguous in the row-major cache
      read_into_cache(vc.data(), cached);
#pragma omp barrier
    }
#pragma omp for schedule(dynamic)
    for (Eigen::Index task = 0; task < c.heads * blocks; ++task) {
      const int h = static_cast<int>(task / blocks);
      const Eigen::Index t0 = (task % blocks) * rows_per_task, n = std::min(rows_per_task, T - t0);
      const Eigen::Index g = h / group, seen = first_pos + t0 + n;  // positions any of the block's queries sees
      MatrixRM s(n, seen);
      s.noalias() = q.block(t0, h * hd, n, hd) * kc.block(0, g * hd, seen, hd).transpose();
      for (Eigen::Index t = 0; t < n; ++t) {
        const Eigen::Index visible = first_pos + t0 + t + 1;  // causal: positions 0..first_pos + t0 + t
        float* row = s.row(t).data();
        for (Eigen::Index j = 0; j < visible; ++j) row[j] *= scale;
        softmax_row(row, visible);
        for (Eigen::Index j = visible; j < seen; ++j) row[j] = 0;
      }
      if (softmax_ != Element::kFp32) round_to_format(s.data(), s.rows(), s.cols(), Format{softmax_, {}});
      if (attention_ != Element::kFp32) round_to_format(s.data(), s.rows(), s.cols(), attn_fmt);
      out.block(t0, h * hd, n, hd).noalias() = s * vc.block(0, g * hd, seen, hd);
    }
  }
}

void Transformer::feed_forward(const Layer& l, const MatrixRM& xb, MatrixRM& d) const {
  if (config_.experts > 0) {
    moe(l, xb, d);
    return;
  }
  MatrixRM gt, up;
  linears({{&l.gate, &gt}, {&l.up, &up}}, xb);
  round_hidden(gt);
  round_hidden(up);
  parallel_for_if(gt.rows(), gt.size() >= (1 << 16),
                  [&](Eigen::Index r) { silu_mul(gt.row(r).data(), up.row(r).data(), gt.row(r).data(), gt.cols()); });
  round_hidden(gt);
  d = linear(l.down, gt);
}

MatrixRM Transformer::forward_layers(MatrixRM x, int first_pos, MatrixRM* k_cache, MatrixRM* v_cache, bool last_only) const {
  const std::vector<float> rope_cs = rope_table(first_pos, x.rows());  // every layer's q and k rotate alike
  for (std::size_t li = 0; li < layers_.size(); ++li) {
    const Layer& l = layers_[li];
    MatrixRM xb = x;
    rmsnorm(xb, l.attn_norm);
    round_hidden(xb);
    MatrixRM out;
    attention_block(l, xb, first_pos, rope_cs, k_cache[li], v_cache[li], out);
    round_hidden(out);
    MatrixRM o = linear(l.o, out);
    round_hidden(o);
    x += o;
    round_hidden(x);

    xb = x;
    rmsnorm(xb, l.ffn_norm);
    round_hidden(xb);
    MatrixRM d;
    feed_forward(l, xb, d);
    round_hidden(d);
    x += d;
    round_hidden(x);
  }
  if (last_only && x.rows() > 1) x = x.bottomRows(1).eval();
  rmsnorm(x, final_norm_);
  round_hidden(x);
  return linear(head_, x);
}

void Transformer::moe(const Layer& l, const MatrixRM& x, MatrixRM& out) const {
  const TransformerConfig& c = config_;
  const Eigen::Index T = x.rows(), I = c.expert_hidden_dim;
  const int E = c.experts, K = c.experts_per_token;
  const MatrixRM logits = linear(l.router, x);  // [T, E], FP32
  // Routing: softmax over the experts, the top K (lowest index on ties), renormalised.
  std::vector<int> pick(static_cast<std::size_t>(T * K));
  std::vector<float> gate(static_cast<std::size_t>(T * K));
  std::vector<std::vector<Eigen::Index>> rows(static_cast<std::size_t>(E));  // tokens of each expert, in order
  std::vector<Eigen::Index> slot(static_cast<std::size_t>(T * K));           // row of (t, k) in its expert's batch
  std::vector<float> p(static_cast<std::size_t>(E));
  std::vector<int> order(static_cast<std::size_t>(E));
  for (Eigen::Index t = 0; t < T; ++t) {
    std::copy(logits.row(t).data(), logits.row(t).data() + E, p.begin());
    softmax_row(p.data(), E);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int a, int b) {
      return p[static_cast<std::size_t>(a)] > p[static_cast<std::size_t>(b)] ||
             (p[static_cast<std::size_t>(a)] == p[static_cast<std::size_t>(b)] && a < b);
    });
    float sum = 0;
    for (int k = 0; k < K; ++k) sum += p[static_cast<std::size_t>(order[static_cast<std::size_t>(k)])];
    for (int k = 0; k < K; ++k) {
      const int e = order[static_cast<std::size_t>(k)];
      const auto i = static_cast<std::size_t>(t * K + k);
      pick[i] = e;
      gate[i] = p[static_cast<std::size_t>(e)] / sum;
      slot[i] = static_cast<Eigen::Index>(rows[static_cast<std::size_t>(e)].size());
      rows[static_cast<std::size_t>(e)].push_back(t);
    }
  }
  // Each expert on its tokens: w13 (gate and up), SwiGLU, w2; all experts in one parallel region per stage.
  std::vector<MatrixRM> xin(static_cast<std::size_t>(E)), h(static_cast<std::size_t>(E)), y(static_cast<std::size_t>(E));
  std::vector<GemvJob> jobs;
  for (int e = 0; e < E; ++e) {
    const auto& r = rows[static_cast<std::size_t>(e)];
    if (r.empty()) continue;
    MatrixRM& xe = xin[static_cast<std::size_t>(e)];
    xe.resize(static_cast<Eigen::Index>(r.size()), c.dim);
    for (std::size_t j = 0; j < r.size(); ++j) xe.row(static_cast<Eigen::Index>(j)) = x.row(r[j]);
    round_activation(xe, l.expert_activation);
    h[static_cast<std::size_t>(e)].resize(xe.rows(), 2 * I);
    jobs.push_back({&l.experts.w13(e), xe.data(), h[static_cast<std::size_t>(e)].data(), xe.rows()});
  }
  gemv(jobs);
  jobs.clear();
  for (int e = 0; e < E; ++e) {
    MatrixRM& he = h[static_cast<std::size_t>(e)];
    if (he.size() == 0) continue;
    round_hidden(he);
    MatrixRM& a = xin[static_cast<std::size_t>(e)];  // reused: the SwiGLU output [n, I]
    a.resize(he.rows(), I);
    for (Eigen::Index t = 0; t < he.rows(); ++t) silu_mul(he.row(t).data(), he.row(t).data() + I, a.row(t).data(), I);
    round_hidden(a);
    round_activation(a, l.expert_activation);
    y[static_cast<std::size_t>(e)].resize(a.rows(), c.dim);
    jobs.push_back({&l.experts.w2(e), a.data(), y[static_cast<std::size_t>(e)].data(), a.rows()});
  }
  gemv(jobs);
  for (MatrixRM& ye : y) {
    if (ye.size() > 0) round_hidden(ye);
  }
  // Weighted sum in the order of the token's expert ranks.
  out = MatrixRM::Zero(T, c.dim);
  for (Eigen::Index t = 0; t < T; ++t) {
    for (int k = 0; k < K; ++k) {
      const auto i = static_cast<std::size_t>(t * K + k);
      out.row(t) += gate[i] * y[static_cast<std::size_t>(pick[i])].row(slot[i]);
    }
  }
}

void Transformer::attention_fixed_order(const MatrixRM& q, const MatrixRM& kc, const MatrixRM& vc, int first_pos,
                                        MatrixRM& out) const {
  const TransformerConfig& c = config_;
  const Eigen::Index T = q.rows(), hd = c.head_dim;
  const int group = c.heads / c.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const Format attn_fmt{attention_, {}}, soft_fmt{softmax_, {}};
  // One (query, head) at a time, every sum in one fixed order: the result of a query does not
  // depend on how many other queries are computed with it.
#pragma omp parallel if (T > 1)
  {
    std::vector<float> s(static_cast<std::size_t>(first_pos + T));
#pragma omp for schedule(static) collapse(2)
    for (Eigen::Index t = 0; t < T; ++t) {
      for (int h = 0; h < c.heads; ++h) {
        const Eigen::Index visible = first_pos + t + 1, g = h / group;
        const float* qv = q.row(t).data() + h * hd;
        attention_scores_fixed(qv, kc.data() + g * hd, kc.cols(), visible, hd, scale, s.data());
        softmax_row(s.data(), visible);
        round_to_format(s.data(), 1, visible, soft_fmt);
        round_to_format(s.data(), 1, visible, attn_fmt);
        attention_values_fixed(s.data(), vc.data() + g * hd, vc.cols(), visible, hd, out.row(t).data() + h * hd);
      }
    }
  }
}

MatrixRM Transformer::embed(std::span<const int> tokens) const {
  const TransformerConfig& c = config_;
  MatrixRM x(static_cast<Eigen::Index>(tokens.size()), c.dim);
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    const int tok = tokens[static_cast<std::size_t>(t)];
    if (tok < 0 || tok >= c.vocab)
      throw std::invalid_argument(fmt::format("token {} outside the vocabulary of {}", tok, c.vocab));
    embedding_.weight.packed().decode_rows_f32(tok, tok + 1, x.row(t).data(), c.dim);
  }
  return x;
}

MatrixRM Transformer::prefill(std::span<const int> tokens) const {
  const TransformerConfig& c = config_;
  const auto T = static_cast<Eigen::Index>(tokens.size());
  if (T == 0) return MatrixRM(0, c.vocab);
  if (T > c.max_seq) throw std::invalid_argument(fmt::format("prefill of {} tokens exceeds max_seq {}", T, c.max_seq));
  check_ready();
  MatrixRM x = embed(tokens);
  const Eigen::Index kv_dim = static_cast<Eigen::Index>(c.kv_heads) * c.head_dim;
  std::vector<MatrixRM> kc(layers_.size(), MatrixRM(T, kv_dim)), vc(layers_.size(), MatrixRM(T, kv_dim));
  return forward_layers(std::move(x), 0, kc.data(), vc.data());
}

std::span<const float> Transformer::extend(std::span<const int> tokens) {
  const TransformerConfig& c = config_;
  if (tokens.empty()) throw std::invalid_argument("extend: no tokens");
  check_ready();
  if (pos_ + static_cast<std::int64_t>(tokens.size()) > c.max_seq) {
    throw std::invalid_argument(fmt::format("decode past max_seq {} ({} tokens at position {})", c.max_seq, tokens.size(), pos_));
  }
  MatrixRM x = embed(tokens);
  const MatrixRM logits = forward_layers(std::move(x), pos_, k_cache_.data(), v_cache_.data(), true);
  pos_ += static_cast<int>(tokens.size());
  logits_.assign(logits.data(), logits.data() + logits.size());
  return logits_;
}

std::span<const float> Transformer::decode(int token) { return extend(std::span<const int>(&token, 1)); }

namespace {
// std::max_element's index (the first largest under <) in kLanes independent lanes, which the
// compiler vectorises: lane l keeps its first largest of x[l], x[l + kLanes], ...; the lanes then
// give the largest value, the lowest index on ties. The same index as std::max_element whenever
// no x is NaN (a NaN takes std::max_element's own loop). A greedy decode's vocabulary-wide arg
// max: over 49,152 normal random logits std::max_element's compare-and-branch took 147 us, this
// 4.1 us (one Zen 4 core, 2026-11-28); in SmolLM2-shape decodes it had taken 40 us a token.
int first_arg_max(std::span<const float> x) {
  constexpr std::size_t kLanes = 16;
  const std::size_t n = x.size();
  if (n < kLanes) return static_cast<int>(std::max_element(x.begin(), x.end()) - x.begin());
  // Lane l starts at index l with -inf, which any x[l] but -inf (index l either way) or NaN (the
  // fallback) replaces.
  std::array<float, kLanes> best;
  best.fill(-std::numeric_limits<float>::infinity());
  std::array<std::uint32_t, kLanes> at{}, unordered{};  // unordered[l]: lane l has seen a NaN
  for (std::size_t l = 0; l < kLanes; ++l) at[l] = static_cast<std::uint32_t>(l);
  auto step = [&](std::size_t i, std::size_t l) {
    const float v = x[i + l];
    const bool larger = v > best[l];
    unordered[l] |= static_cast<std::uint32_t>(v != v);
    best[l] = larger ? v : best[l];
    at[l] = larger ? static_cast<std::uint32_t>(i + l) : at[l];
  };
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::size_t l = 0; l < kLanes; ++l) step(i, l);
  }
  for (std::size_t l = 0; i + l < n; ++l) step(i, l);  // the tail, lane l again (later indices)
  if (std::any_of(unordered.begin(), unordered.end(), [](std::uint32_t u) { return u != 0; }))
    return static_cast<int>(std::max_element(x.begin(), x.end()) - x.begin());
  std::size_t k = 0;
  for (std::size_t l = 1; l < kLanes; ++l) {
    if (best[l] > best[k] || (best[l] == best[k] && at[l] < at[k])) k = l;
  }
  return static_cast<int>(at[k]);
}
}  // namespace

int sample_token(std::span<const float> logits, double temperature, double top_p, double uniform) {
  const std::size_t n = logits.size();
  if (temperature <= 0) return first_arg_max(logits);
  std::vector<double> p(n);
  const double mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += p[i] = std::exp((logits[i] - mx) / temperature);
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::size_t keep = n;
  if (top_p < 1.0) {
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return p[static_cast<std::size_t>(a)] > p[static_cast<std::size_t>(b)]; });
    double cum = 0;
    for (keep = 0; keep < n;) {
      cum += p[static_cast<std::size_t>(order[keep++])] / sum;
      if (cum >= top_p) break;
    }
  }
  double total = 0;
  for (std::size_t i = 0; i < keep; ++i) total += p[static_cast<std::size_t>(order[i])];
  double target = uniform * total;
  for (std::size_t i = 0; i < keep; ++i) {
    target -= p[static_cast<std::size_t>(order[i])];
    if (target < 0) return order[i];
  }
  return order[keep - 1];
}

}  // namespace rlsim::models
