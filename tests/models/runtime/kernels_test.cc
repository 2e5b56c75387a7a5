// The decode path's packed weights and GEMV kernels (models/runtime/kernels.h): every layout holds
// exactly the dequantised values of models/precision, the SIMD and scalar kernels compute W x to
// FP32 accuracy on aligned and ragged shapes, and the threaded GEMV is deterministic.
#include "models/runtime/kernels.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "models/precision/format.h"
#include "models/precision/quantize.h"
#include "models/runtime/transformer.h"
#include "tests/models/runtime/test_data.h"

namespace rlsim::models {
namespace {

using test_data::float_bits_hash;
using test_data::normal;

struct Case {
  const char* format;
  WeightLayout layout;
};

// Format -> the layout the packer must choose.
const Case kCases[] = {
    {"bf16", WeightLayout::kBf16},
    {"fp16", WeightLayout::kF16},
    {"fp8-e4m3/tensor", WeightLayout::kE4M3},
    {"fp8-e4m3/channel", WeightLayout::kE4M3},
    {"fp8-e4m3/block128x128", WeightLayout::kE4M3},
    {"fp8-e4m3/group1x128", WeightLayout::kE4M3},
    {"fp8-e4m3/block3x64", WeightLayout::kE4M3},  // block rows that straddle the 4-row tiles
    {"fp8-e4m3", WeightLayout::kE4M3},            // unscaled
    {"mxfp8", WeightLayout::kE4M3KMajor},
    {"int4/group32", WeightLayout::kNibble},
    {"int4/group128", WeightLayout::kNibble},
    {"int4/channel", WeightLayout::kNibble},
    {"mxfp4", WeightLayout::kNibble},
    {"nvfp4", WeightLayout::kNibble},
    {"fp4-e2m1/group16", WeightLayout::kNibble},
    {"fp8-e5m2/tensor", WeightLayout::kF32},  // no kernel of its own: decoded values
    {"hif8/tensor", WeightLayout::kF32},
    {"hif4", WeightLayout::kF32},
    {"int8/channel", WeightLayout::kF32},
};

// Reference y = W x in double from the dequantised values, and the bound of an FP32 sum of the
// same products in any order: n * 2^-24 * sum |w x| (Higham, Accuracy and Stability of Numerical
// Algorithms, 2nd ed., eq. 3.5), with n the row length.
void reference(const std::vector<double>& w, const std::vector<float>& x, std::int64_t rows, std::int64_t cols,
               std::vector<double>& y, std::vector<double>& bound) {
  y.assign(static_cast<std::size_t>(rows), 0.0);
  bound.assign(static_cast<std::size_t>(rows), 0.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    double s = 0, a = 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      const double p =
          static_cast<double>(static_cast<float>(w[static_cast<std::size_t>(r * cols + c)])) * x[static_cast<std::size_t>(c)];
      s += p;
      a += std::fabs(p);
    }
    y[static_cast<std::size_t>(r)] = s;
    bound[static_cast<std::size_t>(r)] = static_cast<double>(cols) * 0x1p-24 * a + 1e-30;
  }
}

TEST(PackedWeight, EveryLayoutHoldsTheDequantisedValuesAndComputesWx) {
  // Aligned (SmolLM2-like rows of 576) and ragged shapes: rows not a multiple of the 4-row tile,
  // columns not a multiple of the 16 / 32-column chunk nor of the scale block.
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{64, 576}, {37, 200}, {5, 33}, {130, 1536}};
  for (const Case& k : kCases) {
    for (const auto& [rows, cols] : shapes) {
      SCOPED_TRACE(std::string(k.format) + " " + std::to_string(rows) + "x" + std::to_string(cols));
      const Format f = parse_format(k.format);
      std::vector<float> w = normal(static_cast<std::size_t>(rows * cols), 11, 0.02f);
      w[3] = 0.3f;  // an outlier in the first block
      const QuantizedTensor q = quantize(f, rows, cols, std::span<const float>(w));
      const PackedWeight p(q);
      EXPECT_EQ(p.layout(), k.layout);
      const std::vector<double> deq = dequantize(q);
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < cols; ++c) {
          ASSERT_EQ(p.at(r, c), static_cast<float>(deq[static_cast<std::size_t>(r * cols + c)]))
              << "at (" << r << ", " << c << ")";
        }
      }
      const std::vector<float> x = normal(static_cast<std::size_t>(cols), 5, 1.0f);
      std::vector<double> ref, bound;
      reference(deq, x, rows, cols, ref, bound);
      std::vector<float> y_simd(static_cast<std::size_t>(rows), NAN), y_scalar(static_cast<std::size_t>(rows), NAN);
      p.gemv_rows(x.data(), y_simd.data(), 0, rows);
      p.gemv_rows_scalar(x.data(), y_scalar.data(), 0, rows);
      for (std::int64_t r = 0; r < rows; ++r) {
        const auto i = static_cast<std::size_t>(r);
        EXPECT_NEAR(y_simd[i], ref[i], bound[i]) << "row " << r;
        EXPECT_NEAR(y_scalar[i], ref[i], bound[i]) << "row " << r;
      }
      // A row range starting inside a tile writes exactly its rows.
      if (rows > 6) {
        std::vector<float> part(static_cast<std::size_t>(rows), -7.0f);
        p.gemv_rows(x.data(), part.data() + 1, 1, rows - 2);
        EXPECT_EQ(part[0], -7.0f);
        EXPECT_EQ(part[static_cast<std::size_t>(rows - 1)], -7.0f);
        for (std::int64_t r = 1; r < rows - 2; ++r)
          EXPECT_EQ(part[static_cast<std::size_t>(r)], y_simd[static_cast<std::size_t>(r)]);
      }
    }
  }
}

TEST(PackedWeight, StorageBytesAreTheFormatsOwn) {
  const std::int64_t rows = 576, cols = 1536;
  const std::vector<float> w = normal(static_cast<std::size_t>(rows * cols), 3, 0.02f);
  auto bytes = [&](const char* name) {
    return PackedWeight(quantize(parse_format(name), rows, cols, std::span<const float>(w))).bytes();
  };
  const auto n = static_cast<std::size_t>(rows * cols);
  EXPECT_EQ(bytes("bf16"), 2 * n);
  EXPECT_EQ(bytes("fp8-e4m3/block128x128"), n + 4 * (576 / 128 + 1) * (1536 / 128));  // 5 block rows (ragged) x 12, FP32
  EXPECT_EQ(bytes("mxfp8"), n + n / 32);                                              // E8M0 per 32
  EXPECT_EQ(bytes("int4/group32"), n / 2 + 2 * (n / 32));                             // BF16 per 32
  EXPECT_EQ(bytes("int4/group128"), n / 2 + 2 * (n / 128));
  EXPECT_EQ(bytes("nvfp4"), n / 2 + n / 16);  // E4M3 per 16 (the FP32 tensor scale is held apart)
  EXPECT_EQ(PackedWeight::from_values(w.data(), rows, cols).bytes(), 4 * n);
}

