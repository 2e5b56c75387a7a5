#include "sim/pipeline/rollout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "sim/engine/event_queue.h"

namespace rlsim::sim {
namespace {

// A hand-built single-device cost model: 10 GB of weights at 1 TB/s, 100 KB of KV per token,
// 2e10 FLOPs per token at 1e14 FLOP/s, 1e6 attention FLOPs per cached token, 1 ms overhead.
RolloutCostModel toy_model(double compute_rate = 1e14) {
  RolloutCostModel c;
  c.weight_bytes_per_device = 10e9;
  c.dense_bytes_per_device = 10e9;
  c.kv_bytes_per_token_device = 100e3;
  c.matmul_flops_per_token_device = 2e10;
  c.attn_flops_per_ctx_device = 1e6;
  c.mem_bw = 1e12;
  c.expert_mem_bw = 0.5e12;
  c.kv_mem_bw = 0.5e12;  // paged attention reads the KV cache at half the weight stream's rate
  c.compute_rate = compute_rate;
  c.overhead_s = 1e-3;
  c.sequence_overhead_s = 10e-6;
  c.layers = 10;
  c.tp = 1;
  c.allreduce_bytes_per_token = 0;
  return c;
}

TEST(RolloutCost, DecodeIterationClosedForm) {
  const auto c = toy_model();
  // b = 4, 1000 cached tokens: memory = 10e9 / 1e12 (weights) + 1e8 / 0.5e12 (KV) = 10.2 ms;
  // compute = (4 * 2e10 + 1000 * 1e6) / 1e14 = 0.81 ms -> memory-bound, + 1 ms step overhead
  // + 4 sequences x 10 us.
  EXPECT_DOUBLE_EQ(c.decode_memory_s(4, 1000), 0.0102);
  EXPECT_DOUBLE_EQ(c.decode_compute_s(4, 1000), 0.00081);
  EXPECT_DOUBLE_EQ(c.decode_s(4, 1000), 0.0112 + 4 * 10e-6);
}

// A grouped GEMM computes whole tiles of rows: routed-expert FLOPs of b tokens run at the
// efficiency m / (m + m_half), m = b k / E_touched(b) tokens per touched expert.
TEST(RolloutCost, ExpertGemmsRunAtTheTokensPerExpertEfficiency) {
  auto c = toy_model();
  c.experts = 64;
  c.active = 4;
  c.expert_flops_per_token_device = 1e9;
  c.moe_half_tokens = 16;
  for (double b : {1.0, 16.0, 256.0, 4096.0}) {
    const double touched = 64 * (1 - std::pow(1 - 4.0 / 64, b));
    const double m = b * 4 / touched;
    EXPECT_NEAR(c.expert_compute_s(b), b * 1e9 / (c.compute_rate * m / (m + 16)), 1e-15) << b;
  }
  // Few tokens per expert waste most of each tile: per token, 16 tokens cost more than 4,096.
  EXPECT_GT(c.expert_compute_s(16) / 16, 2 * c.expert_compute_s(4096) / 4096);
}

// The fixed cost of a step grows with the sequences in it (scheduler, sampler): a batch-1 tail
// step pays the iteration overhead plus one sequence's share, not a full batch's.
TEST(RolloutCost, StepOverheadGrowsWithTheBatch) {
  const auto c = toy_model();
  EXPECT_DOUBLE_EQ(c.step_overhead_s(1), 1e-3 + 10e-6);
  EXPECT_DOUBLE_EQ(c.step_overhead_s(256), 1e-3 + 256 * 10e-6);
  EXPECT_NEAR(c.decode_s(256, 0) - c.decode_s(1, 0),
              std::max(c.decode_memory_s(256, 0), c.decode_compute_s(256, 0)) -
                  std::max(c.decode_memory_s(1, 0), c.decode_compute_s(1, 0)) + 255 * 10e-6,
              1e-15);
  // A prefill samples the sequences it admits as well as the running ones.
  EXPECT_NEAR(c.prefill_s(1000, 0, 3, 5, 0) - c.prefill_s(1000, 0, 1, 5, 0), 2 * 10e-6, 1e-15);
}

// Routed-expert weights stream at the fused-MoE kernels' bandwidth, dense weights at the
// engine's: decode of b tokens reads E (1 - (1 - k/E)^b) experts at expert_mem_bw.
TEST(RolloutCost, ExpertWeightsStreamAtTheGroupedGemmBandwidth) {
  auto c = toy_model();
  c.experts = 64;
  c.active = 4;
  c.expert_bytes_per_device = 50e6;
  for (int b : {1, 8, 256}) {
    const double touched = 64 * (1 - std::pow(1 - 4.0 / 64, b));
    EXPECT_NEAR(c.weights_read_s(b), 10e9 / 1e12 + touched * 50e6 / 0.5e12, 1e-12) << b;
    EXPECT_NEAR(c.decode_memory_s(b, 100), c.weights_read_s(b) + 100 * 100e3 / 0.5e12, 1e-12) << b;
  }
}

TEST(RolloutCost, StretchEqualsSumOfIterations) {
  // Rates chosen so memory and compute cross inside the stretch in either direction.
  for (double rate : {1e14, 3e12, 1e12, 2e11}) {
    const auto c = toy_model(rate);
    for (int b : {1, 7, 64, 256}) {
      for (double ctx0 : {0.0, 5e3, 2e5}) {
        for (std::int64_t n : {1, 2, 17, 1000, 5000}) {
          double brute = 0;
          for (std::int64_t k = 0; k < n; ++k) brute += c.decode_s(b, ctx0 + static_cast<double>(b) * k);
          EXPECT_NEAR(c.decode_stretch_s(b, ctx0, n), brute, brute * 1e-9)
              << "rate " << rate << " b " << b << " ctx0 " << ctx0 << " n " << n;
        }
      }
    }
  }
}

std::vector<Request> make_requests(int n, std::int64_t prompt, std::int64_t response) {
  std::vector<Request> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    v[static_cast<std::size_t>(i)].index = i;
    v[static_cast<std::size_t>(i)].prompt_tokens = prompt;
    v[static_cast<std::size_t>(i)].response_tokens = response;
  }
  return v;
}

struct EngineRun {
  TimeNs done = -1;
  EngineStats stats;
};

EngineRun run_engine(const RolloutCostModel& c, std::vector<Request>& reqs, double kv_capacity, int max_num_seqs,
                     int generate_batch = 0) {
  EventQueue q;
  NullSink sink;
  RolloutEngine e(c, q, sink, 0, kv_capacity, max_num_seqs, false, generate_batch);
  std::vector<Request*> ptrs;
  for (auto& r : reqs) ptrs.push_back(&r);
  EngineRun out;
  e.start(ptrs, [&] { out.done = q.now(); });
  q.run();
  out.stats = e.stats();
  return out;
}

TEST(RolloutEngine, SingleBatchMatchesClosedForm) {
  const auto c = toy_model();
  const int n = 8;
  const std::int64_t prompt = 500, response = 300;
  auto reqs = make_requests(n, prompt, response);
  const auto r = run_engine(c, reqs, 1e9, 256);
  // One mixed prefill iteration producing the first token, then response-1 decode iterations
  // of the whole batch reading n * (prompt + 1 + k) cached tokens.
  const double prefill = c.prefill_s(n * prompt, n * c.causal_attn_flops_device(prompt), n, 0, 0);
  const double decode = c.decode_stretch_s(n, n * (prompt + 1.0), response - 1);
  EXPECT_NEAR(to_seconds(r.done), prefill + decode, 2e-9 * 3);
  EXPECT_EQ(r.stats.iterations, response);
  EXPECT_EQ(r.stats.preemptions, 0);
  for (const auto& q : reqs) {
    EXPECT_EQ(q.generated, response);
    EXPECT_EQ(q.finish_ns, r.done);
    EXPECT_EQ(q.first_token_ns, to_ns(prefill));
  }
}

TEST(RolloutEngine, ShortSequencesLeaveTheBatchEarly) {
  const auto c = toy_model();
  std::vector<Request> reqs = make_requests(2, 100, 10);
  reqs[1].response_tokens = 50;
  const auto r = run_engine(c, reqs, 1e9, 256);
  EXPECT_LT(reqs[0].finish_ns, reqs[1].finish_ns);
  const double prefill = c.prefill_s(200, 2 * c.causal_attn_flops_device(100), 2, 0, 0);
  const double both = c.decode_stretch_s(2, 2 * 101.0, 9);  // tokens 2..10 of both
  const double alone = c.decode_stretch_s(1, 110.0, 40);    // tokens 11..50 of the long one (context 100 + 10)
  EXPECT_NEAR(to_seconds(reqs[0].finish_ns), prefill + both, 1e-8);
  EXPECT_NEAR(to_seconds(r.done), prefill + both + alone, 1e-8);
}

TEST(RolloutEngine, MaxNumSeqsBoundsTheBatch) {
  const auto c = toy_model();
  auto reqs = make_requests(10, 100, 20);
  const auto r = run_engine(c, reqs, 1e9, 4);
  EXPECT_EQ(r.stats.max_running, 4);
  EXPECT_FALSE(r.stats.kv_limited);
  for (const auto& q : reqs) EXPECT_EQ(q.generated, 20);
  // Admission is FIFO: later sequences are admitted no earlier than earlier ones.
  for (std::size_t i = 1; i < reqs.size(); ++i) EXPECT_LE(reqs[i - 1].admit_ns, reqs[i].admit_ns);
}

TEST(RolloutEngine, KvCapacityLimitsBatchAndPreempts) {
  const auto c = toy_model();
  auto reqs = make_requests(10, 100, 100);
  const double capacity = 1000;  // tokens: 9 prompts fit under the 1 % watermark, their growth does not
  const auto r = run_engine(c, reqs, capacity, 256);
  EXPECT_EQ(r.stats.max_running, 9);
  EXPECT_TRUE(r.stats.kv_limited);
  EXPECT_GT(r.stats.preemptions, 0);
  EXPECT_LE(r.stats.kv_peak_tokens, capacity);
  std::int64_t preempted = 0;
  for (const auto& q : reqs) {
    EXPECT_EQ(q.generated, q.response_tokens) << "every sequence is generated exactly once";
    EXPECT_GE(q.finish_ns, q.first_token_ns);
    preempted += q.preemptions;
  }
  EXPECT_EQ(preempted, r.stats.preemptions);
  // With no KV limit the same work finishes sooner.
  auto reqs2 = make_requests(10, 100, 100);
  EXPECT_LT(run_engine(c, reqs2, 1e9, 256).done, r.done);
}

// generate_batch: each generate() call of 2 waits for its longest response before the next call's
// sequences are admitted. Responses 10, 50 | 10, 50: two identical calls, each a prefill of 2, 9
// decode steps of both and 40 of the long one alone; continuous batching with 2 slots would
// admit the third sequence when the first leaves and finish sooner.
TEST(RolloutEngine, GenerateCallsWaitForTheirLongestResponse) {
  const auto c = toy_model();
  auto calls = make_requests(4, 100, 10);
  calls[1].response_tokens = 50;
  calls[3].response_tokens = 50;
  const auto r = run_engine(c, calls, 1e9, 256, 2);
  const double prefill = c.prefill_s(200, 2 * c.causal_attn_flops_device(100), 2, 0, 0);
  const double one_call = prefill + c.decode_stretch_s(2, 2 * 101.0, 9) + c.decode_stretch_s(1, 110.0, 40);
  EXPECT_NEAR(to_seconds(calls[1].finish_ns), one_call, 1e-8);
  EXPECT_EQ(calls[2].admit_ns, calls[1].finish_ns) << "the second call starts when the first has finished";
  EXPECT_NEAR(to_seconds(r.done), 2 * one_call, 2e-8);
  EXPECT_EQ(r.stats.max_running, 2);
  for (const auto& q : calls) EXPECT_EQ(q.generated, q.response_tokens);

  auto continuous = make_requests(4, 100, 10);
  continuous[1].response_tokens = 50;
  continuous[3].response_tokens = 50;
  const auto rc = run_engine(c, continuous, 1e9, 2);
  EXPECT_LT(continuous[2].admit_ns, continuous[1].finish_ns);
  EXPECT_LT(rc.done, r.done);
  // A call larger than the share is the whole share: the same as continuous batching.
  auto whole = make_requests(4, 100, 10);
  auto plain = make_requests(4, 100, 10);
  EXPECT_EQ(run_engine(c, whole, 1e9, 256, 16).done, run_engine(c, plain, 1e9, 256).done);
}

// Preempted sequences stay in their call: with KV room for about one call, every sequence still
// finishes exactly once and no call overlaps the next.
TEST(RolloutEngine, PreemptedSequencesFinishTheirCall) {
  const auto c = toy_model();
  auto reqs = make_requests(8, 100, 100);
  const auto r = run_engine(c, reqs, 700, 256, 4);
  EXPECT_GT(r.stats.preemptions, 0);
  TimeNs first_call_end = 0;
  for (int i = 0; i < 4; ++i) first_call_end = std::max(first_call_end, reqs[static_cast<std::size_t>(i)].finish_ns);
  for (int i = 4; i < 8; ++i) EXPECT_GE(reqs[static_cast<std::size_t>(i)].admit_ns, first_call_end) << i;
  for (const auto& q : reqs) EXPECT_EQ(q.generated, q.response_tokens);
}

}  // namespace
}  // namespace rlsim::sim
