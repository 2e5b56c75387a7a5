// The runtime's trainer: gradients against central finite differences (FP64), the FP32 training
// forward against the runtime's FP32 logits, and AdamW on a closed-form case.
#include "models/runtime/train.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "models/runtime/transformer.h"

namespace rlsim::models {
namespace {

TransformerConfig tiny(bool tied, bool interleaved) {
  TransformerConfig c;
  c.name = "tiny";
  c.dim = 8;
  c.hidden_dim = 12;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 2;
  c.vocab = 11;
  c.max_seq = 16;
  c.tied_embeddings = tied;
  c.rope_interleaved = interleaved;
  return c;
}

// L(theta) = sum_t c_t logp_t for fixed random c: every parameter's dL/dtheta from backward()
// against (L(theta + h) - L(theta - h)) / 2h, in double.
void check_gradients(bool tied, bool interleaved) {
  ModelWeights w = synthetic_weights(tiny(tied, interleaved), 7, 0.5f);
  for (auto& l : w.layers) {  // norms away from 1 so their gradients are exercised
    l.attn_norm.setConstant(1.3f);
    l.ffn_norm.setConstant(0.8f);
  }
  TrainableModel<double> m(w);
  const std::vector<int> tokens{1, 5, 3, 9, 0, 10, 4, 4, 7};
  std::mt19937 gen(3);
  std::normal_distribution<double> nd;
  std::vector<double> coef(tokens.size() - 1);
  for (double& c : coef) c = nd(gen);
  auto loss = [&] {
    const auto pass = m.forward(tokens, 0.7);
    double l = 0;
    for (std::size_t t = 0; t < coef.size(); ++t) l += coef[t] * pass.logp[t];
    return l;
  };
  m.zero_grads();
  (void)loss();
  m.backward(coef);
  auto params = m.params().tensors();
  auto grads = m.grads().tensors();
  ASSERT_EQ(params.size(), grads.size());
  const double h = 1e-6;
  double worst = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    for (Eigen::Index j = 0; j < params[i].size(); ++j) {
      const double keep = params[i][j];
      params[i][j] = keep + h;
      const double up = loss();
      params[i][j] = keep - h;
      const double down = loss();
      params[i][j] = keep;
      const double fd = (up - down) / (2 * h);
      const double err = std::fabs(fd - grads[i][j]) / std::max(1.0, std::fabs(fd));
      worst = std::max(worst, err);
      EXPECT_LT(err, 1e-6) << "tensor " << i << " element " << j << ": backward " << grads[i][j] << ", finite difference " << fd;
    }
  }
  std::cout << "[ figure ] worst gradient error (tied " << tied << ", interleaved RoPE " << interleaved << "): " << worst << "\n";
}

TEST(Train, GradientsMatchFiniteDifferencesTied) { check_gradients(true, true); }
TEST(Train, GradientsMatchFiniteDifferencesUntiedRotateHalf) { check_gradients(false, false); }

// The FP32 training forward and the runtime's FP32 prefill compute the same function.
TEST(Train, Fp32ForwardReproducesTheRuntimesLogits) {
  const ModelWeights w = load_model(std::string(RLSIM_SHARED_DIR) + "/models/stories260K/stories260K.bin");
  const Transformer runtime(w, runtime_precision("fp32"));
  TrainableModel<float> trainer(w);
  std::vector<int> tokens{1};
  for (int i = 0; i < 63; ++i) tokens.push_back((i * 37 + 11) % w.config.vocab);
  const MatrixRM logits = runtime.prefill(tokens);
  const auto pass = trainer.forward(tokens);
  double worst = 0;
  for (std::size_t t = 0; t + 1 < tokens.size(); ++t) {
    const auto row = logits.row(static_cast<Eigen::Index>(t));
    const double m = row.maxCoeff();
    const double lse = m + std::log((row.array().cast<double>() - m).exp().sum());
    worst = std::max(worst, std::fabs(row[tokens[t + 1]] - lse - pass.logp[t]));
  }
  EXPECT_LT(worst, 2e-4);
  std::cout << "[ figure ] stories260K FP32 trainer vs runtime: max |delta logp| " << worst << "\n";
}

// One AdamW step with bias correction moves every weight by lr * sign(g) (|m_hat / sqrt(v_hat)| = 1).
TEST(Train, AdamWFirstStepIsLrTimesSign) {
  ModelWeights w = synthetic_weights(tiny(true, true), 1, 0.1f);
  TrainableModel<float> m(w);
  Params<float> before = m.params();
  Params<float> g = m.params().zeros_like();
  auto gt = g.tensors();
  for (auto& t : gt) {
    for (Eigen::Index j = 0; j < t.size(); ++j) t[j] = (j % 2 ? 1e-3f : -2e-3f);
  }
  AdamW opt({.lr = 0.01, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-12, .weight_decay = 0.0, .clip = 0.0});
  const double norm = opt.step(m.params(), g);
  EXPECT_GT(norm, 0);
  auto pa = m.params().tensors();
  auto pb = before.tensors();
  for (std::size_t i = 0; i < pa.size(); ++i) {
    for (Eigen::Index j = 0; j < pa[i].size(); ++j) EXPECT_NEAR(pa[i][j] - pb[i][j], j % 2 ? -0.01 : 0.01, 1e-6);
  }
}

}  // namespace
}  // namespace rlsim::models
