#include "sim/cli/llama_bench.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "analysis/output_dir.h"
#include "sim/scenario/csv_table.h"
#include "sim/scenario/scenario.h"
#include "sim/scenario/yaml_file.h"

extern char** environ;

namespace rlsim::cli {
namespace fs = std::filesystem;

namespace {

// The weight type that ends llama-bench's model_type ("llama 256M Q8_0" -> "Q8_0").
std::string weight_type(const std::string& model_type) {
  return model_type.substr(model_type.find_last_of(' ') + 1);  // npos + 1 == 0: the whole name
}

// Enters test `t` into `out` (read_llama_bench's rules: pp and tg tests only, the last wins).
void add_test(std::map<std::string, GgufSpeed>& out, const LlamaBenchTest& t, int threads, std::ostream& err) {
  if (t.n_threads != threads) err << fmt::format("  note: {} ran on {} threads, rlsim on {}\n", t.where, t.n_threads, threads);
  const double rate = t.best_ts.value_or(t.avg_ts);
  if (t.n_prompt > 0 && t.n_gen == 0) {
    out[t.type].prefill = rate;
    out[t.type].prefill_best = t.best_ts.has_value();
  }
  if (t.n_prompt == 0 && t.n_gen > 0) {
    GgufSpeed& s = out[t.type];
    s.decode = rate;
    s.decode_best = t.best_ts.has_value();
    s.model_bytes = t.model_size.value_or(0);
  }
}

// The tests of one llama-bench CSV file (read_llama_bench's checks).
std::vector<LlamaBenchTest> read_csv_tests(const fs::path& f) {
  const auto rows = sim::read_csv_table(f.string(), "llama-bench CSV");
  const auto& h = rows.front();
  auto column = [&](const char* name) {
    const auto it = std::find(h.begin(), h.end(), name);
    if (it == h.end())
      throw sim::ScenarioError(fmt::format("{}:1: no column '{}' (expected llama-bench -o csv output)", f.string(), name));
    return static_cast<std::size_t>(it - h.begin());
  };
  const std::size_t type = column("model_type"), np = column("n_prompt"), ng = column("n_gen"), ts = column("avg_ts"),
                    nt = column("n_threads");
  const auto size_it = std::find(h.begin(), h.end(), "model_size");  // optional: the roofline line needs it
  const bool has_size = size_it != h.end();
  const auto size_col = static_cast<std::size_t>(size_it - h.begin());
  std::vector<LlamaBenchTest> tests;
  for (std::size_t r = 1; r < rows.size(); ++r) {
    const auto& row = rows[r];
    if (row.size() == 1 && row[0].empty()) continue;  // blank line
    if (row.size() != h.size()) {
      throw sim::ScenarioError(fmt::format("{}:{}: {} fields, the header has {}", f.string(), r + 1, row.size(), h.size()));
    }
    const auto v = sim::csv_number<double>(row[ts]);
    const auto prompt = sim::csv_number<long>(row[np]), gen = sim::csv_number<long>(row[ng]),
               thr = sim::csv_number<long>(row[nt]);
    if (!v || !std::isfinite(*v) || *v <= 0 || !prompt || *prompt < 0 || !gen || *gen < 0 || !thr || *thr < 1) {
      throw sim::ScenarioError(
          fmt::format("{}:{}: expected avg_ts a positive number of tok/s, n_prompt and n_gen counts >= 0 and n_threads >= 1, got "
                      "'{}', '{}', '{}', '{}'",
                      f.string(), r + 1, row[ts], row[np], row[ng], row[nt]));
    }
    LlamaBenchTest t;
    if (has_size) {
      t.model_size = sim::csv_number<std::int64_t>(row[size_col]);
      if (!t.model_size || *t.model_size < 1) {
        throw sim::ScenarioError(
            fmt::format("{}:{}: expected model_size a byte count >= 1, got '{}'", f.string(), r + 1, row[size_col]));
      }
    }
    t.where = fmt::format("{}:{}", f.string(), r + 1);
    t.type = weight_type(row[type]);
    t.n_prompt = *prompt, t.n_gen = *gen, t.n_threads = *thr, t.avg_ts = *v;
    tests.push_back(std::move(t));
  }
  return tests;
}

// One JSON test object of llama-bench (parse_llama_bench_json's checks); `where` names it.
LlamaBenchTest json_test(const nlohmann::json& j, std::string where) {
  auto bad = [&](const std::string& what) { return sim::ScenarioError(fmt::format("{}: expected {}", where, what)); };
  if (!j.is_object()) throw bad("an object (a llama-bench -o json test)");
  auto field = [&](const char* name) -> const nlohmann::json& {
    const auto it = j.find(name);
    if (it == j.end()) throw bad(fmt::format("the field '{}' (llama-bench -o json output)", name));
    return *it;
  };
  auto count = [&](const char* name, long least) {
    const nlohmann::json& v = field(name);
    if (!v.is_number_integer() || v.get<std::int64_t>() < least || v.get<std::int64_t>() > std::numeric_limits<long>::max() / 2) {
      throw bad(fmt::format("{} an integer >= {}, got {}", name, least, v.dump()));
    }
    return static_cast<long>(v.get<std::int64_t>());
  };
  auto rate = [&](const nlohmann::json& v, const char* name) {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || !(v.get<double>() > 0)) {
      throw bad(fmt::format("{} a positive number of tok/s, got {}", name, v.dump()));
    }
    return v.get<double>();
  };
  const nlohmann::json& mt = field("model_type");
  if (!mt.is_string()) throw bad(fmt::format("model_type a string, got {}", mt.dump()));
  LlamaBenchTest t;
  t.type = weight_type(mt.get<std::string>());
  t.n_prompt = count("n_prompt", 0), t.n_gen = count("n_gen", 0), t.n_threads = count("n_threads", 1);
  t.avg_ts = rate(field("avg_ts"), "avg_ts");
  if (const auto s = j.find("samples_ts"); s != j.end()) {
    if (!s->is_array() || s->empty()) throw bad(fmt::format("samples_ts a non-empty array of tok/s, got {}", s->dump()));
    double best = 0;
    for (const nlohmann::json& v : *s) best = std::max(best, rate(v, "samples_ts"));
    t.best_ts = best;
  }
  if (const auto s = j.find("model_size"); s != j.end()) {
    if (!s->is_number_integer() || s->get<std::int64_t>() < 1)
      throw bad(fmt::format("model_size a byte count >= 1, got {}", s->dump()));
    t.model_size = s->get<std::int64_t>();
  }
  t.where = std::move(where);
  return t;
}

}  // namespace

