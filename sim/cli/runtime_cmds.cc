#include "sim/cli/runtime_cmds.h"

#include <fmt/format.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>

#include "models/runtime/gemm.h"
#include "models/runtime/kernels.h"
#include "models/runtime/reload.h"
#include "models/runtime/tokenizer.h"
#include "models/runtime/transformer.h"
#include "sim/engine/random.h"
#include "sim/scenario/scenario.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace rlsim::cli {
namespace {

namespace fs = std::filesystem;

// Recipe names (or fp32) as runtime precisions; an unknown one is bad input (exit 2) named for `command`.
std::vector<models::RuntimePrecision> parse_precisions(const std::vector<std::string>& names, std::string_view command) {
  std::vector<models::RuntimePrecision> out;
  for (const std::string& name : names) {
    try {
      out.push_back(models::runtime_precision(name));
    } catch (const std::invalid_argument& e) {
      throw sim::ScenarioError(fmt::format("{}: {}", command, e.what()));
    }
  }
  return out;
}

// Bytes the host can still give this process: MemAvailable plus SwapFree of /proc/meminfo (Linux
// proc(5), both in kB); nullopt where the file or either field cannot be read.
std::optional<double> host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::optional<double> available, swap;
  std::string key, rest;
  double kb = 0;
  while (in >> key >> kb) {
    std::getline(in, rest);  // " kB"
    if (key == "MemAvailable:") available = kb * 1024;
    if (key == "SwapFree:") swap = kb * 1024;
  }
  if (!available || !swap) return std::nullopt;
  return *available + *swap;
}

// Throws sim::ScenarioError (bad input, exit 2) for `command` when `what` needs at least `bytes`
// and the host has less available (host_available_bytes; nothing is checked where that cannot be
// read), before any of it is allocated: past it, Linux's OOM killer ends the process unannounced.
void require_host_memory(double bytes, std::string_view what, std::string_view command) {
  const std::optional<double> available = host_available_bytes();
  if (available && bytes > *available) {
    throw sim::ScenarioError(
        fmt::format("{}: {} need at least {:.1f} GB of host memory; the host has {:.1f} GB available "
                    "(MemAvailable + SwapFree)",
                    command, what, bytes / 1e9, *available / 1e9));
  }
}

// The bytes of a model's weights as ModelWeights holds them (FP32), from its shapes alone.
double fp32_weight_bytes(const models::TransformerConfig& c) {
  return static_cast<double>(c.parameters()) * static_cast<double>(sizeof(float));
}

// The bytes of a model's synthetic FP32 weights (synthetic_weights) and what to call them.
std::pair<double, std::string> synthetic_weight_need(const models::TransformerConfig& c, const std::string& source) {
  return {fp32_weight_bytes(c), fmt::format("synthetic FP32 weights of {} ({} parameters)", source, c.parameters())};
}

}  // namespace

models::ModelWeights load_model_within_host(const std::string& path, std::string_view command) {
  return models::load_model(path, [&](const models::TransformerConfig& c) {
    require_host_memory(fp32_weight_bytes(c), fmt::format("the FP32 weights of {} ({} parameters)", path, c.parameters()),
                        command);
  });
}

void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

void use_host_independent_kernels() { models::gemm_allow_amx(false); }

std::vector<std::vector<int>> encode_prompts(const models::Tokenizer& tokenizer, const models::TransformerConfig& config,
                                             const std::vector<std::string>& texts, int count) {
  const int bos = config.bos >= 0 ? config.bos : tokenizer.bos();
  std::vector<std::vector<int>> out;
  for (int i = 0; i < count; ++i) {
    std::vector<int> ids = tokenizer.encode(texts[static_cast<std::size_t>(i) % texts.size()], false);
    if (bos >= 0) ids.insert(ids.begin(), bos);
    out.push_back(std::move(ids));
  }
  return out;
}

std::string default_tokenizer(const std::string& model, std::string_view command) {
  const fs::path p(model);
  std::error_code ec;  // an impossible name is not a directory, and not found below
  if (fs::is_directory(p, ec)) return (p / "tokenizer.json").string();
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (fs::exists(dir / "tokenizer.bin", ec)) return (dir / "tokenizer.bin").string();
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("tok", 0) == 0 && e.path().extension() == ".bin") found.push_back(e.path());
  }
  if (found.size() == 1) return found[0].string();
  throw sim::ScenarioError(fmt::format("{}: no tokenizer given and none unique beside {} (use --tokenizer)", command, model));
}

