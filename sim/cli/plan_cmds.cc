#include "sim/cli/plan_cmds.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <ostream>
#include <thread>

#ifdef RLSIM_HAVE_MPI
#include <mpi.h>
#endif

#include "analysis/plan.h"
#include "analysis/validation.h"
#include "sim/cli/messages.h"
#include "sim/scenario/scenario.h"

namespace rlsim::cli {
namespace {

namespace fs = std::filesystem;
using analysis::PointResult;
using analysis::Study;

// The MPI world of this process: one rank of one when not launched by mpirun.
class MpiWorld {
 public:
  MpiWorld() {
    // OpenMPI's mpirun sets OMPI_COMM_WORLD_SIZE; PMI and PMIx launchers set PMI_SIZE / PMIX_RANK.
    const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
    if (!size) size = std::getenv("PMI_SIZE");
    const bool launched = size != nullptr || std::getenv("PMIX_RANK") != nullptr;
#ifdef RLSIM_HAVE_MPI
    if (launched) {
      MPI_Init(nullptr, nullptr);
      MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
      MPI_Comm_size(MPI_COMM_WORLD, &size_);
      active_ = true;
    }
#else
    if (launched && size && std::atoi(size) > 1) {
      throw sim::ScenarioError(
          fmt::format("rlsim plan: launched as one of {} MPI ranks, but this rlsim was built without MPI "
                      "(install libopenmpi-dev and rebuild); every rank would run the whole study",
                      size));
    }
#endif
  }
  ~MpiWorld() {
#ifdef RLSIM_HAVE_MPI
    if (active_) MPI_Finalize();
#endif
  }
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  /// Rank 0 receives every rank's `payload`, in rank order; other ranks get an empty list.
  std::vector<std::string> gather(const std::string& payload) const {
    if (size_ == 1) return {payload};
#ifdef RLSIM_HAVE_MPI
    const int len = static_cast<int>(payload.size());
    std::vector<int> lens(static_cast<std::size_t>(size_));
    MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::vector<int> displs(static_cast<std::size_t>(size_), 0);
    for (std::size_t r = 1; r < displs.size(); ++r) displs[r] = displs[r - 1] + lens[r - 1];
    std::string all(rank_ == 0 ? static_cast<std::size_t>(displs.back() + lens.back()) : 0, '\0');
    MPI_Gatherv(payload.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank_ != 0) return {};
    std::vector<std::string> out;
    for (std::size_t r = 0; r < lens.size(); ++r)
      out.push_back(all.substr(static_cast<std::size_t>(displs[r]), static_cast<std::size_t>(lens[r])));
    return out;
#else
    return {payload};
#endif
  }

  /// Every rank returns rank 0's `value`.
  int broadcast(int value) const {
#ifdef RLSIM_HAVE_MPI
    if (size_ > 1) MPI_Bcast(&value, 1, MPI_INT, 0, MPI_COMM_WORLD);
#endif
    return value;
  }