std::vector<LlamaBenchTest> parse_llama_bench_json(std::string_view text, const std::string& source) {
  const std::size_t first = text.find_first_not_of(" \t\r\n");
  std::vector<LlamaBenchTest> tests;
  if (first != std::string_view::npos && text[first] == '[') {  // -o json
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_array()) {
      throw sim::ScenarioError(fmt::format("{}: not a JSON array of llama-bench tests (llama-bench -o json)", source));
    }
    for (std::size_t i = 0; i < j.size(); ++i) tests.push_back(json_test(j[i], fmt::format("{}: test {}", source, i + 1)));
    return tests;
  }
  std::size_t line = 0, begin = 0;  // -o jsonl
  while (begin < text.size()) {
    const std::size_t end = std::min(text.find('\n', begin), text.size());
    const std::string_view l = text.substr(begin, end - begin);
    ++line;
    begin = end + 1;
    if (l.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const auto j = nlohmann::json::parse(l, nullptr, false);
    if (j.is_discarded()) throw sim::ScenarioError(fmt::format("{}:{}: not a JSON object (llama-bench -o jsonl)", source, line));
    tests.push_back(json_test(j, fmt::format("{}:{}", source, line)));
  }
  return tests;
}

std::map<std::string, GgufSpeed> read_llama_bench(const std::string& dir, int threads, std::ostream& err) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw sim::ScenarioError(fmt::format("{}: --compare-gguf expects a folder of llama-bench CSV or JSON files", dir));
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string ext = e.path().extension().string();
    if (ext == ".csv" || ext == ".json" || ext == ".jsonl") files.push_back(e.path());
  }
  if (ec) throw sim::ScenarioError(fmt::format("{}: cannot list the folder ({})", dir, ec.message()));
  std::sort(files.begin(), files.end());
  std::map<std::string, GgufSpeed> out;
  for (const auto& f : files) {
    const std::vector<LlamaBenchTest> tests =
        f.extension() == ".csv" ? read_csv_tests(f)
                                : parse_llama_bench_json(sim::read_input_file(f.string(), "llama-bench JSON"), f.string());
    for (const LlamaBenchTest& t : tests) add_test(out, t, threads, err);
  }
  return out;
}