int cmd_generate(const GenerateOptions& o, std::ostream& out, std::ostream& err) {
  models::RuntimePrecision precision;
  try {
    precision = models::runtime_precision(o.precision);
  } catch (const std::invalid_argument& e) {
    throw sim::ScenarioError(std::string("rlsim generate: ") + e.what());
  }
  const models::ModelWeights weights = load_model_within_host(o.model, "rlsim generate");
  const auto tokenizer = models::load_tokenizer(o.tokenizer.empty() ? default_tokenizer(o.model, "rlsim generate") : o.tokenizer,
                                                weights.config.vocab);
  if (tokenizer->vocab_size() > weights.config.vocab) {
    throw sim::ScenarioError(
        fmt::format("rlsim generate: the tokenizer has {} tokens, the model {}", tokenizer->vocab_size(), weights.config.vocab));
  }
  models::Transformer model(weights, precision);
  const int bos = weights.config.bos >= 0 ? weights.config.bos : tokenizer->bos();
  const int eos = weights.config.eos >= 0 ? weights.config.eos : tokenizer->eos();
  std::vector<int> prompt = tokenizer->encode(o.prompt, false);
  if (bos >= 0) prompt.insert(prompt.begin(), bos);
  if (prompt.empty()) throw sim::ScenarioError("rlsim generate: the prompt encodes to no token and the model has no BOS");
  const int steps = std::min(o.steps, weights.config.max_seq);
  if (static_cast<int>(prompt.size()) > steps) {
    throw sim::ScenarioError(fmt::format("rlsim generate: the prompt is {} tokens, more than --steps {}", prompt.size(), steps));
  }
  sim::Rng rng(o.seed);
  const auto t0 = std::chrono::steady_clock::now();
  int token = prompt[0], generated = 0;
  for (int pos = 0; pos < steps; ++pos) {
    const auto logits = model.decode(token);
    int next;
    if (pos + 1 < static_cast<int>(prompt.size())) {
      next = prompt[static_cast<std::size_t>(pos) + 1];
    } else {
      next = models::sample_token(logits, o.temperature, o.top_p, rng.uniform());
      ++generated;
    }
    if (next == bos || next == eos) break;  // llama2.c stops when the model emits BOS
    out << tokenizer->decode(token, next);
    out.flush();
    token = next;
  }
  out << "\n";
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!o.quiet) {
    err << fmt::format("rlsim generate: {} ({}), {} prompt tokens, {} generated, {:.1f} tok/s\n", weights.config.name,
                       precision.name, prompt.size(), generated, model.position() / std::max(s, 1e-9));
  }
  return 0;
}

ReadBandwidthProbe::ReadBandwidthProbe(std::size_t bytes) : n_(bytes / sizeof(float)), buf_(new float[n_]) {
  const auto sn = static_cast<std::int64_t>(n_);
  float* b = buf_.get();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < sn; ++i) b[i] = 1.0f;  // first touch by the readers
}

