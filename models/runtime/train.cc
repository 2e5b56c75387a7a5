#include "models/runtime/train.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "models/runtime/transformer.h"

namespace rlsim::models {
namespace {

template <typename S>
using MatT = typename Params<S>::Mat;
template <typename S>
using VecT = typename Params<S>::Vec;

// y = g * x * r per row, r = 1 / sqrt(mean(x^2) + eps); returns r per row.
template <typename S>
VecT<S> rmsnorm(const MatT<S>& x, const VecT<S>& g, S eps, MatT<S>& y) {
  VecT<S> r(x.rows());
  y.resize(x.rows(), x.cols());
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    r[t] = S(1) / std::sqrt(x.row(t).squaredNorm() / static_cast<S>(x.cols()) + eps);
    y.row(t) = (x.row(t) * r[t]).cwiseProduct(g.transpose());
  }
  return r;
}

// Backward of rmsnorm: adds dL/dg to dg and returns dL/dx.
template <typename S>
MatT<S> rmsnorm_backward(const MatT<S>& x, const VecT<S>& r, const VecT<S>& g, const MatT<S>& dy, VecT<S>& dg) {
  MatT<S> dx(x.rows(), x.cols());
  const S d = static_cast<S>(x.cols());
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    dg += (dy.row(t).cwiseProduct(x.row(t)) * r[t]).transpose();
    const auto dxhat = dy.row(t).cwiseProduct(g.transpose());
    const S dot = dxhat.dot(x.row(t));
    dx.row(t) = dxhat * r[t] - x.row(t) * (r[t] * r[t] * r[t] * dot / d);
  }
  return dx;
}

// Rotates each head's pairs by position * inv_freq (sign = -1: the inverse rotation).
template <typename S>
void rope(MatT<S>& x, int heads, int hd, bool interleaved, const std::vector<S>& inv_freq, S sign) {
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    for (int h = 0; h < heads; ++h) {
      S* v = x.row(t).data() + static_cast<std::ptrdiff_t>(h) * hd;
      for (int j = 0; j < hd / 2; ++j) {
        const S ang = static_cast<S>(t) * inv_freq[static_cast<std::size_t>(j)];
        const S c = std::cos(ang), s = sign * std::sin(ang);
        const int a = interleaved ? 2 * j : j, b = interleaved ? 2 * j + 1 : j + hd / 2;
        const S v0 = v[a], v1 = v[b];
        v[a] = v0 * c - v1 * s;
        v[b] = v0 * s + v1 * c;
      }
    }
  }
}

template <typename S>
S silu(S a) {
  return a / (S(1) + std::exp(-a));
}

template <typename S>
MatT<S> to(const MatrixRM& m) {
  return m.cast<S>();
}
template <typename S>
VecT<S> to(const VectorF& v) {
  return v.cast<S>();
}

// Causal softmax attention of H heads over q [T, H hd], k and v [T, KV hd] (grouped-query: head h
// reads KV head h / (H / KV)), scores scaled by 1 / sqrt(hd); returns the heads' outputs
// [T, H hd] and keeps each head's probabilities [T, T] (zero above the diagonal) in `probs`.
template <typename S>
MatT<S> causal_attention(const MatT<S>& q, const MatT<S>& k, const MatT<S>& v, int H, int KV, int hd,
                         std::vector<MatT<S>>& probs) {
  const Eigen::Index T = q.rows();
  const int group = H / KV;
  const S scale = S(1) / std::sqrt(static_cast<S>(hd));
  MatT<S> attn(T, static_cast<Eigen::Index>(H) * hd);
  probs.resize(static_cast<std::size_t>(H));
  for (int h = 0; h < H; ++h) {
    const int g = h / group;
    MatT<S> s = q.middleCols(h * hd, hd) * k.middleCols(g * hd, hd).transpose() * scale;
    for (Eigen::Index i = 0; i < T; ++i) {
      const S m = s.row(i).head(i + 1).maxCoeff();
      S sum = 0;
      for (Eigen::Index j = 0; j <= i; ++j) sum += (s(i, j) = std::exp(s(i, j) - m));
      s.row(i).head(i + 1) /= sum;
      s.row(i).tail(T - i - 1).setZero();
    }
    attn.middleCols(h * hd, hd) = s * v.middleCols(g * hd, hd);
    probs[static_cast<std::size_t>(h)] = std::move(s);
  }
  return attn;
}