TEST(PackedWeight, NanOrOutOfRangeScalesFallBackToDecodedValues) {
  const std::int64_t rows = 8, cols = 64;
  std::vector<float> w = normal(static_cast<std::size_t>(rows * cols), 9, 1.0f);
  w[10] = 448.0f * 300.0f;  // per-tensor E4M3 scale 300 >= 2^8: beyond the kernel's bit trick
  const QuantizedTensor big = quantize(parse_format("fp8-e4m3/tensor"), rows, cols, std::span<const float>(w));
  const PackedWeight pb(big);
  EXPECT_EQ(pb.layout(), WeightLayout::kF32);
  EXPECT_EQ(pb.at(0, 10), static_cast<float>(dequantize(big)[10]));
  w[10] = NAN;  // MX: the block's E8M0 scale becomes NaN (OCP MX v1.0 sec. 6.3)
  const QuantizedTensor nan = quantize(parse_format("mxfp4"), rows, cols, std::span<const float>(w));
  const PackedWeight pn(nan);
  EXPECT_EQ(pn.layout(), WeightLayout::kF32);
  EXPECT_TRUE(std::isnan(pn.at(0, 31)));
  EXPECT_FALSE(std::isnan(pn.at(0, 32)));
  // INT4 has no NaN: the value encodes as level 0 under a finite scale, and the kernel keeps it.
  const QuantizedTensor int4 = quantize(parse_format("int4/group32"), rows, cols, std::span<const float>(w));
  const PackedWeight pi(int4);
  EXPECT_EQ(pi.layout(), WeightLayout::kNibble);
  EXPECT_EQ(pi.at(0, 10), 0.0f);
}

TEST(Gemv, ThreadedJobsEqualOneThreadBitForBit) {
  // q/k/v-like jobs sharing an input, split among threads by work: every row's sum is the same
  // whatever the thread count. MXFP8 (the k-major layout) splits its rows on whole 16-row panels
  // and must equal its scalar kernel exactly; 200 columns give 7 blocks, the last ragged, in
  // segments of 3 and 4; 190 rows end in a partial panel, and 100 rows end 4 rows past a whole
  // panel, which a split rounding its last boundary to the nearest panel loses.
  for (const char* name : {"int4/group32", "mxfp8"}) {
    for (std::int64_t cols : {576, 200}) {
      SCOPED_TRACE(std::string(name) + " cols " + std::to_string(cols));
      const std::vector<float> x = normal(static_cast<std::size_t>(3 * cols), 2, 1.0f);
      std::vector<PackedWeight> ws;
      for (std::int64_t rows : {576, 192, 190, 100}) {
        const std::vector<float> w = normal(static_cast<std::size_t>(rows * cols), static_cast<unsigned>(rows), 0.02f);
        ws.emplace_back(quantize(parse_format(name), rows, cols, std::span<const float>(w)));
      }
      auto run = [&](int threads, std::int64_t tokens) {
        omp_set_num_threads(threads);
        std::vector<std::vector<float>> ys;
        std::vector<GemvJob> jobs;
        for (const PackedWeight& w : ws) ys.emplace_back(static_cast<std::size_t>(tokens * w.rows()), NAN);
        for (std::size_t i = 0; i < ws.size(); ++i) jobs.push_back({&ws[i], x.data(), ys[i].data(), tokens});
        gemv(jobs);
        return ys;
      };
      const int saved = omp_get_max_threads();
      const auto one = run(1, 1), two = run(2, 1), three = run(3, 1), batch = run(2, 3);
      omp_set_num_threads(saved);
      EXPECT_EQ(one, two);
      EXPECT_EQ(one, three);
      std::vector<float> direct(190);
      ws[2].gemv_rows(x.data(), direct.data(), 0, 190);
      EXPECT_EQ(one[2], direct);
      for (std::size_t i = 0; i < ws.size(); ++i) {
        const auto rows = static_cast<std::size_t>(ws[i].rows());
        for (std::int64_t n = 0; n < 3; ++n) {
          std::vector<float> alone(rows);
          ws[i].gemv_rows(x.data() + n * cols, alone.data(), 0, ws[i].rows());
          EXPECT_EQ(std::vector<float>(batch[i].begin() + n * static_cast<std::ptrdiff_t>(rows),
                                       batch[i].begin() + (n + 1) * static_cast<std::ptrdiff_t>(rows)),
                    alone)
              << "job " << i << " token " << n;
        }
        if (ws[i].layout() == WeightLayout::kE4M3KMajor) {
          std::vector<float> scalar(rows);
          ws[i].gemv_rows_scalar(x.data(), scalar.data(), 0, ws[i].rows());
          EXPECT_EQ(one[i], scalar) << "job " << i;
        }
      }
      for (float v : one[0]) EXPECT_TRUE(std::isfinite(v));
    }
  }
}

TEST(LearnedSplit, MovesEachShareTowardsItsThreadsRateWithinBounds) {
  const LearnedSplit split;
  std::int64_t b[4];
  split.boundaries(1000, 2, b);
  EXPECT_EQ(std::vector<std::int64_t>(b, b + 3), (std::vector<std::int64_t>{0, 500, 1000}));
  // Thread 0 did its 500 units in 1 s, thread 1 in 2 s: rates 500 and 250, balance at 2/3.
  const double slow_worker[2] = {1.0, 2.0};
  split.learn(2, b, slow_worker);
  EXPECT_NEAR(split.fraction(0, 2), 0.5 + 0.25 * (2.0 / 3 - 0.5), 1e-6);
  EXPECT_NEAR(split.fraction(0, 2) + split.fraction(1, 2), 1.0, 1e-6);
  for (int i = 0; i < 100; ++i) {
    split.boundaries(1000, 2, b);
    // The same speeds: thread t's seconds are its work over its rate.
    const double seconds[2] = {static_cast<double>(b[1]) / 500, static_cast<double>(b[2] - b[1]) / 250};
    split.learn(2, b, seconds);
  }
  EXPECT_NEAR(split.fraction(0, 2), 2.0 / 3, 1e-3);
  split.boundaries(1000, 2, b);
  EXPECT_EQ(b[1], 667);
  // A 5x faster thread stops at the bound 3 / (2n).
  for (int i = 0; i < 100; ++i) {
    split.boundaries(1000, 2, b);
    const double seconds[2] = {static_cast<double>(b[1]) / 500, static_cast<double>(b[2] - b[1]) / 100};
    split.learn(2, b, seconds);
  }
  EXPECT_NEAR(split.fraction(0, 2), 0.75, 1e-6);
  // Other team sizes and copies start even; a call with an idle thread teaches nothing.
  EXPECT_FLOAT_EQ(split.fraction(1, 3), 1.0f / 3);
  const LearnedSplit copy = split;
  EXPECT_FLOAT_EQ(copy.fraction(0, 2), 0.5f);
  const std::int64_t idle[3] = {0, 0, 1000};
  const double times[2] = {0.0, 1.0};
  split.learn(2, idle, times);
  EXPECT_NEAR(split.fraction(0, 2), 0.75, 1e-6);
  split.boundaries(7, 3, b);
  EXPECT_EQ(b[0], 0);
  EXPECT_EQ(b[3], 7);
  EXPECT_LE(b[1], b[2]);
}

