#include "models/runtime/transformer.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "models/precision/quantize.h"

namespace rlsim::models {
namespace {

// Round to nearest even BF16, Inf / NaN unchanged; branch-free so that loops over it vectorise.
inline float round_bf16(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  return std::bit_cast<float>((u & 0x7F800000u) == 0x7F800000u ? u : r);
}

// Dot product in one fixed order whatever the caller: 16 lane sums over strides of 16 (vectorised),
// then the lanes added pairwise. Batch-invariant attention scores use it in prefill and decode alike.
inline float dot_fixed(const float* a, const float* b, Eigen::Index n) {
  float lane[16] = {};
  Eigen::Index e = 0;
  for (; e + 16 <= n; e += 16) {
    for (int l = 0; l < 16; ++l) lane[l] += a[e + l] * b[e + l];
  }
  for (int l = 0; e < n; ++e, ++l) lane[l] += a[e] * b[e];
  int top = 8;  // lanes past n hold zeros: the tree starts at the smallest power of two >= n
  while (top > 1 && top >= n) top /= 2;
  for (int w = top; w >= 1; w /= 2) {
    for (int l = 0; l < w; ++l) lane[l] += lane[l + w];
  }
  return lane[0];
}

bool is_fp32(const Format& f) { return f.element == Element::kFp32 && f.scaling.kind == ScaleKind::kNone; }

void softmax_row(float* s, Eigen::Index n) {
  float mx = s[0];
  for (Eigen::Index j = 1; j < n; ++j) mx = std::max(mx, s[j]);
  float sum = 0;
  for (Eigen::Index j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - mx);
    sum += s[j];
  }
  for (Eigen::Index j = 0; j < n; ++j) s[j] /= sum;
}

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
  const QuantizedTensor q = quantize(f, rows, cols, std::span<const float>(x, static_cast<std::size_t>(n)));
  const std::vector<double> d = dequantize(q);
  for (std::int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(d[static_cast<std::size_t>(i)]);
}

// Whether each row's rounding depends on that row alone (so rows can be split among threads).
bool row_local(const Format& f, bool static_tensor_scale) {
  switch (f.scaling.kind) {
    case ScaleKind::kNone:
    case ScaleKind::kToken:
    case ScaleKind::kGroup1xN:
    case ScaleKind::kGroupN:
    case ScaleKind::kMx32: return true;
    case ScaleKind::kTensor: return static_tensor_scale;
    default: return false;
  }
}

}  // namespace

