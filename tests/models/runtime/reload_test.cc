// The weight reload lifecycle (models/runtime/weight_lifecycle.h, reload.h): 500 reload cycles of
// fp8-block, mxfp8 (Ascend layout) and int4-w4a16-g32 (packed + tile-permuted) on stories260K and
// on a synthetic MoE model, bit-exact against a fresh load every 50th cycle with every kernel
// buffer at its first address; the state machine's errors; restore as the exact inverse of the
// transform (a partial reload leaves untouched tensors as a fresh load has them); the kernel
// layouts' byte positions.
#include "models/runtime/reload.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "models/precision/quantize.h"
#include "models/runtime/kernels.h"
#include "models/runtime/transformer.h"
#include "models/runtime/weight_lifecycle.h"
#include "tests/models/runtime/test_data.h"

namespace rlsim::models {
namespace {

namespace fs = std::filesystem;

const ModelWeights& stories() {
  static const ModelWeights w =
      load_llama2c((fs::path(RLSIM_SHARED_DIR) / "models" / "stories260K" / "stories260K.bin").string());
  return w;
}

const ModelWeights& moe() {
  static const ModelWeights w = synthetic_weights(synthetic_moe_config(), 7);
  return w;
}

using test_data::normal;

std::vector<int> probe(int vocab, int n) {
  std::mt19937 g(3);
  std::vector<int> t(static_cast<std::size_t>(n));
  for (int& x : t) x = static_cast<int>(g() % static_cast<unsigned>(vocab));
  return t;
}

// --- Many cycles (500; 100 under the sanitizers) -----------------------------------------------

// Reload cycles of ReloadCycles: 500; 100 under the sanitizers, whose build is there for memory
// and undefined-behaviour errors that every cycle's same code paths meet in the first cycles (the
// six cases at 500 took 239 of the ASan + UBSan suite's 999 CPU seconds, 2026-11-29). A fresh
// load is compared every tenth of the run, 10 checks either way.
#ifdef RLSIM_SANITIZED_TESTS
constexpr int kReloadCycles = 100;
#else
constexpr int kReloadCycles = 500;
#endif
constexpr int kReloadChecks = 10;
static_assert(kReloadCycles % kReloadChecks == 0);

struct CycleCase {
  const char* model;
  const char* precision;
};

class ReloadCycles : public ::testing::TestWithParam<CycleCase> {};

TEST_P(ReloadCycles, ManyReloadsStayBitExactWithAFreshLoadInPlace) {
  const CycleCase& k = GetParam();
  const ModelWeights& w = std::string(k.model) == "moe" ? moe() : stories();
  const RuntimePrecision p = runtime_precision(k.precision);
  constexpr int kCheckEvery = kReloadCycles / kReloadChecks;
  ReloadOptions o;
  o.cycles = kReloadCycles;
  o.check_every = kCheckEvery;
  o.seed = 11;
  o.probe_tokens = 24;
  int cycles_seen = 0;
  const ReloadReport r = run_reload(w, p, KernelMode::kDefault, o, [&](const ReloadCycle& c) {
    ++cycles_seen;
    EXPECT_EQ(c.checked, c.cycle % kCheckEvery == 0) << c.cycle;
  });
  EXPECT_EQ(cycles_seen, kReloadCycles);
  ASSERT_EQ(r.cycles.size(), static_cast<std::size_t>(kReloadCycles));
  EXPECT_EQ(r.checks, kReloadChecks);
  for (const ReloadCycle& c : r.cycles) {
    if (c.checked) {
      EXPECT_EQ(c.logit_diff, 0.0) << "cycle " << c.cycle;
    }
    EXPECT_TRUE(c.addresses_stable) << "cycle " << c.cycle;
    // Every stage ran over the whole model: restore and transform move the quantised bytes.
    EXPECT_GT(c.stats.restore_bytes, 0u);
    EXPECT_GT(c.stats.quantize_bytes, 0u);
    EXPECT_EQ(c.stats.transform_bytes, r.cycles.front().stats.transform_bytes);
  }
  EXPECT_EQ(r.max_abs_logit_diff, 0.0);
  EXPECT_TRUE(r.addresses_stable);
  EXPECT_GT(r.kernel_buffers, 50u);

  // The reloads were not vacuous: after the updates the weights give other logits than the first
  // load, and the engine tracked them (the last check compared it with a fresh load of them).
  ModelWeights last = w;
  for (int c = 1; c <= kReloadCycles; ++c) perturb_weights(last, 11, c, o.perturbation);
  Transformer first(w, p), fresh(last, p);
  const std::vector<int> t = probe(w.config.vocab, 8);
  EXPECT_GT(max_abs_logit_diff(first, fresh, t), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Formats, ReloadCycles,
                         ::testing::Values(CycleCase{"stories260K", "fp8-block"}, CycleCase{"stories260K", "mxfp8"},
                                           CycleCase{"stories260K", "int4-w4a16-g32"}, CycleCase{"moe", "fp8-block"},
                                           CycleCase{"moe", "mxfp8"}, CycleCase{"moe", "int4-w4a16-g32"}),
                         [](const ::testing::TestParamInfo<CycleCase>& param) {
                           std::string n = std::string(param.param.model) + "_" + param.param.precision;
                           for (char& ch : n) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

TEST(Reload, TheKernelLayoutsAreTheIssuesOnes) {
  const Transformer fp8(stories(), runtime_precision("fp8-block")), mx(stories(), runtime_precision("mxfp8")),
      i4(stories(), runtime_precision("int4-w4a16-g32"));
  // decode_weight_bytes reads the packed weights: MXFP8 (1 byte + 1/32 scale byte) is above
  // fp8-block (1 byte + 4 bytes per 128x128 block) only by its scales, INT4 g32 about half.
  EXPECT_GT(mx.decode_weight_bytes(), fp8.decode_weight_bytes());
  EXPECT_LT(i4.decode_weight_bytes(), fp8.decode_weight_bytes());
  EXPECT_EQ(PackedWeight::layout_for(parse_format("mxfp8")), WeightLayout::kE4M3KMajor);
  EXPECT_EQ(PackedWeight::layout_for(parse_format("fp8-e4m3/block128x128")), WeightLayout::kE4M3);
  EXPECT_EQ(PackedWeight::layout_for(parse_format("int4/group32")), WeightLayout::kNibble);
}

// --- the state machine -------------------------------------------------------------------------

TEST(WeightLifecycle, WrongStatesAreClearErrorsAndRestoreTwiceIsANoOp) {
  const std::int64_t rows = 40, cols = 96;
  const std::vector<float> v = normal(static_cast<std::size_t>(rows * cols), 1, 0.05f);
  ReloadStats st;
  QuantizedLinear l("layers.0.q_proj", parse_format("fp8-e4m3/block128x128"), rows, cols);
  EXPECT_EQ(l.state(), WeightState::kRestored);
  try {
    l.process_weights_after_loading(st);
    FAIL() << "process before any load";
  } catch (const WeightStateError& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.q_proj"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nothing has been loaded"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)l.packed(), WeightStateError);
  EXPECT_THROW(l.load_weight(std::span<const float>(v.data(), v.size() - 1), st), std::invalid_argument);
  l.load_weight(v, st);
  EXPECT_EQ(l.state(), WeightState::kLoaded);
  l.restore_weights_for_loading(st);  // loaded: already the loader layout, a no-op
  EXPECT_EQ(l.state(), WeightState::kLoaded);
  l.process_weights_after_loading(st);
  EXPECT_EQ(l.state(), WeightState::kTransformed);
  const void* codes = l.packed().code_storage();
  try {
    l.load_weight(v, st);
    FAIL() << "load into the kernel layout";
  } catch (const WeightStateError& e) {
    EXPECT_NE(std::string(e.what()).find("restore_weights_for_loading first"), std::string::npos) << e.what();
  }
  EXPECT_THROW(l.process_weights_after_loading(st), WeightStateError);
  EXPECT_EQ(l.state(), WeightState::kTransformed);  // the failed calls changed nothing
  l.restore_weights_for_loading(st);
  EXPECT_EQ(l.state(), WeightState::kRestored);
  const std::vector<std::uint8_t> once = l.loader_image();
  const ReloadStats before = st;
  l.restore_weights_for_loading(st);  // twice: a no-op, nothing moved
  EXPECT_EQ(l.state(), WeightState::kRestored);
  EXPECT_EQ(l.loader_image(), once);
  EXPECT_EQ(st.restore_bytes, before.restore_bytes);
  EXPECT_THROW((void)l.packed(), WeightStateError);
  // Restored without a new load: processing transforms the restored layout back.
  l.process_weights_after_loading(st);
  EXPECT_EQ(l.state(), WeightState::kTransformed);
  EXPECT_EQ(l.packed().code_storage(), codes);
  // A reload of another format is refused without touching the storage.
  l.restore_weights_for_loading(st);
  const QuantizedTensor other = quantize(parse_format("mxfp8"), rows, cols, std::span<const float>(v));
  EXPECT_THROW(l.load_quantized(other, st), std::invalid_argument);
  EXPECT_EQ(l.loader_image(), once);
}

TEST(WeightLifecycle, NanMasterWeightsAreRefusedNotStored) {
  const std::int64_t rows = 8, cols = 64;
  std::vector<float> v = normal(static_cast<std::size_t>(rows * cols), 2, 0.05f);
  ReloadStats st;
  QuantizedLinear l("w", parse_format("mxfp8"), rows, cols);
  l.load_weight(v, st);
  l.process_weights_after_loading(st);
  l.restore_weights_for_loading(st);
  const std::vector<std::uint8_t> image = l.loader_image();
  v[5] = NAN;
  l.load_weight(v, st);
  EXPECT_THROW(l.process_weights_after_loading(st), std::invalid_argument);
  EXPECT_EQ(l.state(), WeightState::kLoaded);
  EXPECT_EQ(l.loader_image(), image);
}

TEST(WeightLifecycle, ExpertGroupRefusesPartlyLoadedExperts) {
  const int experts = 3;
  const std::int64_t dim = 64, hidden = 32;
  const std::vector<float> a = normal(static_cast<std::size_t>(dim * hidden), 3, 0.05f);
  ReloadStats st;
  QuantizedExpertGroup g("layers.1.experts", parse_format("int4/group32"), experts, dim, hidden);
  for (int e = 0; e < experts; ++e) {
    for (ExpertShard s : {ExpertShard::kW1, ExpertShard::kW3, ExpertShard::kW2}) g.load_expert(e, s, a, st);
  }
  g.process_weights_after_loading(st);
  EXPECT_EQ(g.state(), WeightState::kTransformed);
  EXPECT_EQ(g.w13(0).rows(), 2 * hidden);
  EXPECT_EQ(g.w2(2).cols(), hidden);
  EXPECT_THROW(g.load_expert(0, ExpertShard::kW1, a, st), WeightStateError);
  g.restore_weights_for_loading(st);
  g.restore_weights_for_loading(st);
  EXPECT_THROW((void)g.w13(0), WeightStateError);
  g.load_expert(1, ExpertShard::kW1, a, st);  // only the gate half of expert 1
  try {
    g.process_weights_after_loading(st);
    FAIL() << "half-loaded expert";
  } catch (const WeightStateError& e) {
    EXPECT_NE(std::string(e.what()).find("expert 1"), std::string::npos) << e.what();
  }
  g.load_expert(1, ExpertShard::kW3, a, st);
  EXPECT_THROW(g.process_weights_after_loading(st), WeightStateError);  // w2 still missing
  g.load_expert(1, ExpertShard::kW2, a, st);
  g.process_weights_after_loading(st);
  EXPECT_EQ(g.state(), WeightState::kTransformed);
  EXPECT_THROW(g.load_expert(experts, ExpertShard::kW2, a, st), WeightStateError);  // transformed first
  g.restore_weights_for_loading(st);
  EXPECT_THROW(g.load_expert(experts, ExpertShard::kW2, a, st), std::invalid_argument);
  EXPECT_THROW(g.load_expert(0, ExpertShard::kW2, std::span<const float>(a.data(), 10), st), std::invalid_argument);
  // A NaN in the last expert: nothing is transformed, and processing after a good reload is exact.
  std::vector<float> bad = a;
  bad[3] = NAN;
  for (int e = 0; e < experts; ++e) {
    for (ExpertShard s : {ExpertShard::kW1, ExpertShard::kW3}) g.load_expert(e, s, a, st);
    g.load_expert(e, ExpertShard::kW2, e == experts - 1 ? std::span<const float>(bad) : std::span<const float>(a), st);
  }
  EXPECT_THROW(g.process_weights_after_loading(st), std::invalid_argument);
  EXPECT_EQ(g.state(), WeightState::kLoaded);
  g.restore_weights_for_loading(st);  // a no-op: everything is in the loader layout
  g.load_expert(experts - 1, ExpertShard::kW2, a, st);
  g.process_weights_after_loading(st);
  const PackedWeight ref(quantize(parse_format("int4/group32"), dim, hidden, std::span<const float>(a)));
  for (int e = 0; e < experts; ++e) {
    for (std::int64_t r = 0; r < dim; r += 7) {
      for (std::int64_t c = 0; c < hidden; c += 3) ASSERT_EQ(g.w2(e).at(r, c), ref.at(r, c)) << e;
    }
  }
}

TEST(WeightLifecycle, AForwardPassNeedsTransformedWeights) {
  Transformer t(stories(), runtime_precision("int4-w4a16-g32"));
  const std::vector<int> tok = {1, 5, 9};
  EXPECT_TRUE(t.weights_ready());
  (void)t.prefill(tok);
  t.restore_weights_for_loading();
  EXPECT_FALSE(t.weights_ready());
  EXPECT_THROW((void)t.prefill(tok), WeightStateError);
  // Loading into a transformed engine is refused before anything (a norm included) is written.
  Transformer u(stories(), runtime_precision("fp8-block"));
  const MatrixRM before = u.prefill(tok);
  ModelWeights other = stories();
  perturb_weights(other, 1, 1, 0.1);
  EXPECT_THROW(u.load_layer(0, other.layers[0]), WeightStateError);
  EXPECT_THROW(u.load_weights(other), WeightStateError);
  EXPECT_TRUE(u.weights_ready());
  EXPECT_EQ(u.prefill(tok), before);
  EXPECT_THROW((void)t.decode(1), WeightStateError);
  EXPECT_NO_THROW(t.restore_weights_for_loading()) << "restore twice is a no-op, not an error";
  EXPECT_FALSE(t.weights_ready());
}

// --- restore is the exact inverse --------------------------------------------------------------

TEST(WeightLifecycle, RestoreGivesBackTheLoaderBytesOfEveryLayout) {
  const char* formats[] = {
      "fp8-e4m3/block128x128", "mxfp8", "int4/group32", "int4/group128", "int4/channel", "nvfp4",       "mxfp4",
      "fp8-e4m3/tensor",       "bf16",  "fp16",         "fp32",          "hif8/tensor",  "int8/channel"};
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{64, 256}, {37, 200}, {5, 33}, {130, 96}};
  for (const char* name : formats) {
    for (const auto& [rows, cols] : shapes) {
      SCOPED_TRACE(fmt::format("{} {}x{}", name, rows, cols));
      const Format f = parse_format(name);
      const std::vector<float> v = normal(static_cast<std::size_t>(rows * cols), 9, 0.03f);
      const QuantizedTensor q = quantize(f, rows, cols, std::span<const float>(v));
      PackedWeight ref = PackedWeight::reloadable(f, rows, cols, q.block_rows, q.block_cols);
      ref.store_loader(q);
      const std::vector<std::uint8_t> loader = ref.loader_image();
      ReloadStats st;
      QuantizedLinear l("w", f, rows, cols);
      l.load_weight(v, st);
      l.process_weights_after_loading(st);
      const PackedWeight& p = l.packed();
      const PackedWeight direct(q);
      const std::vector<double> deq = dequantize(q);
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < cols; ++c) {
          ASSERT_EQ(p.at(r, c), direct.at(r, c)) << r << "," << c;
          ASSERT_EQ(p.at(r, c), static_cast<float>(deq[static_cast<std::size_t>(r * cols + c)]));
        }
      }
      l.restore_weights_for_loading(st);
      EXPECT_EQ(l.loader_image(), loader);
      l.process_weights_after_loading(st);  // and back: the same kernel bytes
      for (std::int64_t r = 0; r < rows; r += 3) {
        for (std::int64_t c = 0; c < cols; c += 5) ASSERT_EQ(l.packed().at(r, c), direct.at(r, c));
      }
    }
  }
}

TEST(WeightLifecycle, APartialReloadLeavesTheOtherTensorsAsAFreshLoadHasThem) {
  for (const char* prec : {"fp8-block", "mxfp8", "int4-w4a16-g32"}) {
    for (const ModelWeights* base : {&stories(), &moe()}) {
      SCOPED_TRACE(fmt::format("{} {}", prec, base->config.name));
      const RuntimePrecision p = runtime_precision(prec);
      Transformer engine(*base, p);
      ModelWeights next = *base;
      perturb_weights(next, 5, 1, 0.01);
      // Only layer 0 is updated: every other tensor goes through restore and transform alone.
      ModelWeights expected = *base;
      expected.layers[0] = next.layers[0];
      engine.restore_weights_for_loading();
      engine.load_layer(0, next.layers[0]);
      engine.process_weights_after_loading();
      Transformer fresh(expected, p);
      const std::vector<int> t = probe(base->config.vocab, 16);
      EXPECT_EQ(max_abs_logit_diff(engine, fresh, t), 0.0);
      Transformer stale(*base, p);
      EXPECT_GT(max_abs_logit_diff(engine, stale, t), 0.0);
    }
  }
}

TEST(Reload, PerturbationIsSeededAndScaled) {
  ModelWeights a = stories(), b = stories(), c = stories();
  perturb_weights(a, 1, 7, 1e-3);
  perturb_weights(b, 1, 7, 1e-3);
  perturb_weights(c, 1, 8, 1e-3);
  EXPECT_EQ(a.layers[2].wq, b.layers[2].wq);
  EXPECT_NE(a.layers[2].wq, c.layers[2].wq);
  const MatrixRM d = a.layers[2].wq - stories().layers[2].wq;
  const double rel = std::sqrt(d.squaredNorm() / stories().layers[2].wq.squaredNorm());
  EXPECT_NEAR(rel, 1e-3, 1e-4);
  EXPECT_THROW(perturb_weights(a, 1, 1, -1.0), std::invalid_argument);
}

// --- kernel layouts, byte by byte ----------------------------------------------------------------

TEST(KernelLayout, AscendMxfp8TransposesCodesInPanelsAndPairsScales) {
  // 5 MX blocks per row (an odd count, padded to 3 pairs), then 6 with a ragged last block of 7
  // columns (an odd column count: the last column stands alone).
  for (const std::int64_t cols : {std::int64_t{160}, std::int64_t{167}}) {
    SCOPED_TRACE(cols);
    const std::int64_t rows = 24, kb = (cols + 31) / 32, panel = PackedWeight::kKMajorPanelRows;
    const std::vector<float> v = normal(static_cast<std::size_t>(rows * cols), 4, 0.05f);
    const QuantizedTensor q = quantize(parse_format("mxfp8"), rows, cols, std::span<const float>(v));
    const PackedWeight p(q);
    ASSERT_EQ(p.layout(), WeightLayout::kE4M3KMajor);
    const auto* codes = static_cast<const std::uint8_t*>(p.code_storage());
    const auto* scales = static_cast<const std::uint8_t*>(p.scale_storage());
    ASSERT_EQ(panel, 16);
    // Codes: a panel and a half of 16 rows k-major, the rest of the second panel padding (+0), a
    // column pair's 32 bytes in groups of 4 rows, even column first; scales: vllm-ascend's
    // [kb / 2, rows, 2].
    EXPECT_EQ(p.resident_bytes(), static_cast<std::size_t>(2 * panel * cols + (kb + 1) / 2 * rows * 2));
    for (std::int64_t r = 0; r < 2 * panel; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        const std::uint32_t want = r < rows ? q.codes[static_cast<std::size_t>(r * cols + c)] : 0;
        const std::int64_t i = r % panel, base = (r / panel) * panel * cols;
        const std::int64_t at =
            cols % 2 == 1 && c == cols - 1 ? base + 16 * c + i : base + 16 * (c - c % 2) + 8 * (i / 4) + 4 * (c % 2) + i % 4;
        ASSERT_EQ(codes[at], want) << r << "," << c;
      }
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t b = 0; b < kb; ++b)
        ASSERT_EQ(scales[((b / 2) * rows + r) * 2 + b % 2], q.scale_codes[static_cast<std::size_t>(r * kb + b)]);
    }
    // The k-major kernel: SIMD and scalar sum each row in the same order, bit for bit, for 1 and 5 tokens.
    const std::vector<float> x = normal(static_cast<std::size_t>(5 * cols), 6, 1.0f);
    std::vector<float> y1(static_cast<std::size_t>(rows)), ys(static_cast<std::size_t>(rows)),
        y5(static_cast<std::size_t>(5 * rows));
    p.gemv_rows(x.data(), y1.data(), 0, rows);
    p.gemv_rows_scalar(x.data(), ys.data(), 0, rows);
    p.gemm_rows(x.data(), 5, y5.data(), rows, 0, rows);
    for (std::int64_t r = 0; r < rows; ++r) {
      EXPECT_EQ(y1[static_cast<std::size_t>(r)], ys[static_cast<std::size_t>(r)]);
      EXPECT_EQ(y1[static_cast<std::size_t>(r)], y5[static_cast<std::size_t>(r)]);
    }
    std::vector<float> one(static_cast<std::size_t>(rows));
    p.gemv_rows(x.data() + 4 * cols, one.data(), 0, rows);
    for (std::int64_t r = 0; r < rows; ++r)
      EXPECT_EQ(one[static_cast<std::size_t>(r)], y5[static_cast<std::size_t>(4 * rows + r)]);
    // Rows that start and end inside panels: the same bits, nothing written outside them.
    std::vector<float> part(static_cast<std::size_t>(rows), -1.0f);
    p.gemv_rows(x.data(), part.data() + 3, 3, 21);
    for (std::int64_t r = 0; r < rows; ++r)
      EXPECT_EQ(part[static_cast<std::size_t>(r)], r >= 3 && r < 21 ? y1[static_cast<std::size_t>(r)] : -1.0f) << r;
  }
}