double ReadBandwidthProbe::pass(int streams) const {
  if (streams < 1 || streams > kMaxReadStreams)
    throw std::invalid_argument(fmt::format("ReadBandwidthProbe::pass: {} streams, 1..{} expected", streams, kMaxReadStreams));
  constexpr std::int64_t kStep = 64;  // floats per stream per step: 4 cache lines
  // Floats between consecutive parts, 33 cache lines, so that parts do not start a power of two
  // bytes apart: two parts exactly 256 MiB apart read 28-31 GB/s on a Zen 4 VM's 2 threads where
  // the same parts 33 lines further apart read 35-52 (2026-11-28, alternating runs).
  constexpr std::int64_t kSkew = 33 * 16;
  const auto sn = static_cast<std::int64_t>(n_);
  const float* buf = buf_.get();
  const auto t0 = std::chrono::steady_clock::now();
  double sum = 0;
#pragma omp parallel reduction(+ : sum)
  {
#ifdef _OPENMP
    const std::int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
#else
    const std::int64_t nt = 1, t = 0;
#endif
    // Contiguous share per thread, cut into `streams` parts read side by side, kStep floats of
    // each part a step in independent sums (vectorised); no software prefetch.
    const std::int64_t lo = sn * t / nt / kStep * kStep, hi = t + 1 == nt ? sn : sn * (t + 1) / nt / kStep * kStep;
    // A share too short for the parts and their gaps is read as one stream.
    const int parts = hi - lo >= streams * (kSkew + kStep) ? streams : 1;
    const std::int64_t part = ((hi - lo) - (parts - 1) * kSkew) / parts / kStep * kStep;
    float acc[kMaxReadStreams][kStep] = {};
    const float* p = buf + lo;
    for (std::int64_t i = 0; i < part; i += kStep) {
      for (int k = 0; k < parts; ++k) {
        const float* q = p + k * (part + kSkew) + i;
#if !defined(__clang__)  // clang cannot vectorise this reduction into an array and warns that it did not
#pragma omp simd
#endif
        for (int j = 0; j < kStep; ++j) acc[k][j] += q[j];
      }
    }
    // The rest: the gap after each part (the last part's runs to the end of the share).
    for (int k = 0; k < parts; ++k) {
      const std::int64_t end = k + 1 < parts ? (k + 1) * (part + kSkew) : hi - lo;
      for (std::int64_t i = k * (part + kSkew) + part; i < end; ++i) acc[0][0] += p[i];
    }
    for (const auto& a : acc) {
      for (float v : a) sum += v;
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (sum != static_cast<double>(n_)) throw std::logic_error("ReadBandwidthProbe::pass: wrong sum");
  return static_cast<double>(n_ * sizeof(float)) / s / 1e9;
}

double ReadBandwidthProbe::best(int repeat, int streams) const {
  double best = 0;
  for (int r = 0; r < repeat + 1; ++r) {  // one warm-up pass
    const double b = pass(streams);
    if (r > 0) best = std::max(best, b);
  }
  return best;
}

double ReadBandwidthProbe::best_of_streams() const {
  double best = 0;
  for (int streams = 1; streams <= kMaxReadStreams; streams *= 2) best = std::max(best, pass(streams));
  return best;
}

double measure_read_bandwidth(std::size_t bytes, int repeat, int streams) {
  return ReadBandwidthProbe(bytes).best(repeat, streams);
}

double thread_handoff_ns(int round_trips) {
#ifdef _OPENMP
  if (round_trips < 1 || omp_get_max_threads() < 2) return 0;
  alignas(std::hardware_destructive_interference_size) std::atomic<int> line{0};  // the line handed back and forth
  double ns = 0;
#pragma omp parallel num_threads(2)
  {
    if (omp_get_num_threads() == 2) {
      const int t = omp_get_thread_num();
      // Thread 0 writes odd values, thread 1 answers each with the next even one.
      const auto start = std::chrono::steady_clock::now();
      for (int k = 0; k < round_trips; ++k) {
        if (t == 0) {
          line.store(2 * k + 1, std::memory_order_release);
          while (line.load(std::memory_order_acquire) != 2 * k + 2) {
          }
        } else {
          while (line.load(std::memory_order_acquire) != 2 * k + 1) {
          }
          line.store(2 * k + 2, std::memory_order_release);
        }
      }
      if (t == 0) ns = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() * 1e9 / round_trips;
    }
  }
  return ns;
#else
  (void)round_trips;
  return 0;
#endif
}

namespace {

// The GGUF type a precision's linear weights compare with: BF16, Q8_0 (8-bit) or Q4_0 (4-bit).
std::string gguf_class(const models::RuntimePrecision& p) {
  if (!p.recipe) return "F32";
  const int bits = models::traits(p.recipe->linear.weight.element).bits;
  return bits >= 16 ? "BF16" : (bits >= 8 ? "Q8_0" : "Q4_0");
}

// What llama-bench's rates in `g` are against bench runtime's best runs: "best" (its best
// repetition, like with like), "mean" (avg_ts, all a CSV gives), or each test's where they differ.
std::string baseline_statistic(const GgufSpeed& g) {
  auto name = [](bool best) { return best ? "best" : "mean"; };
  if (g.prefill_best == g.decode_best) return name(g.decode_best);
  return fmt::format("prefill-{}-decode-{}", name(g.prefill_best), name(g.decode_best));
}

// The shapes the runtime bench runs: SmolLM2-135M's, or those of the config.json `shape` names;
// the KV cache as long as the runs need.
models::TransformerConfig bench_shape(const BenchRuntimeOptions& o) {
  models::TransformerConfig c;
  if (o.shape.empty()) {
    // SmolLM2-135M (../shared/models/smollm2-135m-tokenizer/config.json): LlamaForCausalLM.
    c.name = "SmolLM2-135M";
    c.dim = 576, c.hidden_dim = 1536, c.layers = 30, c.heads = 9, c.kv_heads = 3, c.head_dim = 64, c.vocab = 49152;
    c.norm_eps = 1e-5f, c.rope_theta = 100000.0f, c.rope_interleaved = false, c.tied_embeddings = true;
  } else {
    c = models::read_hf_config(o.shape);
  }
  c.max_seq = std::max(o.prefill_tokens, o.decode_tokens + 1);
  return c;
}

// Best tok/s of `run` (`tokens` tokens) over `repeat` runs, after one warm-up when `warm`, and
// the mean of what `probe` (called untimed between the timed runs: before the first, after each)
// returned right before and right after the best run.
template <typename Run, typename Probe>
std::pair<double, double> best_rate_around(int tokens, int repeat, bool warm, Run&& run, Probe&& probe) {
  if (warm) run();
  double best = std::numeric_limits<double>::infinity(), around_best = 0;
  double before = probe();
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double after = probe();
    if (s < best) best = s, around_best = (before + after) / 2;
    before = after;
  }
  return {tokens / best, around_best};
}

template <typename Run>
double best_rate(int tokens, int repeat, bool warm, Run&& run) {
  return best_rate_around(tokens, repeat, warm, run, [] { return 0.0; }).first;
}

// Tok/s of one model: greedy batch-1 decode, the engine's prefill (last logits) and the trainer's
// (every position's logits); and the read bandwidth probed around the best decode run.
struct RuntimeRates {
  double decode = 0, prefill = 0, prefill_logits = 0;
  double decode_gbps = 0;  // GB/s; 0 without a probe
};

// Bytes a decode step of `model` reads in bench runtime: its weights once (decode_weight_bytes)
// and the KV cache at the mean position of o.decode_tokens steps from position 0.
double decode_bytes_per_token(const models::Transformer& model, const BenchRuntimeOptions& o) {
  return static_cast<double>(model.decode_weight_bytes()) +
         static_cast<double>(model.kv_cache_bytes_per_position()) * (o.decode_tokens + 1) / 2.0;
}

// A greedy batch-1 decode of `tokens` tokens from position 0 after `first` (the KV cache reset
// first): every decode bench runtime runs, timed (decode_rate) or recorded (print_decode_gemv).
void greedy_decode(models::Transformer& model, int first, int tokens) {
  model.reset();
  int token = first;
  for (int i = 0; i < tokens; ++i) token = models::sample_token(model.decode(token), 0.0, 1.0, 0.0);
}

// Best tok/s of greedy_decode of o.decode_tokens tokens after `first`, over o.repeat runs after a
// warm-up, and the mean of what `probe` (called untimed between the timed runs) returned right
// before and right after the best one.
template <typename Probe>
std::pair<double, double> decode_rate(models::Transformer& model, int first, const BenchRuntimeOptions& o, Probe&& probe) {
  return best_rate_around(
      o.decode_tokens, o.repeat, true, [&] { greedy_decode(model, first, o.decode_tokens); }, probe);
}

// The rates of `model`; with a probe, a probe pass at every stream count
// (ReadBandwidthProbe::best_of_streams) runs before the first timed decode run and after each,
// so that a decode's roofline fraction divides by the bandwidth of its own moment, the mean of
// the passes on either side of it: a VM's bandwidth changes within seconds (README, runtime).
RuntimeRates measure_rates(models::Transformer& model, const std::vector<int>& prompt, const BenchRuntimeOptions& o,
                           const ReadBandwidthProbe* probe) {
  RuntimeRates r;
  std::tie(r.decode, r.decode_gbps) =
      decode_rate(model, prompt[0], o, [&] { return probe != nullptr ? probe->best_of_streams() : 0.0; });
  r.prefill = best_rate(o.prefill_tokens, o.repeat, false, [&] {
    model.reset();
    const auto logits = model.extend(prompt);
    if (!std::isfinite(logits[0])) throw std::logic_error("bench runtime: prefill logits not finite");
  });
  r.prefill_logits = best_rate(o.prefill_tokens, o.repeat, false, [&] {
    const models::MatrixRM logits = model.prefill(prompt);
    if (!std::isfinite(logits(logits.rows() - 1, 0))) throw std::logic_error("bench runtime: prefill logits not finite");
  });
  return r;
}

// The model the cache-resident decode runs (cache_resident_decode): `c` cut to one layer, its
// vocabulary cut in the same proportion (at least 1), so that the lm_head's share of the bytes a
// token reads stays about the full model's.
models::TransformerConfig cache_resident_shape(models::TransformerConfig c) {
  c.vocab = std::max(1, static_cast<int>(std::lround(static_cast<double>(c.vocab) / c.layers)));
  c.layers = 1;
  return c;
}

// The compute side of the roofline (S. Williams, A. Waterman, D. Patterson, "Roofline", CACM 52(4),
// 2009: attainable rate = min(compute ceiling, bandwidth x intensity)): precision `p` decoded on
// `cut`, the synthetic weights of cache_resident_shape(), as bench runtime decodes the full
// model. With at most 3/4 of the last-level cache (`llc` bytes) in weights, they stay cached from
// token to token, so the GB/s of its bytes is what the kernels, the threads' synchronisation and
// the per-token work reach when DRAM does not bound them: a recipe whose rate here is under 0.7
// of the probe's bandwidth cannot reach a 0.7 roofline fraction at it. Returns {tok/s, bytes a
// token}, or {0, 0} after a note on `err` when `llc` is 0 or the weights take more than 3/4 of it.
std::pair<double, double> cache_resident_decode(const models::ModelWeights& cut, const models::RuntimePrecision& p,
                                                std::size_t llc, const BenchRuntimeOptions& o, std::ostream& err) {
  models::Transformer model(cut, p);
  const std::size_t resident = model.weight_memory().resident;
  if (llc == 0 || resident > llc / 4 * 3) {
    err << fmt::format("  {}: no cache-resident decode: the one-layer model's weights take {:.1f} MB, {}\n", p.name,
                       static_cast<double>(resident) / 1e6,
                       llc == 0 ? std::string("the last-level cache's size is unknown")
                                : fmt::format("over 3/4 of the {:.1f} MB last-level cache", static_cast<double>(llc) / 1e6));
    return {0.0, 0.0};
  }
  return {decode_rate(model, 0, o, [] { return 0.0; }).first, decode_bytes_per_token(model, o)};
}

// Round trips of thread_handoff_ns before a decode-gemv run: about 0.2-1 ms on the 2-vCPU VM
// (100-480 ns a trip, README runtime section).
constexpr int kHandoffRoundTrips = 2000;

// The decode-gemv line of precision `p`: one more greedy_decode of o.decode_tokens tokens after
// `first`, untimed by the rates, with gemv()'s recorder on. Its GEMV calls a token, their
// milliseconds a token and the rest of the token's (attention, norms, the arg max), and the
// least-squares fit of the calls' wall times to a fixed cost a call plus their weight
// bytes at a stream rate (GemvCallStats::fit; "n/a" where the calls were all of one size).
void print_decode_gemv(models::Transformer& model, int first, const models::RuntimePrecision& p, const BenchRuntimeOptions& o,
                       std::ostream& out) {
  const double handoff = thread_handoff_ns(kHandoffRoundTrips);
  models::gemv_record_start();
  const auto t0 = std::chrono::steady_clock::now();
  greedy_decode(model, first, o.decode_tokens);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const models::GemvCallStats g = models::gemv_record_stop();
  const double tokens = o.decode_tokens;
  double fixed = 0, rate = 0;
  const bool fitted = g.fit(fixed, rate);
  out << fmt::format(
      "decode-gemv {} calls_per_token {:.1f} gemv_ms_per_token {:.3f} other_ms_per_token {:.3f} "
      "fixed_us_per_call {} stream_gbps {} handoff_ns {}\n",
      p.name, static_cast<double>(g.calls) / tokens, g.seconds / tokens * 1e3, std::max(0.0, seconds - g.seconds) / tokens * 1e3,
      fitted ? fmt::format("{:.2f}", fixed * 1e6) : "n/a", fitted ? fmt::format("{:.1f}", rate / 1e9) : "n/a",
      handoff > 0 ? fmt::format("{:.0f}", handoff) : "n/a");
}

// Measures precision `p` with the default kernels and prints its lines: decode (with its roofline
// fraction at the bandwidth `probe` read right before the best run), decode-gemv
// (print_decode_gemv), the cache-resident decode of `cut` (cache_resident_decode; none when it
// does not fit), both prefills, resident against packed weight bytes.
RuntimeRates bench_precision(const models::ModelWeights& w, const models::ModelWeights& cut, std::size_t llc,
                             const models::RuntimePrecision& p, const std::vector<int>& prompt, const ReadBandwidthProbe& probe,
                             const BenchRuntimeOptions& o, std::ostream& out, std::ostream& err) {
  models::Transformer model(w, p);
  const double bytes = decode_bytes_per_token(model, o);
  const models::Transformer::WeightMemory mem = model.weight_memory();
  err << fmt::format("  {}: {:.1f} MB read per decoded token\n", p.name, bytes / 1e6);
  err.flush();
  const RuntimeRates r = measure_rates(model, prompt, o, &probe);
  out << fmt::format("decode {} {:.1f} tok/s roofline {:.2f} bytes_per_token {:.0f} bandwidth {:.1f}\n", p.name, r.decode,
                     r.decode * bytes / (r.decode_gbps * 1e9), bytes, r.decode_gbps);
  print_decode_gemv(model, prompt[0], p, o, out);
  out.flush();
  if (const auto [rate, cut_bytes] = cache_resident_decode(cut, p, llc, o, err); rate > 0) {
    out << fmt::format("decode-cache-resident {} {:.1f} tok/s bytes_per_token {:.0f} gbps {:.1f}\n", p.name, rate, cut_bytes,
                       rate * cut_bytes / 1e9);
  }
  out << fmt::format("prefill {} {:.1f} tok/s\n", p.name, r.prefill);
  out << fmt::format("prefill-logits {} {:.1f} tok/s\n", p.name, r.prefill_logits);
  if (models::gemm_uses_amx()) {
    // The same prefill on the AVX-512 kernel, so that a host with AMX shows what the tiles bring.
    models::gemm_allow_amx(false);
    const double rate = best_rate(o.prefill_tokens, o.repeat, false, [&] { model.reset(), model.extend(prompt); });
    models::gemm_allow_amx(true);
    out << fmt::format("prefill-no-amx {} {:.1f} tok/s\n", p.name, rate);
  }
  out << fmt::format("weights {} resident_bytes {} packed_bytes {} ratio {:.3f}\n", p.name, mem.resident, mem.packed,
                     static_cast<double>(mem.resident) / static_cast<double>(mem.packed));
  out.flush();
  return r;
}

// bench runtime's compare lines (each of `measured` against its baseline in `baselines`: by
// precision name when `by_precision`, else by weight class), then llama.cpp's roofline line per
// weight type compared, from the last baseline of that type compared (`tied`: the shape's
// embeddings are tied, else a note); `gbps` is the bandwidth line's GB/s.
void print_comparison(const std::vector<std::pair<models::RuntimePrecision, RuntimeRates>>& measured,
                      const std::map<std::string, GgufSpeed>& baselines, bool by_precision, bool tied, double gbps,
                      std::ostream& out, std::ostream& err) {
  std::map<std::string, const GgufSpeed*> compared;  // GGUF type with a compare line -> its last baseline
  bool mean_baseline = false;                        // a compare line against llama-bench's mean
  for (const auto& [p, r] : measured) {
    const std::string t = gguf_class(p);
    const auto it = baselines.find(by_precision ? p.name : t);
    if (it == baselines.end() || it->second.prefill <= 0 || it->second.decode <= 0) continue;
    const GgufSpeed& g = it->second;
    out << fmt::format("compare {} {} prefill_ratio {:.2f} decode_ratio {:.2f} baseline {}\n", p.name, t, r.prefill / g.prefill,
                       r.decode / g.decode, baseline_statistic(g));
    compared[t] = &g;
    mean_baseline = mean_baseline || !g.prefill_best || !g.decode_best;
  }
  if (mean_baseline) {
    err << "  note: a baseline marked mean is llama-bench's mean repetition (avg_ts, all its CSV gives) against rlsim's best "
           "run; llama-bench -o json files, or --llama-bench, compare best with best\n";
  }
  // llama.cpp against the same roofline, so that one run shows how near the baseline itself comes.
  // Its bytes per token are the file's only when the output reads the embedding table (tied).
  if (!tied) {
    if (!compared.empty()) {
      err << "  note: no gguf roofline lines: with untied embeddings a decode reads one row of the GGUF's embedding "
             "table, so model_size overstates its bytes per token\n";
    }
    return;
  }
  for (const auto& [t, baseline] : compared) {
    const GgufSpeed& g = *baseline;
    if (g.model_bytes <= 0) continue;
    out << fmt::format("gguf {} decode {:.1f} tok/s model_bytes {} roofline {:.2f}\n", t, g.decode, g.model_bytes,
                       g.decode * static_cast<double>(g.model_bytes) / (gbps * 1e9));
  }
}

}  // namespace

std::size_t last_level_cache_bytes(const std::filesystem::path& dir) {
  std::error_code ec;
  int best_level = 0;
  std::size_t best = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename().string().rfind("index", 0) != 0) continue;
    auto first_word = [&](const char* name) {
      std::ifstream in(e.path() / name);
      std::string v;
      in >> v;
      return v;
    };
    const std::string level = first_word("level"), type = first_word("type"), size = first_word("size");
    if (type != "Data" && type != "Unified") continue;
    char* end = nullptr;
    const long lv = std::strtol(level.c_str(), &end, 10);
    if (level.empty() || *end != '\0') continue;
    const unsigned long long n = std::strtoull(size.c_str(), &end, 10);
    const std::string unit = end;
    constexpr std::size_t kKiB = 1024;
    const std::size_t scale = unit == "K" ? kKiB : unit == "M" ? kKiB * kKiB : unit.empty() ? 1 : 0;
    if (size.empty() || end == size.c_str() || scale == 0 || lv <= best_level) continue;
    best_level = static_cast<int>(lv);
    best = static_cast<std::size_t>(n) * scale;
  }
  return best;
}