namespace {

// What a child process left: its exit status (waitpid's) and what it wrote to stdout and stderr.
struct ChildOutput {
  int status = 0;
  std::string out, err;
};

// An unlinked temporary file open for reading and writing (the child's stdout or stderr).
class TempFile {
 public:
  TempFile() {
    std::string name = (fs::temp_directory_path() / "rlsim-llama-bench-XXXXXX").string();
    fd_ = ::mkstemp(name.data());
    if (fd_ < 0) analysis::output_failed(name, std::strerror(errno));
    ::unlink(name.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() { ::close(fd_); }
  int fd() const { return fd_; }
  std::string contents() const {
    std::string s;
    char buf[1 << 16];
    for (off_t at = 0;;) {
      const ssize_t n = ::pread(fd_, buf, sizeof buf, at);
      if (n <= 0) break;
      s.append(buf, static_cast<std::size_t>(n));
      at += n;
    }
    return s;
  }

 private:
  int fd_ = -1;
};

// Runs argv[0] (looked up in PATH when it has no '/') with `argv` and waits for it. Throws
// sim::ScenarioError when it cannot be started.
ChildOutput run_child(const std::vector<std::string>& argv) {
  TempFile out, err;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out.fd(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err.fd(), STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw sim::ScenarioError(fmt::format("{}: cannot run it ({})", argv[0], std::strerror(rc)));
  ChildOutput c;
  while (::waitpid(pid, &c.status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error(fmt::format("waitpid: {}", std::strerror(errno)));
  }
  c.out = out.contents(), c.err = err.contents();
  return c;
}

// The last non-empty line of `text`, or "" (the reason a failed llama-bench gives).
std::string last_line(const std::string& text) {
  std::istringstream in(text);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  return last;
}

}  // namespace

LlamaBenchRunner::LlamaBenchRunner(std::string binary, const std::string& dir, int threads, std::ostream& err)
    : binary_(std::move(binary)), threads_(threads) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw sim::ScenarioError(fmt::format("{}: --llama-bench expects --compare-gguf to name a folder of GGUF files", dir));
  }
  std::vector<fs::path> ggufs;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".gguf") ggufs.push_back(e.path());
  }
  if (ec) throw sim::ScenarioError(fmt::format("{}: cannot list the folder ({})", dir, ec.message()));
  if (ggufs.empty()) throw sim::ScenarioError(fmt::format("{}: no *.gguf file to run {} on", dir, binary_));
  std::sort(ggufs.begin(), ggufs.end());
  for (const fs::path& g : ggufs) {
    const std::vector<LlamaBenchTest> tests = bench(g, {"-p", "0", "-n", "1", "-r", "1"});
    const std::string& type = tests.front().type;
    if (const auto it = files_.find(type); it != files_.end()) {
      throw sim::ScenarioError(
          fmt::format("{}: a second {} file beside {}; keep one GGUF per weight type", g.string(), type, it->second.string()));
    }
    files_.emplace(type, g);
    err << fmt::format("  llama-bench: {} is {}\n", g.string(), type);
  }
}

std::vector<LlamaBenchTest> LlamaBenchRunner::bench(const fs::path& gguf, const std::vector<std::string>& args) const {
  std::vector<std::string> argv{binary_, "-m", gguf.string(), "-t", std::to_string(threads_), "-o", "json"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string command;
  for (const std::string& a : argv) command += (command.empty() ? "" : " ") + a;
  const ChildOutput c = run_child(argv);
  if (!WIFEXITED(c.status) || WEXITSTATUS(c.status) != 0) {
    const std::string why = last_line(c.err);
    throw sim::ScenarioError(fmt::format("{}: {}{}", command,
                                         WIFEXITED(c.status) ? fmt::format("exit status {}", WEXITSTATUS(c.status))
                                                             : fmt::format("ended by signal {}", WTERMSIG(c.status)),
                                         why.empty() ? "" : " (" + why + ")"));
  }
  std::vector<LlamaBenchTest> tests = parse_llama_bench_json(c.out, command);
  if (tests.empty()) throw sim::ScenarioError(fmt::format("{}: printed no test", command));
  return tests;
}

GgufSpeed LlamaBenchRunner::run(const std::string& type, int prefill_tokens, int decode_tokens, int repeat) const {
  const auto it = files_.find(type);
  if (it == files_.end()) throw std::invalid_argument("LlamaBenchRunner::run: no file of type " + type);
  std::map<std::string, GgufSpeed> speeds;
  std::ostringstream notes;  // the thread count is ours: never another
  for (const LlamaBenchTest& t : bench(it->second, {"-p", std::to_string(prefill_tokens), "-n", std::to_string(decode_tokens),
                                                    "-r", std::to_string(repeat)})) {
    add_test(speeds, t, threads_, notes);
  }
  const GgufSpeed& s = speeds[type];
  if (s.prefill <= 0 || s.decode <= 0) {
    throw sim::ScenarioError(fmt::format("{}: llama-bench printed no {} {} test (was the file replaced?)", it->second.string(),
                                         type, s.prefill <= 0 ? "prefill" : "decode"));
  }
  return s;
}

}  // namespace rlsim::cli