// Row t of `logits` [T - 1, vocab] predicts tokens[t + 1]: appends its log-probability and the
// entropy (nats) of the row's softmax to `logp` and `entropy`; each row becomes its softmax.
template <typename S>
void next_token_stats(MatT<S>& logits, std::span<const int> tokens, std::vector<double>& logp, std::vector<double>& entropy) {
  for (Eigen::Index t = 0; t < logits.rows(); ++t) {
    auto row = logits.row(t);
    const int y = tokens[static_cast<std::size_t>(t + 1)];
    const S zy = row[y];  // temperature-scaled logit of the next token
    const S m = row.maxCoeff();
    row = (row.array() - m).exp();
    const S sum = row.sum();
    row /= sum;
    double ent = 0;
    for (Eigen::Index v = 0; v < row.size(); ++v) {
      if (row[v] > 0) ent -= static_cast<double>(row[v]) * std::log(static_cast<double>(row[v]));
    }
    logp.push_back(static_cast<double>(zy - m - std::log(sum)));
    entropy.push_back(ent);
  }
}

}  // namespace

template <typename S>
std::vector<Eigen::Map<VecT<S>>> Params<S>::tensors() {
  std::vector<Eigen::Map<Vec>> out;
  auto add = [&](auto& m) {
    if (m.size() > 0) out.emplace_back(m.data(), m.size());
  };
  add(embedding);
  for (auto& l : layers) {
    add(l.attn_norm);
    add(l.wq);
    add(l.wk);
    add(l.wv);
    add(l.wo);
    add(l.ffn_norm);
    add(l.w_gate);
    add(l.w_up);
    add(l.w_down);
  }
  add(final_norm);
  add(lm_head);
  return out;
}

template <typename S>
Params<S> Params<S>::zeros_like() const {
  Params z = *this;
  for (auto& t : z.tensors()) t.setZero();
  return z;
}

template <typename S>
struct TrainableModel<S>::Saved {
  struct Layer {
    Mat x_in, xn1, xq1, q, k, v, attn_q, x_mid, xn2, xq2, a, b, hq;
    Vec r1, r2;
    std::vector<Mat> probs;  // per head [T, T]
  };
  std::vector<int> tokens;
  double temperature = 1;
  std::vector<Layer> layers;
  Mat x_final, xnf, xqf;
  Vec rf;
  Mat probs;  // [T-1, vocab] at the temperature
};

template <typename S>
TrainableModel<S>::TrainableModel(const ModelWeights& init, std::optional<Recipe> precision)
    : c_(init.config), recipe_(std::move(precision)) {
  if (c_.qkv_bias || c_.qk_norm || c_.experts > 0)
    throw std::invalid_argument(fmt::format("{}: training supports dense Llama models without qkv_bias or qk_norm", c_.name));
  if constexpr (!std::is_same_v<S, float>) {
    if (recipe_) throw std::invalid_argument("a recipe's training forward runs in float; double takes FP32 only");
  }
  p_.embedding = to<S>(init.embedding);
  for (const auto& l : init.layers) {
    p_.layers.push_back({to<S>(l.attn_norm), to<S>(l.ffn_norm), to<S>(l.wq), to<S>(l.wk), to<S>(l.wv), to<S>(l.wo),
                         to<S>(l.w_gate), to<S>(l.w_up), to<S>(l.w_down)});
  }
  p_.final_norm = to<S>(init.final_norm);
  if (!c_.tied_embeddings) p_.lm_head = to<S>(init.lm_head);
  g_ = p_.zeros_like();
  for (const float f : rope_inv_freq(c_)) inv_freq_.push_back(static_cast<S>(f));
}