 private:
  int rank_ = 0;
  int size_ = 1;
#ifdef RLSIM_HAVE_MPI
  bool active_ = false;  // MPI_Init was called: finalize at exit
#endif
};

int default_jobs(int ranks) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Ranks sharing a node share its cores (OpenMPI names the ranks per node).
  int local = 1;
  if (const char* l = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) local = std::max(1, std::atoi(l));
  return ranks > 1 ? std::max(1, cores / local) : cores;
}

std::string axes_line(const Study& st) {
  std::string line;
  for (const auto& a : st.sweep) line += fmt::format("{}{} ({})", line.empty() ? "" : " x ", a.name, a.size());
  return fmt::format("{} = {} points", line, st.points());
}

// The study of `o.study` with the command line's settings over it (--set, --calibration, --out,
// --no-plots, --heatmap), its keys checked so that a typo shows before any simulation.
Study load_plan_study(const PlanOptions& o) {
  Study st = analysis::load_study(o.study);
  st.sets = o.set;
  if (!o.calibration.empty()) st.calibration = std::make_shared<const sim::Calibration>(sim::load_calibration(o.calibration));
  if (!o.out.empty()) st.out_dir = o.out;
  if (o.no_plots) st.plots = false;
  if (!o.heatmap.empty()) {
    if (o.heatmap.size() > 2)
      throw sim::ScenarioError("--heatmap: give one or two sweep keys, e.g. --heatmap cluster.nodes,rollout.precision");
    for (const auto& h : o.heatmap) {
      if (st.axis_index(h) < 0)
        throw sim::ScenarioError(fmt::format("--heatmap: '{}' is not a sweep key or group of {}", h, o.study));
    }
    st.heatmap = {o.heatmap.front(), o.heatmap.back()};
  }
  analysis::check_study_keys(st);
  return st;
}

// Every rank's results (JSON payloads of `{error, points}`) in point order, on rank 0; `failure`
// takes the first error any rank met. Throws std::logic_error when a point is missing without one.
std::vector<PointResult> collect_points(const std::vector<std::string>& parts, std::size_t points, std::string& failure) {
  std::vector<PointResult> results(points);
  std::vector<bool> seen(points, false);
  for (const auto& text : parts) {
    const auto j = nlohmann::json::parse(text);
    if (failure.empty() && !j["error"].get<std::string>().empty()) failure = j["error"].get<std::string>();
    for (const auto& pj : j["points"]) {
      PointResult p = analysis::point_from_json(pj);
      seen.at(p.index) = true;
      results[p.index] = std::move(p);
    }
  }
  if (failure.empty() && std::count(seen.begin(), seen.end(), false) > 0)
    throw std::logic_error("rlsim plan: a point was not gathered");
  return results;
}

// Rank 0's closing lines: the ranking, warnings, the files written and the rate.
void print_plan_summary(std::ostream& out, const Study& st, const std::vector<PointResult>& results,
                        const std::vector<std::string>& warnings, int top, double seconds, int jobs, int ranks) {
  analysis::print_ranking(out, st, results, top);
  for (const auto& w : warnings) out << "  warning: " << w << "\n";
  std::string files;
  for (const char* f : {"results.csv", "plan.json", "step_time_heatmap.png", "fit_map.png", "pareto.png"}) {
    if (fs::exists(fs::path(st.out_dir) / f)) files += (files.empty() ? "" : ", ") + std::string(f);
  }
  out << fmt::format("  outputs: {}/ ({})\n", st.out_dir, files);
  out << fmt::format("  {} points in {:.2f} s ({:.1f} points/s, {} job{}{})\n", st.points(), seconds,
                     static_cast<double>(st.points()) / std::max(seconds, 1e-9), jobs, jobs == 1 ? "" : "s",
                     ranks > 1 ? fmt::format(" x {} ranks", ranks) : "");
}

}  // namespace

