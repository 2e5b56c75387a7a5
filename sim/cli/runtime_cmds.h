// The real-runtime subcommands of `rlsim`: generate (text from a real small model in any
// precision).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "models/runtime/model.h"
#include "models/runtime/tokenizer.h"
#include "sim/cli/llama_bench.h"

namespace rlsim::cli {

/// `count` prompts as token ids: `texts` cycled, each encoded by `tokenizer` behind the model's BOS
/// (config.bos, else the tokenizer's; none when negative).
std::vector<std::vector<int>> encode_prompts(const models::Tokenizer& tokenizer, const models::TransformerConfig& config,
                                             const std::vector<std::string>& texts, int count);

/// The tokenizer beside a model: tokenizer.json in a Hugging Face directory; for a checkpoint
/// file, tokenizer.bin or the single tok*.bin in its directory. Throws sim::ScenarioError
/// (prefixed with `command`) when none is found.
std::string default_tokenizer(const std::string& model, std::string_view command);

/// models::load_model(path) that first refuses, as bad input for `command` (sim::ScenarioError,
/// exit 2), a model whose FP32 weights (TransformerConfig::parameters() x 4 bytes) exceed the
/// host's MemAvailable + SwapFree (/proc/meminfo), before any tensor is allocated: past that,
/// Linux's OOM killer would end the process without a message. ModelFileError as load_model.
models::ModelWeights load_model_within_host(const std::string& path, std::string_view command);

/// Options of `rlsim generate`.
struct GenerateOptions {
  std::string model;      // llama2.c checkpoint file or Hugging Face directory
  std::string tokenizer;  // default: tokenizer.json of the directory, or the checkpoint's sibling tok*.bin / tokenizer.bin
  std::string precision = "fp32";
  std::string prompt;
  double temperature = 1.0;
  double top_p = 0.9;
  int steps = 256;  // positions, prompt included (llama2.c's -n)
  std::uint64_t seed = 1;
  bool quiet = false;  // no statistics line on stderr
};

/// `rlsim generate`: encodes the prompt (BOS first), feeds it through the decode path, then samples
/// until `steps` positions are filled or the model emits BOS / EOS; prints the prompt and the
/// continuation to `out` as the llama2.c reference does, then a newline; tokens/s to `err`.
/// Throws models::ModelFileError (exit 2) for bad model or tokenizer files and sim::ScenarioError
/// (exit 2) for a bad precision name or a prompt longer than `steps`.
int cmd_generate(const GenerateOptions& o, std::ostream& out, std::ostream& err);

/// Options of `rlsim bench runtime`.
struct BenchRuntimeOptions {
  std::string shape;  // Hugging Face config.json; empty: SmolLM2-135M's shapes
  std::vector<std::string> precisions{"fp32",  "bf16",           "fp8-tensor",      "fp8-block",
                                      "mxfp8", "int4-w4a16-g32", "int4-w4a16-g128", "nvfp4"};
  int threads = 2;
  int decode_tokens = 64;  // timed decode steps from position 0, batch 1
  int prefill_tokens = 512;
  int repeat = 3;                // the best run is reported
  bool batch_invariant = false;  // also time models::KernelMode::kBatchInvariant
  std::string compare_gguf;      // folder of llama-bench CSV / JSON files (or GGUF files, with llama_bench); empty: none
  std::string llama_bench;       // llama-bench to run on compare_gguf's GGUF files between the recipes; empty: read files
};

/// Bytes of the host's last-level data cache as Linux's sysfs gives it: `dir` is a CPU's cache
/// folder (/sys/devices/system/cpu/cpu0/cache), each index* entry in it with the files level,
/// type ("Data", "Instruction", "Unified") and size ("32768K"; a K or M suffix, or none for
/// bytes); the size of the highest level among the data and unified caches. Entries that cannot
/// be read or parsed are skipped; 0 when none is left (no such folder, not Linux). glibc's
/// sysconf(_SC_LEVEL3_CACHE_SIZE) is not used: on a Zen 5 VM it gave 384 MiB, the socket's,
/// where sysfs gave the 32 MiB the vCPUs share.
std::size_t last_level_cache_bytes(const std::filesystem::path& dir);

/// `rlsim bench runtime`: the runtime's speed on synthetic weights (synthetic_weights(), seed 1)
/// at a model's shapes. Prints to `out` one line per figure:
///   bandwidth GBPS GB/s                 (read bandwidth of a 1 GiB buffer on `threads` threads)
///   decode PRECISION TOKS tok/s roofline FRACTION bytes_per_token B bandwidth BW
///       (TOKS: the best of `repeat` runs; B: weight bytes per token in their storage formats
///       plus the KV cache read at the mean position of the timed steps; BW: the mean of the
///       probe passes (ReadBandwidthProbe::best_of_streams) right before and right after that
///       run; FRACTION = TOKS B / BW)
///   decode-gemv PRECISION calls_per_token N gemv_ms_per_token T other_ms_per_token O
///               fixed_us_per_call C stream_gbps R handoff_ns H
///       (one more decode of decode_tokens tokens, untimed by TOKS, with models::gemv_record_start
///       on: gemv() calls a token, their ms a token and the rest of the token's, and the fit of
///       the calls' wall times to C us + bytes / (R GB/s), models::GemvCallStats::fit, "n/a"
///       without one; H: thread_handoff_ns right before, "n/a" on one thread)
///   decode-cache-resident PRECISION TOKS tok/s bytes_per_token B gbps G
///       (the compute side of the roofline: the same decode on the shapes cut to one layer and
///       vocab / layers, whose weights stay in the last-level cache; G = TOKS B. No line, a note
///       on `err`, where the cut model's weights take over 3/4 of the cache or its size is unknown)
///   prefill PRECISION TOKS tok/s        (an inference engine's prompt prefill of prefill_tokens:
///       Transformer::extend, the last position's logits, the work of llama-bench's pp test)
///   prefill-logits PRECISION TOKS tok/s (the trainer path: Transformer::prefill, every position's
///       logits)
///   weights PRECISION resident_bytes R packed_bytes P ratio R/P  (Transformer::weight_memory)
/// with batch_invariant, after each precision's lines, the same runs with batch-invariant kernels
/// and their ratio to the default kernels' tok/s:
///   batch-invariant decode PRECISION TOKS tok/s ratio R
///   batch-invariant prefill PRECISION TOKS tok/s ratio R
/// with llama_bench (LlamaBenchRunner on compare_gguf's GGUF files), after the lines of each
/// precision whose weight class has a file there, llama-bench's run on it (best repetitions):
///   llama-bench GGUF_TYPE prefill TOKS tok/s decode TOKS tok/s model_bytes B
/// and with compare_gguf, after all precisions, for each precision whose weight class (F32 for
/// fp32; BF16; 8-bit: Q8_0; 4-bit: Q4_0) has llama-bench results in the folder (with
/// llama_bench: the run right after the precision's):
///   compare PRECISION GGUF_TYPE prefill_ratio A decode_ratio B baseline STAT
///       (rlsim tok/s / llama.cpp tok/s; STAT "best" where llama.cpp's rates are its best
///       repetitions, like rlsim's, "mean" where they are its avg_ts: GgufSpeed)
/// then, for a shape with tied embeddings, for each GGUF type compared whose results give
/// model_size (with llama_bench: its last run), llama.cpp's own decode against the same
/// roofline (the bandwidth line's GBPS; a decode of a model with tied embeddings reads every
/// tensor of the file once, so model_size stands for its bytes per token, KV cache left out;
/// untied shapes get a note on `err` instead):
///   gguf GGUF_TYPE decode TOKS tok/s model_bytes B roofline FRACTION   (FRACTION = TOKS B / GBPS)
/// Progress (weight bytes per token, kernels) goes to `err`. Throws sim::ScenarioError (exit 2)
/// for an unknown precision, llama_bench without compare_gguf, or a comparison folder that
/// read_llama_bench() or LlamaBenchRunner refuses, before any timing (LlamaBenchRunner::run's
/// errors also later); models::ModelFileError for a bad config file.
int bench_runtime(const BenchRuntimeOptions& o, std::ostream& out, std::ostream& err);

/// Options of `rlsim bench reload`.
struct BenchReloadOptions {
  std::string model;                                 // llama2.c checkpoint, Hugging Face directory, or "synthetic-moe"
  std::string shape;                                 // instead of model: synthetic weights at a Hugging Face config.json's shapes
  std::vector<std::string> precisions{"fp8-block"};  // recipes (or fp32), each measured in turn
  int cycles = 100;
  int check_every = 0;         // also compare with a fresh engine every K cycles (0: after the last only)
  double perturbation = 1e-3;  // models::perturb_weights' relative step
  std::uint64_t seed = 1;
  int threads = 2;
  bool batch_invariant = false;  // engines with models::KernelMode::kBatchInvariant
};

/// `rlsim bench reload`: models::run_reload() per precision. Prints to `out`, per precision, a
/// header line, one line per cycle
///   cycle N restore_ms T load_ms T quantize_ms T transform_ms T total_ms T
///           restore_bytes B load_bytes B quantize_bytes B transform_bytes B
/// (one line; bytes read + written by each stage), then per stage
///   stage NAME ms_per_cycle T MB_per_cycle M GB/s G ns_per_byte N
/// (means over the cycles: the per-byte costs of a reload on this host), and after all precisions
/// the last two lines
///   max_abs_logit_diff VALUE     (largest over every check; 0: bit-identical to a fresh load)
///   addresses_stable yes|no      (every kernel buffer kept its address over every cycle)
/// Returns 0 when the difference is 0 and the addresses are stable, 1 otherwise. Throws
/// sim::ScenarioError (exit 2) for an unknown precision or bad counts, models::ModelFileError
/// for a bad model file.
int bench_reload(const BenchReloadOptions& o, std::ostream& out, std::ostream& err);

/// Freed buffers stay in the heap (glibc would unmap large ones and re-fault them on the next
/// allocation), as a long-lived worker's caching allocator keeps them: benchmarks and the training
/// loop then run on warm memory, not first-touch page faults.
void keep_freed_memory();

/// Forbids the prefill GEMM's AMX kernel (models::gemm_allow_amx) for the rest of the process.
/// `rlsim drift` and `rlsim train` call it, and `rlsim bench host`, which measures the rates of
/// train's loop. Their figures (README's drift table, docs/train-study) are compared across
/// machines, and the SIMD kernels give the same bits on every AVX-512 and AVX2 host, where AMX
/// tiles round their FP32 sums their own way (on an Intel Xeon with AMX, 2026-11-28, bf16:bf16
/// drift's mean |delta| came out 14-17 % lower with them).
void use_host_independent_kernels();

/// Most sequential streams per thread a ReadBandwidthProbe pass reads side by side.
inline constexpr int kMaxReadStreams = 4;

/// A buffer of `bytes` (first touched by the current OpenMP threads) whose read passes measure
/// the read bandwidth in GB/s (1e9 bytes per second) on those threads, vector loads the compiler
/// emits. Each thread reads its contiguous share as `streams` (1..kMaxReadStreams) equal parts
/// side by side, a few cache lines of each in turn, the parts 33 cache lines more than a part
/// apart (never a power of two bytes: such parts read slower); a share too short for that is
/// read as one stream. One stream is what a kernel reading its rows in order sees; the hardware
/// prefetchers of some hosts keep more lines in flight for two (kernels.cc, for_each_tile_pair),
/// and which reads fastest changes from host to host and run to run, so callers take the best
/// of several. The passes throw std::invalid_argument for another `streams`.
class ReadBandwidthProbe {
 public:
  explicit ReadBandwidthProbe(std::size_t bytes);
  /// GB/s of one timed pass.
  double pass(int streams) const;
  /// The best of `repeat` passes after one untimed warm-up pass.
  double best(int repeat, int streams) const;
  /// The best of one pass at each stream count 1, 2, .. kMaxReadStreams: the bandwidth of the
  /// moment, for a rate timed right after it (bench runtime's per-run roofline).
  double best_of_streams() const;

 private:
  std::size_t n_;  // floats
  std::unique_ptr<float[]> buf_;
};

/// ReadBandwidthProbe(bytes).best(repeat, streams).
double measure_read_bandwidth(std::size_t bytes, int repeat, int streams = 1);

/// The mean time in ns of one round trip of a cache line between OpenMP threads 0 and 1 (thread
/// 0 stores an odd value with release order, thread 1 spins with acquire loads until it sees it
/// and answers with the next even value), over `round_trips` trips. It tells where the two
/// threads' cores sit: on a 2-vCPU Zen 5 VM it was 65-160 ns while they shared an L3 (2-thread
/// reads at about 35 GB/s) and 455-490 ns in the windows where the hypervisor had placed them
/// apart (reads up to 67 GB/s, and a decode's GEMV calls cost 5.8-7.9 us each whatever their
/// size, against 0.5-2.6: README, runtime). 0 with fewer than 2 threads, no OpenMP, or
/// round_trips < 1.
double thread_handoff_ns(int round_trips);

}  // namespace rlsim::cli