TEST(Gemv, LearnedSharesLeaveEveryRowsBits) {
  // Whatever shares the threads have learned, each row is summed alike: skewed splits of 2 and
  // 3 threads give one thread's bits, for every kernel (BF16 with FP32 and BF16 activations,
  // E4M3 tensor and block, INT4's integer kernel, NVFP4; MXFP8's k-major layout through gemm_rows
  // with 5 tokens, while its one-token kernel keeps its even split) and for 1 and 5 tokens.
  const std::int64_t rows = 1000, cols = 576;
  const std::vector<float> w = normal(static_cast<std::size_t>(rows * cols), 41, 0.02f);
  std::vector<float> x = normal(static_cast<std::size_t>(5 * cols), 42, 1.0f);
  for (float& v : x) v = round_bf16(v);  // BF16 values, as the x_bf16 kernel requires
  for (const char* name : {"bf16", "fp8-e4m3/tensor", "fp8-e4m3/block128x128", "mxfp8", "int4/group32", "nvfp4"}) {
    for (const bool x_bf16 : {false, true}) {
      if (x_bf16 && std::string_view(name) != "bf16") continue;
      SCOPED_TRACE(std::string(name) + (x_bf16 ? " bf16 activations" : ""));
      const PackedWeight pw(quantize(parse_format(name), rows, cols, std::span<const float>(w)));
      auto run = [&](int threads, std::int64_t tokens) {
        omp_set_num_threads(threads);
        std::vector<float> y(static_cast<std::size_t>(tokens * rows), NAN);
        const GemvJob job{&pw, x.data(), y.data(), tokens, x_bf16};
        gemv(std::span<const GemvJob>(&job, 1));
        return y;
      };
      auto teach = [&](int n, int slow) {  // thread `slow` at a fifth of the others' rate
        std::int64_t b[LearnedSplit::kMaxThreads + 1];
        for (int i = 0; i < 50; ++i) {
          pw.split().boundaries(rows * cols, n, b);
          double seconds[LearnedSplit::kMaxThreads];
          for (int t = 0; t < n; ++t) seconds[t] = static_cast<double>(b[t + 1] - b[t]) * (t == slow ? 5.0 : 1.0);
          pw.split().learn(n, b, seconds);
        }
      };
      const int saved = omp_get_max_threads();
      for (const std::int64_t tokens : {1, 5}) {
        const std::vector<float> one = run(1, tokens);
        for (const auto& [n, slow] : {std::pair{2, 0}, std::pair{2, 1}, std::pair{3, 2}}) {
          teach(n, slow);
          EXPECT_EQ(run(n, tokens), one) << n << " threads, thread " << slow << " slow, " << tokens << " tokens";
        }
      }
      omp_set_num_threads(saved);
    }
  }
}

TEST(GemvCallStats, TheFitRecoversAFixedCostAndARateFromExactTimes) {
  // t = 2 us + b / (40 GB/s) at four sizes, repeated as a decode repeats them: the line itself.
  GemvCallStats s;
  constexpr double kFixed = 2e-6, kRate = 40e9;
  for (int token = 0; token < 64; ++token) {
    for (const double b : {311040.0, 186624.0, 995328.0, 56623104.0}) s.add(b, kFixed + b / kRate);
  }
  double fixed = 0, rate = 0;
  ASSERT_TRUE(s.fit(fixed, rate));
  EXPECT_NEAR(fixed, kFixed, 1e-12);
  EXPECT_NEAR(rate / kRate, 1.0, 1e-9);
  EXPECT_EQ(s.calls, 256);
  EXPECT_NEAR(s.seconds, 64 * (4 * kFixed + (311040.0 + 186624.0 + 995328.0 + 56623104.0) / kRate), 1e-12);
  // Noise of +-10 % on every other call's time moves the fit, not its sign: still a fit.
  GemvCallStats noisy;
  for (int i = 0; i < 400; ++i) {
    const double b = 1e5 * (1 + i % 7);
    noisy.add(b, (kFixed + b / kRate) * (i % 2 == 0 ? 1.1 : 0.9));
  }
  ASSERT_TRUE(noisy.fit(fixed, rate));
  EXPECT_NEAR(rate / kRate, 1.0, 0.15);
}

TEST(GemvCallStats, NoFitFromOneSizeFewerThanTwoCallsOrTimesFallingWithSize) {
  double fixed = 1, rate = 1;
  GemvCallStats none;
  EXPECT_FALSE(none.fit(fixed, rate));
  EXPECT_EQ(fixed, 0.0);
  EXPECT_EQ(rate, 0.0);
  GemvCallStats one;
  one.add(1e6, 1e-5);
  EXPECT_FALSE(one.fit(fixed, rate));
  GemvCallStats same;  // every call the same size, their times varying: no slope to fit
  for (int i = 0; i < 100; ++i) same.add(996147.0, 1e-5 * (1 + i % 3));
  EXPECT_FALSE(same.fit(fixed, rate));
  GemvCallStats falling;
  falling.add(1e5, 2e-5);
  falling.add(1e6, 1e-5);
  EXPECT_FALSE(falling.fit(fixed, rate));
}

TEST(GemvRecorder, RecordsTopLevelCallsWhileOnOnly) {
  const std::int64_t cols = 576;
  const std::vector<float> w = normal(static_cast<std::size_t>(1536 * cols), 51, 0.02f);
  const PackedWeight small(quantize(parse_format("int4/group32"), 192, cols, std::span<const float>(w).first(192 * cols)));
  const PackedWeight large(quantize(parse_format("int4/group32"), 1536, cols, std::span<const float>(w)));
  const std::vector<float> x = normal(static_cast<std::size_t>(cols), 52, 1.0f);
  auto call = [&](const PackedWeight& p) {
    std::vector<float> y(static_cast<std::size_t>(p.rows()));  // each caller its own output
    const GemvJob job{&p, x.data(), y.data(), 1};
    gemv(std::span<const GemvJob>(&job, 1));
  };
  call(small);  // before recording: not counted
  gemv_record_start();
  call(small);
  call(large);
  call(large);
#pragma omp parallel num_threads(2)
  call(small);  // inside a region: part of its caller's time, not a call of its own
  const GemvCallStats s = gemv_record_stop();
  call(large);  // after: not counted
  EXPECT_EQ(s.calls, 3);
  EXPECT_DOUBLE_EQ(s.mean_bytes, (static_cast<double>(small.bytes()) + 2.0 * static_cast<double>(large.bytes())) / 3.0);
  EXPECT_GT(s.seconds, 0.0);
  EXPECT_EQ(gemv_record_stop().calls, 0);  // stopped and cleared
}

TEST(Gemv, KMajorCallWithATinyJobComputesEveryRow) {
  // One k-major call whose work crosses the threshold of the threaded split, with a 1 x 1 job
  // beside a large one: the tiny job's one row (a panel of 15 padding rows; its first segment has
  // no blocks) must still be computed, by exactly one thread, and nothing written past it. A call
  // on a taller weight first leaves other values in the threads' scratch buffers.
  const std::int64_t rows = 512, cols = 576, tall = 700;
  const std::vector<float> w = normal(static_cast<std::size_t>(rows * cols), 5, 0.02f), tiny_w = {0.75f};
  const std::vector<float> x = normal(static_cast<std::size_t>(cols), 6, 1.0f), tiny_x = {-1.5f};
  const PackedWeight big(quantize(parse_format("mxfp8"), rows, cols, std::span<const float>(w)));
  const PackedWeight tiny(quantize(parse_format("mxfp8"), 1, 1, std::span<const float>(tiny_w)));
  const std::vector<float> w_tall = normal(static_cast<std::size_t>(tall * cols), 7, 0.02f);
  const PackedWeight taller(quantize(parse_format("mxfp8"), tall, cols, std::span<const float>(w_tall)));
  ASSERT_EQ(big.layout(), WeightLayout::kE4M3KMajor);
  ASSERT_EQ(tiny.layout(), WeightLayout::kE4M3KMajor);
  std::vector<float> want_big(static_cast<std::size_t>(rows)), want_tiny(1);
  big.gemv_rows_scalar(x.data(), want_big.data(), 0, rows);
  tiny.gemv_rows_scalar(tiny_x.data(), want_tiny.data(), 0, 1);
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE(threads);
    omp_set_num_threads(threads);
    std::vector<float> y_tall(static_cast<std::size_t>(tall));
    const GemvJob first[] = {{&taller, x.data(), y_tall.data(), 1}};
    gemv(first);
    std::vector<float> y_big(static_cast<std::size_t>(rows), NAN), y_tiny(1, NAN);
    const GemvJob jobs[] = {{&big, x.data(), y_big.data(), 1}, {&tiny, tiny_x.data(), y_tiny.data(), 1}};
    gemv(jobs);
    EXPECT_EQ(y_big, want_big);
    EXPECT_EQ(y_tiny, want_tiny);
  }
  omp_set_num_threads(saved);
}