void round_to_format(float* x, std::int64_t rows, std::int64_t cols, const Format& f, bool static_tensor_scale) {
  if (is_fp32(f)) return;
  constexpr std::int64_t kRowsPerTask = 16;
  if (rows > kRowsPerTask && rows * cols >= (1 << 16) && row_local(f, static_tensor_scale)) {
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
  if (recipe_) {
    hidden_ = recipe_->hidden_element();
    attention_ = recipe_->attention;
    softmax_ = recipe_->softmax;
    kv_ = recipe_->kv_cache;
  }
  const Format none{Element::kFp32, {}};
  auto make = [&](const MatrixRM& master, const VectorF& bias, const LinearPrecision* lp) {
    Linear l{MatrixRM(), PackedWeight(), bias, none};
    if (lp && !is_fp32(lp->weight)) {
      const QuantizedTensor q = quantize(lp->weight, master.rows(), master.cols(), std::span<const float>(master.data(), static_cast<std::size_t>(master.size())));
      l.packed = PackedWeight(q);
      const std::vector<double> v = dequantize(q);
      l.w.resize(master.rows(), master.cols());
      for (Eigen::Index i = 0; i < l.w.size(); ++i) l.w.data()[i] = static_cast<float>(v[static_cast<std::size_t>(i)]);
    } else {
      l.w = master;
      l.packed = PackedWeight::from_values(master.data(), master.rows(), master.cols());
    }
    if (lp) l.activation = lp->activation;
    return l;
  };
  const LinearPrecision* lin = recipe_ ? &recipe_->linear : nullptr;
  const LinearPrecision* head = recipe_ ? &recipe_->lm_head : nullptr;
  embedding_ = w.embedding;
  if (recipe_) round_to_format(embedding_.data(), embedding_.rows(), embedding_.cols(), recipe_->embedding);
  for (const LayerWeights& lw : w.layers) {
    Layer l;
    l.attn_norm = lw.attn_norm;
    l.ffn_norm = lw.ffn_norm;
    l.q_norm = lw.q_norm;
    l.k_norm = lw.k_norm;
    l.q = make(lw.wq, lw.bq, lin);
    l.k = make(lw.wk, lw.bk, lin);
    l.v = make(lw.wv, lw.bv, lin);
    l.o = make(lw.wo, {}, lin);
    l.gate = make(lw.w_gate, {}, lin);
    l.up = make(lw.w_up, {}, lin);
    l.down = make(lw.w_down, {}, lin);
    layers_.push_back(std::move(l));
  }
  final_norm_ = w.final_norm;
  head_ = make(w.classifier(), {}, head);
  inv_freq_.resize(static_cast<std::size_t>(c.head_dim / 2));
  for (int j = 0; j < c.head_dim / 2; ++j) {
    // llama2.c run.c and HF LlamaRotaryEmbedding alike: 1 / theta^(2j / head_dim) in FP32.
    inv_freq_[static_cast<std::size_t>(j)] = 1.0f / std::pow(c.rope_theta, static_cast<float>(2 * j) / static_cast<float>(c.head_dim));
  }
  const Eigen::Index kv_dim = static_cast<Eigen::Index>(c.kv_heads) * c.head_dim;
  k_cache_.assign(static_cast<std::size_t>(c.layers), MatrixRM::Zero(c.max_seq, kv_dim));
  v_cache_.assign(static_cast<std::size_t>(c.layers), MatrixRM::Zero(c.max_seq, kv_dim));
}

MatrixRM Transformer::linear(const Linear& l, const MatrixRM& x) const {
  MatrixRM y;
  linears({{&l, &y}}, x);
  return y;
}

void Transformer::linears(std::initializer_list<std::pair<const Linear*, MatrixRM*>> outs, const MatrixRM& x) const {
  // The input rounded to each distinct activation format (q/k/v and gate/up share one).
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
  for (const auto& [l, y] : outs) input_for(l->activation);  // all roundings first: `inputs` stops growing
  if (x.rows() == 1 || kernels_ == KernelMode::kBatchInvariant) {
    std::vector<GemvJob> jobs;
    for (const auto& [l, y] : outs) {
      y->resize(x.rows(), l->packed.rows());
      jobs.push_back({&l->packed, input_for(l->activation).data(), y->data(), x.rows()});
    }
    gemv(jobs);
  } else {
    for (const auto& [l, y] : outs) y->noalias() = input_for(l->activation) * l->w.transpose();
  }
  for (const auto& [l, y] : outs) {
    if (l->bias.size() > 0) y->rowwise() += l->bias.transpose();
  }
}

void Transformer::round_activation(MatrixRM& x, const Format& f) const {
  if (kernels_ == KernelMode::kBatchInvariant && !row_local(f, false) && x.rows() > 1) {
#pragma omp parallel for schedule(static)
    for (Eigen::Index r = 0; r < x.rows(); ++r) round_to_format(x.row(r).data(), 1, x.cols(), f);
    return;
  }
  round_to_format(x.data(), x.rows(), x.cols(), f);
}

std::size_t Transformer::decode_weight_bytes() const {
  std::size_t b = head_.packed.bytes() + static_cast<std::size_t>(config_.dim) * sizeof(float);
  for (const Layer& l : layers_) {
    for (const Linear* p : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) b += p->packed.bytes();
  }
  return b;
}

void Transformer::round_hidden(MatrixRM& x) const {
  if (hidden_ != Element::kFp32) round_to_format(x.data(), x.rows(), x.cols(), Format{hidden_, {}});
}

void Transformer::rmsnorm(MatrixRM& x, const VectorF& w) const {
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    float ss = 0;
    for (Eigen::Index j = 0; j < x.cols(); ++j) ss += x(r, j) * x(r, j);
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(x.cols()) + config_.norm_eps);
    for (Eigen::Index j = 0; j < x.cols(); ++j) x(r, j) = w[j] * (inv * x(r, j));
  }
}