int cmd_plan(const PlanOptions& o, std::ostream& out, std::ostream& err) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(clock::now() - t0).count(); };
  MpiWorld world;
  const bool root = world.rank() == 0;
  try {
    Study st = load_plan_study(o);
    const int jobs = o.jobs > 0 ? o.jobs : default_jobs(world.size());
    if (root && !o.quiet) {
      out << fmt::format("rlsim plan: {}\n", st.name);
      out << fmt::format("  base {}; sweep {}; {} job{}{}\n", st.base, axes_line(st), jobs, jobs == 1 ? "" : "s",
                         world.size() > 1 ? fmt::format(" on each of {} MPI ranks", world.size()) : "");
    }
    // This rank's points: every size-th, so neighbouring (similar-cost) points spread over ranks.
    std::vector<std::size_t> mine;
    for (std::size_t i = static_cast<std::size_t>(world.rank()); i < st.points(); i += static_cast<std::size_t>(world.size()))
      mine.push_back(i);
    std::string failure;
    std::vector<PointResult> part;
    try {
      part = analysis::evaluate_points(st, mine, jobs, [&](std::size_t done) {
        if (!root || o.quiet) return;
        err << fmt::format("rlsim plan: {}/{} points{} ({:.1f} s, {:.1f} points/s)\n", done, mine.size(),
                           world.size() > 1 ? " of rank 0" : "", elapsed(), static_cast<double>(done) / elapsed());
      });
    } catch (const sim::ScenarioError& e) {
      failure = e.what();  // reported by rank 0 after the gather, so no rank waits for a lost one
    }
    nlohmann::json payload = {{"error", failure}, {"points", nlohmann::json::array()}};
    for (const auto& p : part) payload["points"].push_back(analysis::point_to_json(p));
    const auto parts = world.gather(payload.dump());
    std::vector<PointResult> results;
    if (root) results = collect_points(parts, st.points(), failure);
    const int status = world.broadcast(root && !failure.empty() ? 2 : 0);
    if (status != 0) {
      if (!root) return status;
      throw sim::ScenarioError(failure);
    }
    if (!root) return 0;
    analysis::rank_points(st, results);
    std::vector<std::string> warnings;
    analysis::write_plan_outputs(st.out_dir, st, results, &warnings);
    if (o.quiet) {
      const PointResult* r = analysis::recommended(results);
      out << "recommended: " << (r ? analysis::point_settings(st, r->index) : "none (no point meets the constraints)") << "\n";
      return 0;
    }
    print_plan_summary(out, st, results, warnings, o.top, elapsed(), jobs, world.size());
    return 0;
  } catch (const sim::ScenarioError& e) {
    if (world.size() == 1) throw;  // main reports it
    // Every rank meets the same bad input and rank 0 alone reports it, before any rank exits:
    // mpirun ends the job as soon as one rank exits non-zero, which could cut rank 0 off before it
    // has written the message. The broadcast holds the other ranks until rank 0 has.
    if (root) err << input_error_line(e) << std::flush;
    return world.broadcast(2);
  }
}

int bench_plan(int jobs, int repeat, std::ostream& out) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("rlsim_bench_plan_{}", ::getpid());
  fs::create_directories(dir);
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } cleanup{dir};
  // The study is scenarios/bench-plan.yaml (the repository's, or ./scenarios); outputs go to a
  // temporary folder.
  Study st = analysis::load_study((analysis::default_scenarios_dir() / "bench-plan.yaml").string());
  st.out_dir = (dir / "out").string();
  const int j = jobs > 0 ? jobs : default_jobs(1);
  out << fmt::format("rlsim bench plan: {}\n  sweep {}; {} job{} ({} cores)\n", st.name, axes_line(st), j, j == 1 ? "" : "s",
                     std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::size_t> all(st.points());
  std::iota(all.begin(), all.end(), std::size_t{0});
  double best = 1e300;
  for (int i = 0; i < repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto results = analysis::evaluate_points(st, all, j);
    analysis::rank_points(st, results);
    analysis::write_plan_outputs(st.out_dir, st, results, nullptr);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, wall);
    std::size_t valid = 0, fit = 0, meet = 0;
    for (const auto& p : results) {
      valid += p.valid;
      fit += p.valid && p.fits;
      meet += p.meets;
    }
    const PointResult* r = analysis::recommended(results);
    out << fmt::format(
        "  run {}: wall {:.2f} s, {:.1f} points/s ({} simulated, {} invalid skipped, {} fit, {} meet the constraints); "
        "recommended {}\n",
        i + 1, wall, static_cast<double>(results.size()) / wall, valid, results.size() - valid, fit, meet,
        r ? analysis::point_settings(st, r->index) : "none");
  }
  out << fmt::format("  best wall {:.2f} s, {:.1f} points/s (target: 1,000 points in under 60 s on 2 cores)\n", best,
                     static_cast<double>(st.points()) / best);
  return 0;
}

}  // namespace rlsim::cli