TEST(Gemv, SimdKernelsGiveTheSameBitsOnAvx512AndAvx2Hosts) {
  // The AVX2 kernels keep the AVX-512 kernels' 16 lanes as two 8-lane halves, do each lane's
  // operations in the same order and add the lanes in _mm512_reduce_add_ps's order, so a GEMV
  // has the same bits on either host. The hashes below are an AVX2 build's outputs (Zen 3 VM,
  // 2026-11-27; the two E4M3 ones, since block sums are scaled at the block's end, from an AVX2
  // (-march=znver2) and an AVX-512 build on a Zen 4 VM, 2026-11-28, which both gave them); an
  // AVX-512 build that differs breaks that claim. Ragged 37 x 200 and 64 x 576
  // (the k-major panels, threaded), 5 tokens (a 4-token group and a single one).
  if (!simd_kernels_available()) GTEST_SKIP() << "portable build: the scalar kernels sum in another order";
  const std::pair<const char*, std::uint64_t> cases[] = {{"fp32", 0xf38bf37f53b65404ull},
                                                         {"bf16", 0xb32f3a3b81495314ull},
                                                         {"fp16", 0x12785912cf22ce37ull},
                                                         {"fp8-e4m3/block128x128", 0x1ad5af3dd9c7bacbull},
                                                         {"fp8-e4m3/group1x128", 0xff776516a1febbfcull},
                                                         {"mxfp8", 0x575c503de17bd2e7ull},
                                                         {"int4/group32", 0xe90f3863167002ceull},
                                                         {"int4/group128", 0x7daa0f5ccf813ae9ull},
                                                         {"nvfp4", 0xbc85eb42560120b6ull},
                                                         {"mxfp4", 0x5787a1561e1aaf84ull}};
  for (const auto& [name, want] : cases) {
    std::vector<float> out;
    for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{37, 200}, {64, 576}}) {
      const std::vector<float> w = normal(static_cast<std::size_t>(rows * cols), 5, 0.02f);
      const PackedWeight p(quantize(parse_format(name), rows, cols, std::span<const float>(w)));
      const std::int64_t tokens = 5;
      const std::vector<float> x = normal(static_cast<std::size_t>(tokens * cols), 6, 1.0f);
      std::vector<float> y(static_cast<std::size_t>(tokens * rows));
      GemvJob job{&p, x.data(), y.data(), tokens};
      gemv(std::span<const GemvJob>(&job, 1));
      out.insert(out.end(), y.begin(), y.end());
    }
    EXPECT_EQ(float_bits_hash(out), want) << name << ": 0x" << std::hex << float_bits_hash(out);
  }
}

// The BF16 dot-product GEMV of the lm_head (x_bf16) gives the same bits with VDPBF16PS and with
// its FMA form on AVX-512 without AVX512-BF16 and on AVX2 (the odd product of a pair first, as the
// instruction adds them). The hash came out alike from three builds on a Zen 4 VM (2026-11-29:
// -march=native with AVX512-BF16, the same with -mno-avx512bf16, -march=znver2). Ragged 37 x 172
// (an odd chunk count) and 64 x 576, 5 tokens (a 4-token group and a single one) and 1 token (the
// two-tile path).
TEST(Gemv, Bf16DotProductKernelGivesTheSameBitsWithAndWithoutAvx512Bf16) {
  if (!simd_kernels_available()) GTEST_SKIP() << "portable build: the scalar kernels sum in another order";
  std::vector<float> out;
  for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{37, 172}, {64, 576}}) {
    const std::vector<float> w = normal(static_cast<std::size_t>(rows * cols), 8, 0.02f);
    const PackedWeight p(quantize(parse_format("bf16"), rows, cols, std::span<const float>(w)));
    for (std::int64_t tokens : {5, 1}) {
      std::vector<float> x = normal(static_cast<std::size_t>(tokens * cols), 9, 1.0f);
      for (float& v : x) v = static_cast<float>(round_to(Element::kBf16, v));
      std::vector<float> y(static_cast<std::size_t>(tokens * rows));
      GemvJob job{&p, x.data(), y.data(), tokens, true};
      gemv(std::span<const GemvJob>(&job, 1));
      out.insert(out.end(), y.begin(), y.end());
    }
  }
  EXPECT_EQ(float_bits_hash(out), 0x3179946b152be982ull) << "0x" << std::hex << float_bits_hash(out);
}

TEST(Gemv, E4M3KernelsTakeActivationsBeyondTheirLiftToTheScalarKernel) {
  // The E4M3 SIMD kernels lift x by 2^60, which overflows for |x| >= 2^68: such a token takes the
  // scalar kernel (finite, the true values), its batch neighbours keep their own bits. 64 x 576
  // with 3 tokens is work enough for a threaded split, whose gemm_rows takes such a token apart.
  for (const char* name : {"fp8-e4m3/block128x128", "fp8-e4m3/group1x128", "mxfp8"}) {
    SCOPED_TRACE(name);
    const std::int64_t rows = 64, cols = 576, tokens = 3;
    const std::vector<float> w = normal(static_cast<std::size_t>(rows * cols), 9, 0.02f);
    const PackedWeight p(quantize(parse_format(name), rows, cols, std::span<const float>(w)));
    std::vector<float> x = normal(static_cast<std::size_t>(tokens * cols), 10, 1.0f);
    x[static_cast<std::size_t>(cols + 5)] = 0x1p70f;
    std::vector<float> y(static_cast<std::size_t>(tokens * rows), NAN);
    GemvJob job{&p, x.data(), y.data(), tokens};
    gemv(std::span<const GemvJob>(&job, 1));
    for (std::int64_t n = 0; n < tokens; ++n) {
      std::vector<float> want(static_cast<std::size_t>(rows));
      if (n == 1) {
        p.gemv_rows_scalar(x.data() + n * cols, want.data(), 0, rows);
      } else {
        p.gemv_rows(x.data() + n * cols, want.data(), 0, rows);
      }
      for (std::int64_t r = 0; r < rows; ++r) {
        const float got = y[static_cast<std::size_t>(n * rows + r)];
        ASSERT_TRUE(std::isfinite(got)) << "token " << n << " row " << r;
        ASSERT_EQ(got, want[static_cast<std::size_t>(r)]) << "token " << n << " row " << r;
      }
    }
  }
}

