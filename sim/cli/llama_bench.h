// llama.cpp's llama-bench as `rlsim bench runtime`'s baseline: its result files (CSV, JSON) read
// from a folder, or the program run by rlsim itself between its own measurements, so that both
// are timed in the same moments of a host whose bandwidth changes from second to second.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rlsim::cli {

/// llama-bench's speed for one GGUF weight type, tok/s (0: no such test in the files).
struct GgufSpeed {
  double prefill = 0;            // prompt processing (pp: n_prompt > 0, n_gen 0)
  double decode = 0;             // generation (tg: n_prompt 0, n_gen > 0)
  std::int64_t model_bytes = 0;  // the decode row's model_size (bytes of the GGUF's tensors); 0: no such column
  // Whether prefill / decode is the best of llama-bench's repetitions (JSON samples_ts) rather
  // than their mean (avg_ts, all that CSV output gives). bench runtime reports its own best run.
  bool prefill_best = false, decode_best = false;
};

/// One test of llama-bench's output (a row of -o csv, an object of -o json / jsonl).
struct LlamaBenchTest {
  std::string where;  // "FILE:LINE" (CSV, JSONL) or "FILE: test N" (a JSON array), for messages
  std::string type;   // the weight type that ends model_type ("llama 256M Q8_0" -> "Q8_0")
  long n_prompt = 0, n_gen = 0, n_threads = 0;
  double avg_ts = 0;                       // mean tok/s of the repetitions
  std::optional<double> best_ts;           // the largest of samples_ts, where given (JSON)
  std::optional<std::int64_t> model_size;  // bytes, where given
};

/// The tests in llama-bench's JSON output `text` (-o json: an array of objects; -o jsonl: one
/// object per line), read from `source` (named in messages). Each object needs model_type
/// (a string), n_prompt and n_gen (integers >= 0), n_threads (>= 1) and avg_ts (finite, > 0);
/// samples_ts (finite numbers > 0) and model_size (an integer >= 1) are read where present.
/// Throws sim::ScenarioError (exit 2) naming the source and the test for text that is not JSON,
/// an object without those fields, or a field of the wrong type or range.
std::vector<LlamaBenchTest> parse_llama_bench_json(std::string_view text, const std::string& source);

/// The llama-bench results in the folder `dir` for `bench runtime --compare-gguf`: every *.csv
/// (llama-bench -o csv) and *.json / *.jsonl file (-o json, jsonl; parse_llama_bench_json), read
/// in name order, keyed by weight type; the last test of each kind wins, tests with both n_prompt
/// and n_gen above 0 (llama-bench's pg test) are skipped. A CSV gives the mean of the repetitions
/// (avg_ts), a JSON file their best (samples_ts; avg_ts without it). Notes a test run on other
/// than `threads` threads on `err`. Throws sim::ScenarioError (exit 2) naming the file and line
/// for a missing folder, a CSV without the columns model_type, n_threads, n_prompt, n_gen and
/// avg_ts, a row of another field count, or a field that is not wholly a number (avg_ts finite and
/// positive, n_prompt and n_gen integers >= 0, n_threads >= 1, model_size where the column is
/// present an integer >= 1), and as parse_llama_bench_json for a JSON file.
std::map<std::string, GgufSpeed> read_llama_bench(const std::string& dir, int threads, std::ostream& err);

/// llama-bench (the program `binary`) run by bench runtime on the *.gguf files of a folder, one
/// weight type at a time, right after rlsim's own runs of the recipes of that class (interleaved:
/// a VM's bandwidth changes within seconds, README "runtime", so results taken a minute apart
/// compare two moments as much as two programs). Every run is `binary -m FILE -t THREADS -r
/// REPEAT -o json` and reports the best repetition, as bench runtime reports its best run.
class LlamaBenchRunner {
 public:
  /// Finds the *.gguf files in `dir` and learns each one's weight type from a one-token decode
  /// (-p 0 -n 1 -r 1). Throws sim::ScenarioError (exit 2) when `dir` is not a folder, holds no
  /// *.gguf file or two of the same type, or when `binary` cannot be started, exits with a
  /// failure (its last stderr line named) or prints what parse_llama_bench_json refuses;
  /// analysis::OutputError (exit 4) when the temporary files for its output cannot be made.
  LlamaBenchRunner(std::string binary, const std::string& dir, int threads, std::ostream& err);

  /// Whether a file of weight type `type` (BF16, Q8_0, Q4_0, F32, ...) is in the folder.
  bool has(const std::string& type) const { return files_.count(type) > 0; }

  /// llama-bench on the file of `type` (has(type) must hold, else std::invalid_argument): a
  /// prefill of `prefill_tokens` (-p) and a decode of `decode_tokens` (-n), best of `repeat`
  /// (-r) each after llama-bench's warm-up run. Errors as the constructor's, and
  /// sim::ScenarioError when the output lacks either test of `type` (the file was replaced).
  GgufSpeed run(const std::string& type, int prefill_tokens, int decode_tokens, int repeat) const;

 private:
  std::vector<LlamaBenchTest> bench(const std::filesystem::path& gguf, const std::vector<std::string>& args) const;

  std::string binary_;
  int threads_;
  std::map<std::string, std::filesystem::path> files_;  // weight type -> GGUF file
};

}  // namespace rlsim::cli