TEST(KernelLayout, Int4LoaderIsCompressedTensorsAndKernelPermutesCodesAndScales) {
  const std::int64_t rows = 9, cols = 64;
  std::vector<float> v = normal(static_cast<std::size_t>(rows * cols), 8, 0.05f);
  const QuantizedTensor q = quantize(parse_format("int4/group32"), rows, cols, std::span<const float>(v));
  PackedWeight p = PackedWeight::reloadable(q.format, rows, cols, q.block_rows, q.block_cols);
  p.store_loader(q);
  const std::vector<std::uint8_t> img = p.loader_image();
  ASSERT_EQ(img.size(), static_cast<std::size_t>(rows * cols / 2 + rows * 2 * 2));  // nibbles + BF16 scales
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      // compressed-tensors pack-quantized: value + 8, element 2j in the low nibble.
      const std::uint32_t code = (img[static_cast<std::size_t>(r * cols / 2 + c / 2)] >> (4 * (c % 2))) & 0xF;
      ASSERT_EQ(code, (q.codes[static_cast<std::size_t>(r * cols + c)] + 8) & 0xF);
    }
  }
  p.loader_to_kernel();
  const auto* k = static_cast<const std::uint8_t*>(p.code_storage());
  const auto* s = static_cast<const std::uint8_t*>(p.scale_storage());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      // 4-row tiles of 32-column chunks, 16 bytes per row: element j low nibble, j + 16 high.
      const std::int64_t byte = (((r / 4) * 2 + c / 32) * 4 + r % 4) * 16 + c % 16;
      ASSERT_EQ((k[byte] >> (c % 32 < 16 ? 0 : 4)) & 0xF, q.codes[static_cast<std::size_t>(r * cols + c)] & 0xF);
    }
    for (std::int64_t b = 0; b < 2; ++b) {
      // Scales permuted with the tiles: [tile][block column][4 rows], BF16.
      const std::int64_t slot = ((r / 4) * 2 + b) * 4 + r % 4;
      ASSERT_EQ(s[2 * slot] | s[2 * slot + 1] << 8, q.scale_codes[static_cast<std::size_t>(r * 2 + b)]);
    }
  }
  p.kernel_to_loader();
  EXPECT_EQ(p.loader_image(), img);
}

}  // namespace
}  // namespace rlsim::models