TEST(Gemv, BatchedTokensEqualOneTokenCallsBitForBit) {
  // The batch-invariant linear: a token's outputs from a call of 1, 3, 4, 9 or 70 tokens (4-token
  // groups, the 1-token remainder, two 64-token blocks) equal its own single-token GEMV exactly,
  // for every kernel layout and a ragged shape.
  const char* formats[] = {"fp32",         "bf16",  "fp16", "fp8-e4m3/block128x128", "fp8-e4m3/group1x128", "mxfp8",
                           "int4/group32", "nvfp4", "mxfp4"};
  for (const char* name : formats) {
    for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{37, 200}, {64, 576}}) {
      SCOPED_TRACE(std::string(name) + " " + std::to_string(rows) + "x" + std::to_string(cols));
      const std::vector<float> w = normal(static_cast<std::size_t>(rows * cols), 4, 0.02f);
      const PackedWeight p(quantize(parse_format(name), rows, cols, std::span<const float>(w)));
      const std::int64_t tokens = 70;
      const std::vector<float> x = normal(static_cast<std::size_t>(tokens * cols), 8, 1.0f);
      std::vector<float> single(static_cast<std::size_t>(tokens * rows));
      for (std::int64_t n = 0; n < tokens; ++n) p.gemv_rows(x.data() + n * cols, single.data() + n * rows, 0, rows);
      for (std::int64_t batch : {1, 3, 4, 9, 70}) {
        std::vector<float> y(static_cast<std::size_t>(batch * rows), NAN);
        GemvJob job{&p, x.data(), y.data(), batch};
        gemv(std::span<const GemvJob>(&job, 1));
        for (std::size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], single[i]) << "batch " << batch << " element " << i;
      }
      // One token over row ranges: a single-token call reads two tiles at once (the range's two
      // halves), an odd tile count leaves one alone, and a range may start or end inside a tile.
      for (const auto& [r0, r1] : {std::pair<std::int64_t, std::int64_t>{0, rows}, {2, rows - 1}, {4, 16}, {1, 6}, {8, 12}}) {
        std::vector<float> one(static_cast<std::size_t>(rows), -7.0f);
        p.gemm_rows(x.data(), 1, one.data() + r0, rows, r0, r1);
        for (std::int64_t r = 0; r < rows; ++r) {
          ASSERT_EQ(one[static_cast<std::size_t>(r)], r >= r0 && r < r1 ? single[static_cast<std::size_t>(r)] : -7.0f)
              << "rows [" << r0 << ", " << r1 << ") row " << r;
        }
      }
      // A row range inside a tile, with a leading dimension wider than the range.
      std::vector<float> part(static_cast<std::size_t>(5 * rows), -7.0f);
      p.gemm_rows(x.data(), 5, part.data() + 2, rows, 2, rows - 1);
      for (std::int64_t n = 0; n < 5; ++n) {
        EXPECT_EQ(part[static_cast<std::size_t>(n * rows + rows - 1)], -7.0f);  // past the range
        for (std::int64_t r = 2; r < rows - 1; ++r) {
          ASSERT_EQ(part[static_cast<std::size_t>(n * rows + r)], single[static_cast<std::size_t>(n * rows + r)]);
        }
      }
    }
  }
}

TEST(Gemv, Int4WeightsNearFp32MaxKeepFiniteSums) {
  // INT4 rows near FP32's largest values have BF16 group scales above 2^120, far outside the
  // integer kernel's [2^-40, 2^40) (its scale x 2^(E - 22) products would overflow), so such
  // weights take the FP32 kernel: one token's sums equal a 4-token call's and stay finite.
  const std::int64_t rows = 8, cols = 64;
  std::vector<float> w = normal(static_cast<std::size_t>(rows * cols), 31, 0.02f);
  for (std::int64_t c = 0; c < cols; ++c) w[static_cast<std::size_t>(3 * cols + c)] = (c % 2 ? -1.0f : 1.0f) * 2e38f;
  const PackedWeight p(quantize(parse_format("int4/group32"), rows, cols, std::span<const float>(w)));
  const std::vector<float> x = normal(static_cast<std::size_t>(4 * cols), 32, 1e-3f);
  std::vector<float> four(static_cast<std::size_t>(4 * rows)), one(static_cast<std::size_t>(rows));
  p.gemm_rows(x.data(), 4, four.data(), rows, 0, rows);
  p.gemv_rows(x.data(), one.data(), 0, rows);
  for (std::int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(std::isfinite(one[static_cast<std::size_t>(r)])) << "row " << r;
    EXPECT_EQ(one[static_cast<std::size_t>(r)], four[static_cast<std::size_t>(r)]) << "row " << r;
  }
}

// The INT4 integer kernel's arithmetic, written out from its specification (kernels.h, gemv_rows):
// each 32-column chunk of x as the integers v = round(x 2^(22 - E)), 2^(E-1) <= the chunk's
// largest |x| < 2^E; per lane (columns 4m..4m+3 and 16+4m..16+4m+3) the exact sum of code x v,
// converted to FP32 and multiplied by (scale x 2^(E - 22)) into the lane's FP32 partial, chunk
// after chunk; a row's result (l0 + l1) + (l2 + l3).
std::vector<float> int4_integer_reference(const QuantizedTensor& q, const float* x) {
  const std::int64_t rows = q.rows, cols = q.cols, chunks = (cols + 31) / 32,
                     grid_cols = (cols + q.block_cols - 1) / q.block_cols;
  std::vector<float> y(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    float lane[4] = {};
    for (std::int64_t j = 0; j < chunks; ++j) {
      float m = 0.0f;
      for (std::int64_t c = 32 * j; c < std::min(cols, 32 * j + 32); ++c) m = std::max(m, std::fabs(x[c]));
      const int e = m == 0.0f ? 0 : std::ilogb(m) + 1;
      const float scale =
          static_cast<float>(q.scales[static_cast<std::size_t>(r / q.block_rows * grid_cols + 32 * j / q.block_cols)]);
      for (int l = 0; l < 4; ++l) {
        std::int64_t sum = 0;
        for (int k : {4 * l, 4 * l + 1, 4 * l + 2, 4 * l + 3, 16 + 4 * l, 17 + 4 * l, 18 + 4 * l, 19 + 4 * l}) {
          const std::int64_t c = 32 * j + k;
          if (c >= cols) continue;
          const auto code = static_cast<std::int64_t>(decode(Element::kInt4, q.codes[static_cast<std::size_t>(r * cols + c)]));
          sum += code * static_cast<std::int64_t>(std::nearbyint(std::ldexp(static_cast<double>(x[c]), 22 - e)));
        }
        lane[l] = std::fma(static_cast<float>(sum), scale * std::ldexp(1.0f, e - 22), lane[l]);
      }
    }
    y[static_cast<std::size_t>(r)] = (lane[0] + lane[1]) + (lane[2] + lane[3]);
  }
  return y;
}

