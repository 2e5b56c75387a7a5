#include "sim/cli/sim_bench.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "analysis/output_dir.h"
#include "analysis/report.h"
#include "analysis/validation.h"
#include "sim/pipeline/pipeline.h"
#include "sim/scenario/scenario.h"

namespace rlsim::cli {
namespace {

namespace fs = std::filesystem;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void bench_engine(int repeat, std::ostream& out) {
  const sim::Scenario s = sim::load_scenario((analysis::default_scenarios_dir() / "bench-sim.yaml").string());
  out << fmt::format("rlsim bench sim: {}\n", s.name);
  out << fmt::format("  {} devices ({} rollout engines, {} training), {} steps of {} x {} sequences, max response {}\n",
                     s.cluster.devices(), s.placement.rollout_devices / s.rollout.engine_devices(), s.placement.train_devices,
                     s.steps, s.workload.prompts_per_step, s.workload.samples_per_prompt,
                     s.workload.response_tokens.upper_bound());
  double best = 1e300;
  for (int i = 0; i < repeat; ++i) {
    sim::NullSink sink;
    const auto t0 = std::chrono::steady_clock::now();
    const sim::SimResult r = sim::simulate(s, sink);
    const double wall = seconds_since(t0);
    best = std::min(best, wall);
    double step = 0;
    for (const auto& st : r.steps) step += st.step_s();
    out << fmt::format(
        "  run {}: wall {:.3f} s, {} events, {:.0f} events/s; simulated {:.1f} s ({:.1f} s per step), "
        "{} tokens generated\n",
        i + 1, wall, r.events, static_cast<double>(r.events) / wall, r.wall_s, step / static_cast<double>(r.steps.size()),
        r.tokens_generated);
  }
  out << fmt::format("  best wall {:.3f} s (target: under 2 s on one core)\n", best);
}

struct ScalingPoint {
  std::int64_t requests = 0;
  double wall_s = 0;
  double peak_rss_bytes = 0;
};

// `rlsim run` of `s` into `dir` in a child process: its wall time and peak RSS. Throws
// std::runtime_error when the child fails.
ScalingPoint run_in_child(const sim::Scenario& s, std::int64_t requests, const fs::path& dir) {
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(fmt::format("rlsim bench sim: fork failed: {}", std::strerror(errno)));
  if (pid == 0) {
    int rc = 0;
    try {
      analysis::run_to_directory(dir.string(), s, analysis::PrecisionFlowVerdict{});
    } catch (...) {
      rc = 1;
    }
    ::_exit(rc);
  }
  int status = 0;
  rusage usage{};
  if (::wait4(pid, &status, 0, &usage) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error(fmt::format("rlsim bench sim: the run of {} requests failed", requests));
  }
  ScalingPoint p;
  p.wall_s = seconds_since(t0);
  p.peak_rss_bytes = static_cast<double>(usage.ru_maxrss) * 1024.0;  // Linux reports kilobytes
  return p;
}

void bench_scaling(std::int64_t max_requests, std::ostream& out) {
  constexpr int kPrompts = 1250, kSamples = 8;
  constexpr std::int64_t kPerStep = std::int64_t{kPrompts} * kSamples;
  const fs::path base = analysis::default_scenarios_dir() / "default.yaml";
  char tmpl[] = "/tmp/rlsim-bench-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) analysis::output_failed(tmpl, std::strerror(errno));
  const fs::path dir = fs::path(tmpl) / "out";
  out << fmt::format("rlsim run at scale: {}, {} prompts x {} samples per step, trace.json and requests.csv streamed\n",
                     base.filename().string(), kPrompts, kSamples);
  out << fmt::format("  {:>10} {:>6} {:>9} {:>12} {:>10} {:>14}\n", "requests", "steps", "wall s", "requests/s", "peak RSS",
                     "RSS / request");
  std::vector<ScalingPoint> points;
  try {
    for (std::int64_t n = 10'000; n <= max_requests; n *= 10) {
      const int steps = static_cast<int>(n / kPerStep);
      sim::Scenario s = sim::load_scenario(base.string(),
                                           {fmt::format("steps={}", steps), fmt::format("workload.prompts_per_step={}", kPrompts),
                                            fmt::format("workload.samples_per_prompt={}", kSamples)});
      s.output.plots = false;
      out.flush();
      ScalingPoint p = run_in_child(s, n, dir);
      p.requests = n;
      points.push_back(p);
      out << fmt::format("  {:>10} {:>6} {:>9.2f} {:>12.0f} {:>8.0f} MB {:>12.0f} B\n", n, steps, p.wall_s,
                         static_cast<double>(n) / p.wall_s, p.peak_rss_bytes / 1e6, p.peak_rss_bytes / static_cast<double>(n));
      out.flush();
    }
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmpl, ec);
    throw;
  }
  std::error_code ec;
  fs::remove_all(tmpl, ec);
  if (points.size() < 3) return;
  const double c5 = points[1].wall_s / static_cast<double>(points[1].requests);
  const double c6 = points[2].wall_s / static_cast<double>(points[2].requests);
  out << fmt::format("  cost per request 10^5 -> 10^6: {:.2f} -> {:.2f} us ({:+.1f} %; bound +20 %)\n", 1e6 * c5, 1e6 * c6,
                     100.0 * (c6 / c5 - 1.0));
}

}  // namespace

int bench_sim(int repeat, std::int64_t max_requests, std::ostream& out) {
  bench_engine(repeat, out);
  if (max_requests >= 10'000) bench_scaling(max_requests, out);
  return 0;
}

}  // namespace rlsim::cli