int bench_runtime(const BenchRuntimeOptions& o, std::ostream& out, std::ostream& err) {
  keep_freed_memory();  // the 100 MB prefill logits and activations of repeated runs
  const std::vector<models::RuntimePrecision> precisions = parse_precisions(o.precisions, "rlsim bench runtime");
  if (!o.llama_bench.empty() && o.compare_gguf.empty()) {
    throw sim::ScenarioError("rlsim bench runtime: --llama-bench needs --compare-gguf, the folder of GGUF files to run it on");
  }
  std::map<std::string, GgufSpeed> gguf;  // by weight type: the files' (without llama_bench)
  std::optional<LlamaBenchRunner> llama;
  if (!o.llama_bench.empty()) {
    llama.emplace(o.llama_bench, o.compare_gguf, o.threads, err);  // bad input fails before timing
  } else if (!o.compare_gguf.empty()) {
    gguf = read_llama_bench(o.compare_gguf, o.threads, err);
  }
  const models::TransformerConfig c = bench_shape(o);
  constexpr std::size_t kProbeBytes = std::size_t{1} << 30;
  const auto [weight_bytes, weights_what] = synthetic_weight_need(c, o.shape.empty() ? c.name : o.shape);
  require_host_memory(static_cast<double>(kProbeBytes) + weight_bytes,
                      fmt::format("the read-bandwidth probe's {} GiB and the {}", kProbeBytes >> 30, weights_what),
                      "rlsim bench runtime");
#ifdef _OPENMP
  omp_set_num_threads(o.threads);
#endif
  err << fmt::format(
      "rlsim bench runtime: {} shapes (dim {}, ffn {}, {} layers, {} heads / {} kv, vocab {}), synthetic weights, {} threads, "
      "{} decode kernels (prefetch {}), {} prefill GEMM, best of {}\n",
      c.name, c.dim, c.hidden_dim, c.layers, c.heads, c.kv_heads, c.vocab, o.threads, models::simd_kernels_name(),
      models::gemv_prefetch_name(),
      models::gemm_uses_amx() ? std::string("AMX-BF16")
      : models::gemm_uses_avx512_bf16()
          ? std::string("AVX512-BF16")
          : (models::simd_kernels_available() ? fmt::format("{} FP32", models::simd_kernels_name()) : "scalar"),
      o.repeat);
  err.flush();
  // The host's read bandwidth: the best of 1, 2 and 4 streams per thread (the decode kernels read
  // two: for_each_tile_pair in kernels.cc), each printed. Each decode's roofline divides by the
  // same probe's bandwidth right before its best run instead.
  const ReadBandwidthProbe probe(kProbeBytes);
  double gbps = 0;
  std::string per_streams;
  for (int streams = 1; streams <= kMaxReadStreams; streams *= 2) {
    const double b = probe.best(o.repeat, streams);
    gbps = std::max(gbps, b);
    per_streams += fmt::format(" streams_{} {:.1f}", streams, b);
  }
  out << fmt::format("bandwidth {:.1f} GB/s{}\n", gbps, per_streams);
  out.flush();
  const models::ModelWeights w = models::synthetic_weights(c, 1);
  const models::ModelWeights cut = models::synthetic_weights(cache_resident_shape(c), 1);
  const std::size_t llc = last_level_cache_bytes("/sys/devices/system/cpu/cpu0/cache");
  sim::Rng rng(1);
  std::vector<int> prompt(static_cast<std::size_t>(o.prefill_tokens));
  for (int& t : prompt) t = static_cast<int>(rng.uniform() * c.vocab) % c.vocab;
  std::vector<std::pair<models::RuntimePrecision, RuntimeRates>> measured;
  std::map<std::string, GgufSpeed> adjacent;  // by precision: llama-bench's run right after it
  for (const models::RuntimePrecision& p : precisions) {
    const RuntimeRates def = bench_precision(w, cut, llc, p, prompt, probe, o, out, err);
    if (const std::string t = gguf_class(p); llama && llama->has(t)) {
      err << fmt::format("  llama-bench on the {} file\n", t);
      err.flush();
      const GgufSpeed g = llama->run(t, o.prefill_tokens, o.decode_tokens, o.repeat);
      out << fmt::format("llama-bench {} prefill {:.1f} tok/s decode {:.1f} tok/s model_bytes {}\n", t, g.prefill, g.decode,
                         g.model_bytes);
      out.flush();
      adjacent[p.name] = g;
    }
    if (o.batch_invariant) {
      models::Transformer model(w, p, models::KernelMode::kBatchInvariant);
      const RuntimeRates bi = measure_rates(model, prompt, o, nullptr);
      out << fmt::format("batch-invariant decode {} {:.1f} tok/s ratio {:.2f}\n", p.name, bi.decode, bi.decode / def.decode);
      out << fmt::format("batch-invariant prefill {} {:.1f} tok/s ratio {:.2f}\n", p.name, bi.prefill_logits,
                         bi.prefill_logits / def.prefill_logits);
      out.flush();
    }
    measured.emplace_back(p, def);
  }
  print_comparison(measured, llama ? adjacent : gguf, llama.has_value(), c.tied_embeddings, gbps, out, err);
  return 0;
}

}  // namespace rlsim::cli