TEST(Int4Gemv, IntegerKernelFollowsItsSpecificationAndLeavesOutOfRangeTokensToFp32) {
  if (!simd_kernels_available()) GTEST_SKIP() << "portable build: INT4 takes the FP32 scalar kernel";
  // The group formats (BF16 scales); int4/channel's FP32 row scales keep the FP32 kernel.
  for (const char* name : {"int4/group32", "int4/group128"}) {
    for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{37, 200}, {64, 576}}) {
      SCOPED_TRACE(std::string(name) + " " + std::to_string(rows) + "x" + std::to_string(cols));
      const std::vector<float> w = normal(static_cast<std::size_t>(rows * cols), 21, 0.02f);
      const QuantizedTensor q = quantize(parse_format(name), rows, cols, std::span<const float>(w));
      const PackedWeight p(q);
      // Token 0: BF16 activations (held exactly); 1: FP32 ones; 2: BF16 with elements 2^-20 of
      // their neighbours (rounded to the fixed point); 3: one |x| >= 2^64 (the FP32 kernel); 4:
      // zeros; 5: BF16 magnitudes in [1/64, 2), all within 2^7 of each chunk's largest (the
      // kernels' two-digit chunks), each chunk of token 0 a mix of either kind. Six tokens: a
      // 4-token group around the FP32 token and two more.
      const std::int64_t tokens = 6;
      std::vector<float> x = normal(static_cast<std::size_t>(tokens * cols), 22, 1.0f);
      for (std::int64_t c = 0; c < cols; ++c) {
        x[static_cast<std::size_t>(c)] = round_bf16(x[static_cast<std::size_t>(c)]);
        float& v = x[static_cast<std::size_t>(2 * cols + c)];
        v = round_bf16(c % 7 == 3 ? v * 0x1p-20f : v);
        x[static_cast<std::size_t>(4 * cols + c)] = 0.0f;
        float& near = x[static_cast<std::size_t>(5 * cols + c)];
        near = round_bf16(std::copysign(std::clamp(std::fabs(near), 0x1p-6f, 1.99f), near));
      }
      x[static_cast<std::size_t>(3 * cols + 5)] = 0x1p70f;
      std::vector<float> y(static_cast<std::size_t>(tokens * rows), NAN);
      GemvJob job{&p, x.data(), y.data(), tokens};
      gemv(std::span<const GemvJob>(&job, 1));
      const std::vector<double> deq = dequantize(q);
      for (std::int64_t n = 0; n < tokens; ++n) {
        const float* xn = x.data() + n * cols;
        const std::vector<float> xv(xn, xn + cols);
        std::vector<double> ref, bound;
        reference(deq, xv, rows, cols, ref, bound);
        const std::vector<float> want = int4_integer_reference(q, xn);
        for (std::int64_t r = 0; r < rows; ++r) {
          const float got = y[static_cast<std::size_t>(n * rows + r)];
          EXPECT_NEAR(got, ref[static_cast<std::size_t>(r)], bound[static_cast<std::size_t>(r)]) << "token " << n << " row " << r;
          if (n != 3) {
            ASSERT_EQ(got, want[static_cast<std::size_t>(r)]) << "token " << n << " row " << r;
          }
        }
      }
      // Token 3 alone equals its place in the batch (the FP32 kernel either way).
      std::vector<float> alone(static_cast<std::size_t>(rows));
      p.gemv_rows(x.data() + 3 * cols, alone.data(), 0, rows);
      for (std::int64_t r = 0; r < rows; ++r)
        ASSERT_EQ(alone[static_cast<std::size_t>(r)], y[static_cast<std::size_t>(3 * rows + r)]);
    }
  }
}

// NVFP4 activations as codes (E2M1Activations): each token's codes times its block and tensor
// scales are exactly the values round_to_format gives that token alone, and the bias cancels the
// kernel's weight offset.
TEST(E2M1Activations, CodesStandForTheRoundedTokens) {
  const Format f = parse_format("fp4-e2m1/nv16");
  const std::int64_t tokens = 3, cols = 200;  // 13 blocks of 16, the last ragged; padded to 224
  std::vector<float> x = normal(static_cast<std::size_t>(tokens * cols), 21, 1.0f);
  x[5] = 40.0f, x[300] = -1e-3f;  // an outlier block and a small one
  const E2M1Activations a(x.data(), tokens, cols, f);
  ASSERT_EQ(a.ld, 224);
  for (std::int64_t n = 0; n < tokens; ++n) {
    std::vector<float> rounded(x.begin() + n * cols, x.begin() + (n + 1) * cols);
    round_to_format(rounded.data(), 1, cols, f);
    for (std::int64_t c = 0; c < a.ld; ++c) {
      const double code = a.codes[static_cast<std::size_t>(n * a.ld + c)];
      const double block = static_cast<double>(a.scales[static_cast<std::size_t>(n * a.ld / 16 + c / 16)]) * 0x1p-118;
      const double v = code / 2 * block * a.tensor[static_cast<std::size_t>(n)];
      if (c < cols) {
        ASSERT_EQ(static_cast<float>(v), rounded[static_cast<std::size_t>(c)]) << "token " << n << " column " << c;
      } else {
        ASSERT_EQ(code, 0.0) << "padding";
      }
    }
    for (std::int64_t g = 0; g < a.ld / 4; ++g) {
      int sum = 0;
      for (int e = 0; e < 4; ++e) sum += a.codes[static_cast<std::size_t>(n * a.ld + 4 * g + e)];
      ASSERT_EQ(a.bias[static_cast<std::size_t>(n * a.ld / 4 + g)], -E2M1Activations::kOffset * sum);
    }
  }
  EXPECT_THROW(E2M1Activations(x.data(), 1, cols, parse_format("mxfp4")), std::invalid_argument);
}

// The W4A4 integer GEMV (gemm_rows_e2m1): the SIMD kernel equals its scalar reference bit for
// bit, a token's result does not depend on the batch or the thread count, and both are within the
// FP32 summation bound of the exact sum of the dequantised weights times the dequantised
// activations; shapes it cannot take (columns not a multiple of 32, INT4 weights, other
// activation formats) are refused.
TEST(E2M1Gemv, IntegerKernelMatchesScalarExactSumAndBatch) {
  const Format f = parse_format("fp4-e2m1/nv16");
  for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{37, 96}, {64, 576}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
    // Blocks of magnitudes 2^-8..2^7 (weights) and 2^-6..2^5 (activations), so that the FP32
    // partials round and the order of the sums shows in the result.
    std::vector<float> wv = normal(static_cast<std::size_t>(rows * cols), 31, 0.02f);
    for (std::size_t i = 0; i < wv.size(); ++i) wv[i] = std::ldexp(wv[i], static_cast<int>((i / 16 * 7) % 16) - 8);
    const PackedWeight w(quantize(parse_format("nvfp4"), rows, cols, std::span<const float>(wv)));
    const std::int64_t tokens = 6;
    std::vector<float> xv = normal(static_cast<std::size_t>(tokens * cols), 32, 1.0f);
    for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = std::ldexp(xv[i], static_cast<int>((i / 16 * 5) % 12) - 6);
    xv[cols + 3] = 3000.0f;  // token 1: an outlier that sets its tensor scale
    const E2M1Activations x(xv.data(), tokens, cols, f);
    std::vector<float> scalar(static_cast<std::size_t>(tokens * rows), NAN);
    w.gemm_rows_e2m1_scalar(x, scalar.data(), rows, 0, rows);
    // Exact sums of the dequantised operands, and the FP32 bound n 2^-24 sum |w x|.
    const std::vector<double> wd = dequantize(quantize(parse_format("nvfp4"), rows, cols, std::span<const float>(wv)));
    for (std::int64_t n = 0; n < tokens; ++n) {
      for (std::int64_t r = 0; r < rows; ++r) {
        double exact = 0, mag = 0;
        for (std::int64_t c = 0; c < cols; ++c) {
          const double xq = x.codes[static_cast<std::size_t>(n * x.ld + c)] / 2.0 *
                            (static_cast<double>(x.scales[static_cast<std::size_t>(n * x.ld / 16 + c / 16)]) * 0x1p-118) *
                            x.tensor[static_cast<std::size_t>(n)];
          exact += wd[static_cast<std::size_t>(r * cols + c)] * xq;
          mag += std::fabs(wd[static_cast<std::size_t>(r * cols + c)] * xq);
        }
        ASSERT_NEAR(scalar[static_cast<std::size_t>(n * rows + r)], exact, static_cast<double>(cols) * 0x1p-24 * mag + 1e-30)
            << "token " << n << " row " << r;
      }
    }
    if (!w.e2m1_dot_applies(f)) continue;  // a build without AVX512-VNNI or AVX2: the scalar kernel only
    const int saved = omp_get_max_threads();
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      for (std::int64_t batch : {1, 4, 5, 6}) {
        std::vector<float> y(static_cast<std::size_t>(batch * rows), NAN);
        const E2M1Activations xb(xv.data(), batch, cols, f);
        GemvJob job{&w, nullptr, y.data(), batch, false, &xb};
        gemv(std::span<const GemvJob>(&job, 1));
        for (std::size_t i = 0; i < y.size(); ++i)
          ASSERT_EQ(y[i], scalar[i]) << threads << " threads, batch " << batch << " element " << i;
      }
    }
    omp_set_num_threads(saved);
    // A row range inside a tile.
    std::vector<float> part(static_cast<std::size_t>(tokens * rows), -7.0f);
    w.gemm_rows_e2m1(x, part.data() + 2, rows, 2, rows - 1);
    for (std::int64_t n = 0; n < tokens; ++n) {
      EXPECT_EQ(part[static_cast<std::size_t>(n * rows + rows - 1)], -7.0f);
      for (std::int64_t r = 2; r < rows - 1; ++r)
        ASSERT_EQ(part[static_cast<std::size_t>(n * rows + r)], scalar[static_cast<std::size_t>(n * rows + r)]);
    }
  }
  const std::vector<float> v = normal(64 * 200, 33, 0.02f);
  EXPECT_FALSE(PackedWeight(quantize(parse_format("nvfp4"), 64, 200, std::span<const float>(v))).e2m1_dot_applies(f));
  const PackedWeight int4(quantize(parse_format("int4/group32"), 64, 192, std::span<const float>(v.data(), 64 * 192)));
  EXPECT_FALSE(int4.e2m1_dot_applies(f));
  EXPECT_THROW(int4.gemm_rows_e2m1_scalar(E2M1Activations(v.data(), 1, 192, f), nullptr, 0, 0, 0), std::logic_error);
  const PackedWeight nv(quantize(parse_format("nvfp4"), 64, 192, std::span<const float>(v.data(), 64 * 192)));
  EXPECT_FALSE(nv.e2m1_dot_applies(parse_format("fp8-e4m3/token")));
}