template <typename S>
TrainableModel<S>::~TrainableModel() = default;
template <typename S>
TrainableModel<S>::TrainableModel(TrainableModel&&) noexcept = default;
template <typename S>
TrainableModel<S>& TrainableModel<S>::operator=(TrainableModel&&) noexcept = default;

template <typename S>
void TrainableModel<S>::zero_grads() {
  for (auto& t : g_.tensors()) t.setZero();
}

template <typename S>
void TrainableModel<S>::round_input(Mat& x, const Format& f) const {
  if constexpr (std::is_same_v<S, float>) {
    if (recipe_) round_to_format(x.data(), x.rows(), x.cols(), f);
  }
}

template <typename S>
void TrainableModel<S>::quantise_weights() {
  w_ = p_;
  if constexpr (std::is_same_v<S, float>) {
    if (!recipe_) return;
    const Format& fw = recipe_->linear.weight;
    for (auto& l : w_.layers) {
      for (Mat* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
        round_to_format(m->data(), m->rows(), m->cols(), fw);
    }
    round_to_format(w_.embedding.data(), w_.embedding.rows(), w_.embedding.cols(), recipe_->embedding);
    if (!c_.tied_embeddings) round_to_format(w_.lm_head.data(), w_.lm_head.rows(), w_.lm_head.cols(), recipe_->lm_head.weight);
  }
}

template <typename S>
typename TrainableModel<S>::Pass TrainableModel<S>::forward(std::span<const int> tokens, double temperature) {
  const auto T = static_cast<Eigen::Index>(tokens.size());
  if (T < 2 || T > c_.max_seq)
    throw std::invalid_argument(fmt::format("a training sequence needs 2..{} tokens, got {}", c_.max_seq, T));
  if (!(temperature > 0)) throw std::invalid_argument("temperature must be > 0");
  quantise_weights();
  saved_ = std::make_unique<Saved>();
  Saved& sv = *saved_;
  sv.tokens.assign(tokens.begin(), tokens.end());
  sv.temperature = temperature;
  const int hd = c_.head_dim, H = c_.heads, KV = c_.kv_heads;
  const S eps = static_cast<S>(c_.norm_eps);
  const Format f_act = recipe_ ? recipe_->linear.activation : Format{Element::kFp32, {}};
  Mat x(T, c_.dim);
  for (Eigen::Index t = 0; t < T; ++t) {
    const int tok = tokens[static_cast<std::size_t>(t)];
    if (tok < 0 || tok >= c_.vocab)
      throw std::invalid_argument(fmt::format("token {} outside the vocabulary of {}", tok, c_.vocab));
    x.row(t) = w_.embedding.row(tok);
  }
  for (std::size_t li = 0; li < w_.layers.size(); ++li) {
    const auto& w = w_.layers[li];
    typename Saved::Layer& a = sv.layers.emplace_back();
    a.x_in = x;
    a.r1 = rmsnorm<S>(x, w.attn_norm, eps, a.xn1);
    a.xq1 = a.xn1;
    round_input(a.xq1, f_act);
    a.q = a.xq1 * w.wq.transpose();
    a.k = a.xq1 * w.wk.transpose();
    a.v = a.xq1 * w.wv.transpose();
    rope<S>(a.q, H, hd, c_.rope_interleaved, inv_freq_, S(1));
    rope<S>(a.k, KV, hd, c_.rope_interleaved, inv_freq_, S(1));
    a.attn_q = causal_attention<S>(a.q, a.k, a.v, H, KV, hd, a.probs);
    round_input(a.attn_q, f_act);
    x += a.attn_q * w.wo.transpose();
    a.x_mid = x;
    a.r2 = rmsnorm<S>(x, w.ffn_norm, eps, a.xn2);
    a.xq2 = a.xn2;
    round_input(a.xq2, f_act);
    a.a = a.xq2 * w.w_gate.transpose();
    a.b = a.xq2 * w.w_up.transpose();
    a.hq = a.a.unaryExpr([](S v) { return silu(v); }).cwiseProduct(a.b);
    round_input(a.hq, f_act);
    x += a.hq * w.w_down.transpose();
  }
  sv.x_final = x.topRows(T - 1);
  sv.rf = rmsnorm<S>(sv.x_final, w_.final_norm, eps, sv.xnf);
  sv.xqf = sv.xnf;
  if (recipe_) round_input(sv.xqf, recipe_->lm_head.activation);
  const Mat& cls = c_.tied_embeddings ? w_.embedding : w_.lm_head;
  sv.probs = sv.xqf * cls.transpose() / static_cast<S>(temperature);
  Pass out;
  next_token_stats<S>(sv.probs, tokens, out.logp, out.entropy);
  return out;
}

template <typename S>
void TrainableModel<S>::backward(std::span<const double> dlogp) {
  if (!saved_) throw std::logic_error("backward() without a forward()");
  Saved& sv = *saved_;
  const auto T = static_cast<Eigen::Index>(sv.tokens.size());
  if (static_cast<Eigen::Index>(dlogp.size()) != T - 1)
    throw std::invalid_argument(fmt::format("backward: {} log-prob gradients for {} positions", dlogp.size(), T - 1));
  const int hd = c_.head_dim, H = c_.heads, KV = c_.kv_heads, group = H / KV;
  const S scale = S(1) / std::sqrt(static_cast<S>(hd));
  // d logp_t(y) / d z = onehot(y) - p; z = logits / temperature.
  Mat dlogits = -sv.probs;
  for (Eigen::Index t = 0; t < T - 1; ++t) {
    dlogits(t, sv.tokens[static_cast<std::size_t>(t + 1)]) += S(1);
    dlogits.row(t) *= static_cast<S>(dlogp[static_cast<std::size_t>(t)] / sv.temperature);
  }
  const Mat& cls = c_.tied_embeddings ? w_.embedding : w_.lm_head;
  Mat& dcls = c_.tied_embeddings ? g_.embedding : g_.lm_head;
  dcls.noalias() += dlogits.transpose() * sv.xqf;
  const Mat dxnf = dlogits * cls;  // straight through the lm_head input rounding
  Mat dx = Mat::Zero(T, c_.dim);
  dx.topRows(T - 1) = rmsnorm_backward<S>(sv.x_final, sv.rf, w_.final_norm, dxnf, g_.final_norm);
  for (std::size_t li = w_.layers.size(); li-- > 0;) {
    const auto& w = w_.layers[li];
    auto& gw = g_.layers[li];
    const typename Saved::Layer& a = sv.layers[li];
    // FFN: x_out = x_mid + hq W_down^T, hq = silu(a) * b.
    gw.w_down.noalias() += dx.transpose() * a.hq;
    const Mat dh = dx * w.w_down;
    Mat da(T, a.a.cols()), db(T, a.b.cols());
    for (Eigen::Index i = 0; i < T; ++i) {
      for (Eigen::Index j = 0; j < a.a.cols(); ++j) {
        const S z = a.a(i, j), sig = S(1) / (S(1) + std::exp(-z));
        db(i, j) = dh(i, j) * z * sig;
        da(i, j) = dh(i, j) * a.b(i, j) * sig * (S(1) + z * (S(1) - sig));
      }
    }
    gw.w_gate.noalias() += da.transpose() * a.xq2;
    gw.w_up.noalias() += db.transpose() * a.xq2;
    const Mat dxn2 = da * w.w_gate + db * w.w_up;
    dx += rmsnorm_backward<S>(a.x_mid, a.r2, w.ffn_norm, dxn2, gw.ffn_norm);
    // Attention: x_mid = x_in + attn W_o^T.
    gw.wo.noalias() += dx.transpose() * a.attn_q;
    const Mat dattn = dx * w.wo;
    Mat dq = Mat::Zero(T, static_cast<Eigen::Index>(H) * hd);
    Mat dk = Mat::Zero(T, static_cast<Eigen::Index>(KV) * hd);
    Mat dv = Mat::Zero(T, static_cast<Eigen::Index>(KV) * hd);
    for (int h = 0; h < H; ++h) {
      const int g = h / group;
      const Mat& P = a.probs[static_cast<std::size_t>(h)];
      const Mat dO = dattn.middleCols(h * hd, hd);
      dv.middleCols(g * hd, hd).noalias() += P.transpose() * dO;
      const Mat dP = dO * a.v.middleCols(g * hd, hd).transpose();
      Mat dS = P.cwiseProduct(dP);
      const Vec rowdot = dS.rowwise().sum();
      dS -= P.cwiseProduct(rowdot.replicate(1, T));
      dS *= scale;
      dq.middleCols(h * hd, hd).noalias() += dS * a.k.middleCols(g * hd, hd);
      dk.middleCols(g * hd, hd).noalias() += dS.transpose() * a.q.middleCols(h * hd, hd);
    }
    rope<S>(dq, H, hd, c_.rope_interleaved, inv_freq_, S(-1));
    rope<S>(dk, KV, hd, c_.rope_interleaved, inv_freq_, S(-1));
    gw.wq.noalias() += dq.transpose() * a.xq1;
    gw.wk.noalias() += dk.transpose() * a.xq1;
    gw.wv.noalias() += dv.transpose() * a.xq1;
    const Mat dxn1 = dq * w.wq + dk * w.wk + dv * w.wv;
    dx += rmsnorm_backward<S>(a.x_in, a.r1, w.attn_norm, dxn1, gw.attn_norm);
  }
  for (Eigen::Index t = 0; t < T; ++t) g_.embedding.row(sv.tokens[static_cast<std::size_t>(t)]) += dx.row(t);
}

template <typename S>
ModelWeights TrainableModel<S>::weights() const {
  ModelWeights m;
  m.config = c_;
  m.embedding = p_.embedding.template cast<float>();
  for (const auto& l : p_.layers) {
    LayerWeights w;
    w.attn_norm = l.attn_norm.template cast<float>();
    w.ffn_norm = l.ffn_norm.template cast<float>();
    w.wq = l.wq.template cast<float>();
    w.wk = l.wk.template cast<float>();
    w.wv = l.wv.template cast<float>();
    w.wo = l.wo.template cast<float>();
    w.w_gate = l.w_gate.template cast<float>();
    w.w_up = l.w_up.template cast<float>();
    w.w_down = l.w_down.template cast<float>();
    m.layers.push_back(std::move(w));
  }
  m.final_norm = p_.final_norm.template cast<float>();
  if (!c_.tied_embeddings) m.lm_head = p_.lm_head.template cast<float>();
  return m;
}

double AdamW::step(Params<float>& p, Params<float>& g) {
  if (!m_) {
    m_ = p.zeros_like();
    v_ = p.zeros_like();
  }
  auto gs = g.tensors();
  double norm2 = 0;
  for (const auto& t : gs) norm2 += t.template cast<double>().squaredNorm();
  const double norm = std::sqrt(norm2);
  const double clip = o_.clip > 0 && norm > o_.clip ? o_.clip / norm : 1.0;
  ++t_;
  const double bc1 = 1 - std::pow(o_.beta1, static_cast<double>(t_));
  const double bc2 = 1 - std::pow(o_.beta2, static_cast<double>(t_));
  auto ps = p.tensors();
  auto ms = m_->tensors();
  auto vs = v_->tensors();
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const bool matrix = ps[i].size() > static_cast<Eigen::Index>(p.final_norm.size());  // norms are [dim]
    for (Eigen::Index j = 0; j < ps[i].size(); ++j) {
      const double gj = gs[i][j] * clip;
      ms[i][j] = static_cast<float>(o_.beta1 * ms[i][j] + (1 - o_.beta1) * gj);
      vs[i][j] = static_cast<float>(o_.beta2 * vs[i][j] + (1 - o_.beta2) * gj * gj);
      const double mhat = ms[i][j] / bc1, vhat = vs[i][j] / bc2;
      double w = ps[i][j];
      if (matrix) w -= o_.lr * o_.weight_decay * w;
      w -= o_.lr * mhat / (std::sqrt(vhat) + o_.eps);
      ps[i][j] = static_cast<float>(w);
    }
  }
  return norm;
}

template struct Params<float>;
template struct Params<double>;
template class TrainableModel<float>;
template class TrainableModel<double>;

}  // namespace rlsim::models