namespace rlsim::cli {

int bench_reload(const BenchReloadOptions& o, std::ostream& out, std::ostream& err) {
  if (o.model.empty() == o.shape.empty()) {
    throw sim::ScenarioError(
        "rlsim bench reload: --model is required (a llama2.c checkpoint, a Hugging Face directory or synthetic-moe), or --shape "
        "CONFIG.json for "
        "synthetic weights at a model's shapes, not both");
  }
  if (o.cycles < 1 || o.check_every < 0) {
    throw sim::ScenarioError(
        fmt::format("rlsim bench reload: --cycles {} must be >= 1 and --check-every {} >= 0", o.cycles, o.check_every));
  }
  if (!(o.perturbation >= 0) || !std::isfinite(o.perturbation)) {
    throw sim::ScenarioError(fmt::format("rlsim bench reload: --perturbation {} must be finite and >= 0", o.perturbation));
  }
  const std::vector<models::RuntimePrecision> precisions = parse_precisions(o.precisions, "rlsim bench reload");
  keep_freed_memory();  // the staging buffers freed and reallocated every cycle
  models::ModelWeights w;
  if (!o.shape.empty()) {
    models::TransformerConfig c = models::read_hf_config(o.shape);
    c.max_seq = std::min(c.max_seq, 64);  // the probe's KV cache
    const auto [bytes, what] = synthetic_weight_need(c, o.shape);
    require_host_memory(bytes, fmt::format("the {}", what), "rlsim bench reload");
    w = models::synthetic_weights(c, o.seed);
  } else {
    w = o.model == "synthetic-moe" ? models::synthetic_weights(models::synthetic_moe_config(), o.seed)
                                   : load_model_within_host(o.model, "rlsim bench reload");
  }
#ifdef _OPENMP
  omp_set_num_threads(o.threads);
#endif
  const models::KernelMode kernels = o.batch_invariant ? models::KernelMode::kBatchInvariant : models::KernelMode::kDefault;
  models::ReloadOptions ro;
  ro.cycles = o.cycles, ro.check_every = o.check_every, ro.perturbation = o.perturbation, ro.seed = o.seed;
  double worst = 0;
  bool stable = true;
  for (const models::RuntimePrecision& p : precisions) {
    const models::Transformer probe(w, p, kernels);
    out << fmt::format(
        "reload {} {}: {} parameters{}, {} kernel buffers, {} MB in kernel layouts per decode token, {} cycles, perturbation {}, "
        "seed {}, {} "
        "kernels, {} threads\n",
        w.config.name.empty() ? (o.model.empty() ? o.shape : o.model) : w.config.name, p.name, w.parameters(),
        w.config.experts > 0 ? fmt::format(" (MoE: {} experts, top {})", w.config.experts, w.config.experts_per_token) : "",
        probe.weight_buffers().size(), probe.decode_weight_bytes() / 1e6, o.cycles, o.perturbation, o.seed,
        models::kernel_mode_name(kernels), o.threads);
    out.flush();
    const models::ReloadReport r = models::run_reload(w, p, kernels, ro, [&](const models::ReloadCycle& c) {
      const models::ReloadStats& s = c.stats;
      out << fmt::format(
          "cycle {} restore_ms {:.4f} load_ms {:.4f} quantize_ms {:.4f} transform_ms {:.4f} total_ms {:.4f} restore_bytes {} "
          "load_bytes {} quantize_bytes {} transform_bytes {}{}\n",
          c.cycle, 1e3 * s.restore_s, 1e3 * s.load_s, 1e3 * s.quantize_s, 1e3 * s.transform_s, 1e3 * c.seconds, s.restore_bytes,
          s.load_bytes, s.quantize_bytes, s.transform_bytes, c.checked ? fmt::format(" logit_diff {}", c.logit_diff) : "");
    });
    models::ReloadStats sum;
    for (const models::ReloadCycle& c : r.cycles) sum += c.stats;
    const double n = static_cast<double>(r.cycles.size());
    auto stage = [&](const char* name, double sec, std::size_t bytes) {
      const double b = static_cast<double>(bytes);
      out << fmt::format("stage {} ms_per_cycle {:.4f} MB_per_cycle {:.4f} GB/s {:.3f} ns_per_byte {:.4f}\n", name, 1e3 * sec / n,
                         b / n / 1e6, sec > 0 ? b / sec / 1e9 : 0.0, b > 0 ? 1e9 * sec / b : 0.0);
    };
    stage("restore", sum.restore_s, sum.restore_bytes);
    stage("load", sum.load_s, sum.load_bytes);
    stage("quantize", sum.quantize_s, sum.quantize_bytes);
    stage("transform", sum.transform_s, sum.transform_bytes);
    err << fmt::format("{}: {} checks against a fresh load, max |logit diff| {}, addresses {}\n", p.name, r.checks,
                       r.max_abs_logit_diff, r.addresses_stable ? "stable" : "MOVED");
    worst = std::max(worst, r.max_abs_logit_diff);
    stable = stable && r.addresses_stable;
  }
  out << fmt::format("max_abs_logit_diff {}\n", worst);
  out << fmt::format("addresses_stable {}\n", stable ? "yes" : "no");
  return worst == 0 && stable ? 0 : 1;
}

}  // namespace rlsim::cli