// The BF16 dot-product GEMV (gemm_rows with x_bf16, used for the lm_head): with BF16 x it stays
// within the FP32 summation bound of the exact sum, and a token's result is the same alone or in a
// batch of any size; odd chunk counts (cols 172: 11 chunks of 16) and ragged rows included.
TEST(PackedWeight, Bf16DotProductGemvIsWithinBoundAndBatchInvariant) {
  for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{37, 172}, {64, 576}, {9, 32}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
    const std::vector<float> w = normal(static_cast<std::size_t>(rows * cols), 6, 0.02f);
    const QuantizedTensor q = quantize(parse_format("bf16"), rows, cols, std::span<const float>(w));
    const PackedWeight p(q);
    const std::int64_t tokens = 9;
    std::vector<float> x = normal(static_cast<std::size_t>(tokens * cols), 7, 1.0f);
    for (float& v : x) v = static_cast<float>(round_to(Element::kBf16, v));
    const std::vector<double> deq = dequantize(q);
    std::vector<float> alone(static_cast<std::size_t>(tokens * rows));
    for (std::int64_t n = 0; n < tokens; ++n) {
      std::vector<double> ref, bound;
      const std::vector<float> xn(x.begin() + n * cols, x.begin() + (n + 1) * cols);
      reference(deq, xn, rows, cols, ref, bound);
      p.gemm_rows(xn.data(), 1, alone.data() + n * rows, rows, 0, rows, true);
      for (std::int64_t r = 0; r < rows; ++r)
        EXPECT_NEAR(alone[static_cast<std::size_t>(n * rows + r)], ref[static_cast<std::size_t>(r)],
                    bound[static_cast<std::size_t>(r)]);
    }
    // One token over part of the rows (the two-tile path, an odd tile count, a ragged start).
    std::vector<float> part(static_cast<std::size_t>(rows), -7.0f);
    p.gemm_rows(x.data(), 1, part.data() + 1, rows, 1, rows - 4, true);
    for (std::int64_t r = 0; r < rows; ++r)
      EXPECT_EQ(part[static_cast<std::size_t>(r)], r >= 1 && r < rows - 4 ? alone[static_cast<std::size_t>(r)] : -7.0f) << r;
    for (std::int64_t batch : {2, 4, 5, 9}) {
      std::vector<float> y(static_cast<std::size_t>(batch * rows), NAN);
      GemvJob job{&p, x.data(), y.data(), batch, true};
      gemv(std::span<const GemvJob>(&job, 1));
      for (std::size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], alone[i]) << "batch " << batch << " element " << i;
    }
  }
}

// softmax_row against a double-precision softmax: every element within the rounding of s - max
// plus a few ulp (the vector e^x is within 2 ulp), for row lengths around
// the 16-lane width and scores spread far enough that some terms underflow; each row sums to 1;
// a row's result does not depend on where it sits in a longer buffer; -inf scores give 0 and a
// NaN score a NaN row.
TEST(Softmax, MatchesDoublePrecisionAndDependsOnlyOnTheRow) {
  std::mt19937 rng(3);
  std::normal_distribution<float> score(0.0f, 8.0f);
  for (std::int64_t n : {1, 2, 15, 16, 17, 31, 33, 100, 577}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    std::vector<float> s(static_cast<std::size_t>(n));
    for (float& v : s) v = score(rng);
    if (n > 3) s[2] = -120.0f;  // e^(s - max) below FP32's range: 0
    double mx = -INFINITY, sum = 0;
    for (float v : s) mx = std::max(mx, static_cast<double>(v));
    for (float v : s) sum += std::exp(static_cast<double>(v) - mx);
    std::vector<float> out = s;
    softmax_row(out.data(), n);
    double total = 0;
    for (std::int64_t j = 0; j < n; ++j) {
      const double x = static_cast<double>(s[static_cast<std::size_t>(j)]) - mx;
      const double want = std::exp(x) / sum;
      // The FP32 difference s - max rounds by up to |x| 2^-24, which e^x turns into a relative
      // error of the same size; the exponential, sum and division add a few ulp.
      EXPECT_NEAR(out[static_cast<std::size_t>(j)], want, (std::fabs(x) + 8.0) * 0x1p-24 * want + 1e-38) << "j = " << j;
      total += out[static_cast<std::size_t>(j)];
    }
    EXPECT_NEAR(total, 1.0, 1e-6);
    // The same row at an offset inside a longer buffer, neighbours untouched.
    std::vector<float> padded(static_cast<std::size_t>(n + 5), 42.0f);
    std::copy(s.begin(), s.end(), padded.begin() + 3);
    softmax_row(padded.data() + 3, n);
    for (std::int64_t j = 0; j < n; ++j) ASSERT_EQ(padded[static_cast<std::size_t>(j + 3)], out[static_cast<std::size_t>(j)]);
    EXPECT_EQ(padded[2], 42.0f);
    EXPECT_EQ(padded[static_cast<std::size_t>(n + 3)], 42.0f);
  }
  std::vector<float> masked{0.0f, -INFINITY, 0.0f};
  softmax_row(masked.data(), 3);
  EXPECT_EQ(masked[1], 0.0f);
  EXPECT_FLOAT_EQ(masked[0], 0.5f);
  // A NaN score is not hidden: the whole row becomes NaN, as with std::exp.
  std::vector<float> bad{0.0f, NAN, 1.0f};
  softmax_row(bad.data(), 3);
  for (float v : bad) EXPECT_TRUE(std::isnan(v));
}