void Transformer::rope(MatrixRM& x, int heads, int first_pos) const {
  const int hd = config_.head_dim;
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    const float pos = static_cast<float>(first_pos + r);
    for (int h = 0; h < heads; ++h) {
      float* v = x.row(r).data() + static_cast<std::ptrdiff_t>(h) * hd;
      for (int j = 0; j < hd / 2; ++j) {
        const float val = pos * inv_freq_[static_cast<std::size_t>(j)];
        const float fcr = std::cos(val), fci = std::sin(val);
        // llama2.c: consecutive pairs (2j, 2j+1); Hugging Face rotate_half: (j, j + hd/2).
        const int a = config_.rope_interleaved ? 2 * j : j;
        const int b = config_.rope_interleaved ? 2 * j + 1 : j + hd / 2;
        const float v0 = v[a], v1 = v[b];
        v[a] = v0 * fcr - v1 * fci;
        v[b] = v0 * fci + v1 * fcr;
      }
    }
  }
}

void Transformer::store_kv(MatrixRM& kv) const {
  if (!is_fp32(kv_)) {
    // Per token, so prefill and decode store the same values.
    for (Eigen::Index r = 0; r < kv.rows(); ++r) round_to_format(kv.row(r).data(), 1, kv.cols(), kv_, true);
  }
  if (attention_ != Element::kFp32) round_to_format(kv.data(), kv.rows(), kv.cols(), Format{attention_, {}});
}

MatrixRM Transformer::forward_layers(MatrixRM x, int first_pos, MatrixRM* k_cache, MatrixRM* v_cache, bool last_only) const {
  const TransformerConfig& c = config_;
  const Eigen::Index T = x.rows(), hd = c.head_dim, P = first_pos + T;
  const int group = c.heads / c.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const Format attn_fmt{attention_, {}};
  for (std::size_t li = 0; li < layers_.size(); ++li) {
    const Layer& l = layers_[li];
    MatrixRM xb = x;
    rmsnorm(xb, l.attn_norm);
    round_hidden(xb);
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
    rope(q, c.heads, first_pos);
    rope(k, c.kv_heads, first_pos);
    round_hidden(q);
    round_hidden(k);
    if (attention_ != Element::kFp32) round_to_format(q.data(), q.rows(), q.cols(), attn_fmt);
    store_kv(k);
    store_kv(v);
    MatrixRM& kc = k_cache[li];
    MatrixRM& vc = v_cache[li];
    kc.middleRows(first_pos, T) = k;
    vc.middleRows(first_pos, T) = v;

    MatrixRM out(T, static_cast<Eigen::Index>(c.heads) * hd);
    if (kernels_ == KernelMode::kBatchInvariant) {
      attention_fixed_order(q, kc, vc, first_pos, out);
    } else {
      // Heads in parallel for a prefill (each writes its own columns of `out`); a decode step's
      // heads are too small to be worth a parallel region.
#pragma omp parallel for schedule(static) if (T > 1)
      for (int h = 0; h < c.heads; ++h) {
        MatrixRM s(T, P);
        const Eigen::Index g = h / group;
        // A fresh prefill is causal over a square: only the lower triangle of the scores is needed.
        const bool causal_square = first_pos == 0 && T > 1;
        if (causal_square) {
          s.triangularView<Eigen::Lower>() = q.middleCols(h * hd, hd) * kc.block(0, g * hd, P, hd).transpose();
        } else {
          s.noalias() = q.middleCols(h * hd, hd) * kc.block(0, g * hd, P, hd).transpose();
        }
        for (Eigen::Index t = 0; t < T; ++t) {
          const Eigen::Index visible = first_pos + t + 1;  // causal: positions 0..first_pos + t
          float* row = s.row(t).data();
          for (Eigen::Index j = 0; j < visible; ++j) row[j] *= scale;
          softmax_row(row, visible);
          for (Eigen::Index j = visible; j < P; ++j) row[j] = 0;
        }
        if (softmax_ != Element::kFp32) round_to_format(s.data(), s.rows(), s.cols(), Format{softmax_, {}});
        if (attention_ != Element::kFp32) round_to_format(s.data(), s.rows(), s.cols(), attn_fmt);
        if (causal_square) {
          out.middleCols(h * hd, hd).noalias() = s.triangularView<Eigen::Lower>() * vc.block(0, g * hd, P, hd);
        } else {
          out.middleCols(h * hd, hd).noalias() = s * vc.block(0, g * hd, P, hd);
        }
      }
    }
    round_hidden(out);
    MatrixRM o = linear(l.o, out);
    round_hidden(o);
    x += o;
    round_hidden(x);

    xb = x;
    rmsnorm(xb, l.ffn_norm);
    round_hidden(xb);
    MatrixRM gt, up;
    linears({{&l.gate, &gt}, {&l.up, &up}}, xb);
    round_hidden(gt);
    round_hidden(up);
    for (Eigen::Index i = 0; i < gt.size(); ++i) {
      const float a = gt.data()[i];
      gt.data()[i] = a / (1.0f + std::exp(-a)) * up.data()[i];
    }
    round_hidden(gt);
    MatrixRM d = linear(l.down, gt);
    round_hidden(d);
    x += d;
    round_hidden(x);
  }
  if (last_only && x.rows() > 1) x = x.bottomRows(1).eval();
  rmsnorm(x, final_norm_);
  round_hidden(x);
  return linear(head_, x);
}