TEST(Softmax, SubnormalProbabilitiesRoundOnceInsteadOfFlushing) {
  // e^-88 .. e^-103.5 lie in FP32's subnormal range (below 2^-126 ~ 1.2e-38). The SIMD paths
  // compute 2^k y with vscalefps (AVX-512) or two multiplies, the first exact (AVX2); either
  // rounds once to the subnormal grid, so the probabilities keep their value to within its
  // spacing (2^-149) instead of becoming 0 or a power of two off.
  const std::vector<float> s{0.0f,    -88.0f,  -92.5f, -96.0f, -100.0f, -102.5f, 1.0f,   -90.0f, -98.0f,
                             -102.0f, -101.0f, -94.0f, -89.0f, -97.0f,  -99.0f,  -91.0f, -93.0f};  // 17: a tail too
  std::vector<float> out = s;
  softmax_row(out.data(), static_cast<std::int64_t>(out.size()));
  double sum = 0;
  for (float v : s) sum += std::exp(static_cast<double>(v) - 1.0);
  for (std::size_t j = 0; j < s.size(); ++j) {
    const double want = std::exp(static_cast<double>(s[j]) - 1.0) / sum;
    if (want >= 0x1p-126) continue;
    SCOPED_TRACE("score " + std::to_string(s[j]));
    EXPECT_GT(out[j], 0.0f);
    EXPECT_NEAR(out[j], want, 16 * 0x1p-24 * want + 0x1p-148);
  }
}

// silu_mul against double precision: silu(a) up within a few ulp for gates from -110 to 110
// (e^-|a| below FP32's range at both ends), each element the same whether computed alone or in
// a longer row at any place (lane and tail), infinities and NaN as a / (1 + e^-a) gives them;
// and the bits an AVX2 build gives (SIMD builds: the same e^x, operations in the same order).
TEST(SiluMul, MatchesDoublePrecisionElementByElement) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> gate(-110.0f, 110.0f), small(-6.0f, 6.0f), up(-3.0f, 3.0f);
  const std::int64_t n = 1000;
  std::vector<float> g(n), u(n), out(n);
  for (std::int64_t i = 0; i < n; ++i) {
    g[static_cast<std::size_t>(i)] = i % 2 ? gate(rng) : small(rng);
    u[static_cast<std::size_t>(i)] = up(rng);
  }
  g[0] = 0.0f, g[1] = -0.0f, g[2] = 1e-30f, g[3] = -1e-30f;
  silu_mul(g.data(), u.data(), out.data(), n);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    const double a = g[k], want = a / (1.0 + std::exp(-a)) * u[k];
    // e^x within 2 ulp, then a multiply, an add, a division and a multiply: a few ulp; below
    // a = -87 e^a is subnormal (spacing 2^-149), a e^a off by up to |a| |up| 2^-149.
    EXPECT_NEAR(out[k], want, 8 * 0x1p-24 * std::fabs(want) + std::fabs(a * u[k]) * 0x1p-149) << "a = " << a;
    float alone = 0;
    silu_mul(&g[k], &u[k], &alone, 1);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(alone), std::bit_cast<std::uint32_t>(out[k])) << "i = " << i;
  }
  // In place (out aliasing gate), a ragged length.
  std::vector<float> in_place(g.begin(), g.begin() + 37);
  silu_mul(in_place.data(), u.data(), in_place.data(), 37);
  for (std::size_t k = 0; k < in_place.size(); ++k) ASSERT_EQ(in_place[k], out[k]);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special{inf, -inf, NAN, -200.0f}, ones(4, 1.0f);
  std::vector<float> s(4);
  silu_mul(special.data(), ones.data(), s.data(), 4);
  EXPECT_EQ(s[0], inf);
  EXPECT_TRUE(std::isnan(s[1]));  // -inf / (1 + e^inf) = -inf / inf
  EXPECT_TRUE(std::isnan(s[2]));
  EXPECT_EQ(s[3], -0.0f);  // e^-200 underflows: a 0 / 1
  EXPECT_TRUE(std::signbit(s[3]));
  if (simd_kernels_available()) {
    EXPECT_EQ(float_bits_hash(out), 0xb351555abf291f0full) << std::hex << float_bits_hash(out);
  }
}

// The batch-invariant attention's two sums against their definition written out element by
// element, bit for bit (the loops transformer.cc ran before the register paths, kept here on
// purpose as the reference they must reproduce): head sizes below, at and between multiples of
// 16 (the register paths take multiples of 16, up to 8 registers of outputs a pass), key counts
// around the 4 keys a register block takes, keys and values in a wider cache row (ld > hd).
TEST(AttentionFixed, ScoresAndValuesFollowTheirDefinitionBitForBit) {
  auto dot = [](const float* a, const float* b, std::int64_t n) {
    float lane[16] = {};
    std::int64_t e = 0;
    for (; e + 16 <= n; e += 16) {
      for (int l = 0; l < 16; ++l) lane[l] += a[e + l] * b[e + l];
    }
    for (int l = 0; e < n; ++e, ++l) lane[l] += a[e] * b[e];
    int top = 8;
    while (top > 1 && top >= n) top /= 2;
    for (int w = top; w >= 1; w /= 2) {
      for (int l = 0; l < w; ++l) lane[l] += lane[l + w];
    }
    return lane[0];
  };
  for (const std::int64_t hd : {8, 16, 40, 64, 80, 128, 144}) {
    for (const std::int64_t visible : {1, 3, 4, 5, 8, 31, 100}) {
      SCOPED_TRACE("hd " + std::to_string(hd) + ", " + std::to_string(visible) + " positions");
      const std::int64_t ld = 3 * hd + 5;
      const std::vector<float> q = normal(static_cast<std::size_t>(hd), 31, 1.0f);
      const std::vector<float> kv = normal(static_cast<std::size_t>(visible * ld), 32, 1.0f);
      const std::vector<float> p = normal(static_cast<std::size_t>(visible), 33, 0.3f);
      std::vector<float> s(static_cast<std::size_t>(visible)), out(static_cast<std::size_t>(hd));
      attention_scores_fixed(q.data(), kv.data() + 2, ld, visible, hd, 0.125f, s.data());
      attention_values_fixed(p.data(), kv.data() + 1, ld, visible, hd, out.data());
      for (std::int64_t j = 0; j < visible; ++j) {
        const float want = dot(q.data(), kv.data() + 2 + j * ld, hd) * 0.125f;
        ASSERT_EQ(std::bit_cast<std::uint32_t>(s[static_cast<std::size_t>(j)]), std::bit_cast<std::uint32_t>(want))
            << "j = " << j;
      }
      for (std::int64_t e = 0; e < hd; ++e) {
        float want = 0;
        for (std::int64_t j = 0; j < visible; ++j)
          want += p[static_cast<std::size_t>(j)] * kv[static_cast<std::size_t>(1 + j * ld + e)];
        ASSERT_EQ(std::bit_cast<std::uint32_t>(out[static_cast<std::size_t>(e)]), std::bit_cast<std::uint32_t>(want))
            << "e = " << e;
      }
    }
  }
}

}  // namespace
}  // namespace rlsim::models