void Transformer::attention_fixed_order(const MatrixRM& q, const MatrixRM& kc, const MatrixRM& vc, int first_pos, MatrixRM& out) const {
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
        for (Eigen::Index j = 0; j < visible; ++j) s[static_cast<std::size_t>(j)] = dot_fixed(qv, kc.row(j).data() + g * hd, hd) * scale;
        softmax_row(s.data(), visible);
        round_to_format(s.data(), 1, visible, soft_fmt);
        round_to_format(s.data(), 1, visible, attn_fmt);
        // out[e] = sum over j in order of p_j v_j[e]: 8 outputs at a time in registers.
        float* o = out.row(t).data() + h * hd;
        const float* v0 = vc.data() + g * hd;
        const Eigen::Index ld = vc.cols();
        Eigen::Index e0 = 0;
        for (; e0 + 8 <= hd; e0 += 8) {
          float a8[8] = {};
          for (Eigen::Index j = 0; j < visible; ++j) {
            const float p = s[static_cast<std::size_t>(j)];
            const float* vv = v0 + j * ld + e0;
            for (int l = 0; l < 8; ++l) a8[l] += p * vv[l];
          }
          std::copy(a8, a8 + 8, o + e0);
        }
        for (; e0 < hd; ++e0) {
          float a = 0;
          for (Eigen::Index j = 0; j < visible; ++j) a += s[static_cast<std::size_t>(j)] * v0[j * ld + e0];
          o[e0] = a;
        }
      }
    }
  }
}

MatrixRM Transformer::embed(std::span<const int> tokens) const {
  const TransformerConfig& c = config_;
  MatrixRM x(static_cast<Eigen::Index>(tokens.size()), c.dim);
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    const int tok = tokens[static_cast<std::size_t>(t)];
    if (tok < 0 || tok >= c.vocab) throw std::invalid_argument(fmt::format("token {} outside the vocabulary of {}", tok, c.vocab));
    x.row(t) = embedding_.row(tok);
  }
  return x;
}

MatrixRM Transformer::prefill(std::span<const int> tokens) const {
  const TransformerConfig& c = config_;
  const auto T = static_cast<Eigen::Index>(tokens.size());
  if (T == 0) return MatrixRM(0, c.vocab);
  if (T > c.max_seq) throw std::invalid_argument(fmt::format("prefill of {} tokens exceeds max_seq {}", T, c.max_seq));
  MatrixRM x = embed(tokens);
  const Eigen::Index kv_dim = static_cast<Eigen::Index>(c.kv_heads) * c.head_dim;
  std::vector<MatrixRM> kc(layers_.size(), MatrixRM(T, kv_dim)), vc(layers_.size(), MatrixRM(T, kv_dim));
  return forward_layers(std::move(x), 0, kc.data(), vc.data());
}

std::span<const float> Transformer::extend(std::span<const int> tokens) {
  const TransformerConfig& c = config_;
  if (tokens.empty()) throw std::invalid_argument("extend: no tokens");
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

int sample_token(std::span<const float> logits, double temperature, double top_p, double uniform) {
  const std::size_t n = logits.size();
  if (temperature <= 0) return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<double> p(n);
  const double mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += p[i] = std::exp((logits[i] - mx) / temperature);
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::size_t keep = n;
  if (top_p < 1.0) {
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[static_cast<std::size_t>(a)] > p[static_cast<std::size_t>(b)]; });
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
