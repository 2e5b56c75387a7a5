#include "analysis/calibrate.h"

#include <fmt/format.h>

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <unsupported/Eigen/NonLinearOptimization>
#include <unsupported/Eigen/NumericalDiff>

namespace rlsim::analysis {

namespace {

constexpr double kFigureSigma = 0.15;    // log error of one figure counted as one standard deviation
constexpr double kPriorSigma = 0.7;      // a parameter's prior: a factor of 2 is one standard deviation
constexpr double kUnfitLogError = -7.0;  // a record that stops fitting memory: predicted ~1e-3 x published
// Forward-difference step of the numerical Jacobian: sqrt(1e-3) ~ 3 % of each free variable.
// Smaller steps see the discrete events of a simulation (a sequence finishing one iteration
// earlier) as noise; larger ones blur the curvature.
constexpr double kDiffEpsilon = 1e-3;

double logistic(double x) { return 1.0 / (1.0 + std::exp(-x)); }

double to_value(const CalibrationParameter& p, double x) { return p.lower + (p.upper - p.lower) * logistic(x); }

double to_free(const CalibrationParameter& p, double v) {
  const double t = std::min(std::max((v - p.lower) / (p.upper - p.lower), 1e-6), 1.0 - 1e-6);
  return std::log(t / (1.0 - t));
}

sim::Calibration with_values(const sim::Calibration& base, const std::vector<CalibrationParameter>& params,
                             const Eigen::VectorXd& x) {
  sim::Calibration c = base;
  for (std::size_t i = 0; i < params.size(); ++i) params[i].ref(c) = to_value(params[i], x[static_cast<Eigen::Index>(i)]);
  return c;
}

std::vector<std::map<std::string, double>> simulate_all(const std::vector<ValidationRecord>& records,
                                                        const std::vector<bool>& use, const sim::Calibration& c, int jobs,
                                                        RecordCache* cache) {
  return simulate_records(records, &c, jobs, use, cache);
}

// One fitted figure: which record, which figure, and the ratio's other record (or npos).
struct TimeFigure {
  std::size_t record = 0, other = std::string::npos;
  std::string figure;
  double published = 0;
};

std::vector<TimeFigure> time_figures(const std::vector<ValidationRecord>& records) {
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < records.size(); ++i) index[records[i].name] = i;
  std::vector<TimeFigure> out;
  for (std::size_t i = 0; i < records.size(); ++i) {
    for (const auto& f : records[i].figures) {
      if (!f.is_time()) continue;
      TimeFigure t{i, std::string::npos, f.figure, f.published};
      if (!f.ratio_to.empty()) {
        const auto it = index.find(f.ratio_to);
        if (it == index.end()) continue;  // compare() reports it
        t.other = it->second;
      }
      out.push_back(t);
    }
  }
  return out;
}

// ln(predicted / published) of a figure; kUnfitLogError when a record did not fit memory.
double log_error(const TimeFigure& f, const std::vector<std::map<std::string, double>>& sims) {
  auto value = [&](std::size_t r) {
    const auto it = sims[r].find(f.figure);
    return it == sims[r].end() ? 0.0 : it->second;
  };
  double pred = value(f.record);
  if (f.other != std::string::npos) {
    const double o = value(f.other);
    pred = o > 0 ? pred / o : 0.0;
  }
  return pred > 0 ? std::log(pred / f.published) : kUnfitLogError;
}

// The least-squares problem over every time figure of the records.
struct Problem {
  const std::vector<ValidationRecord>& records;
  const std::vector<CalibrationParameter>& params;
  const sim::Calibration& base;
  std::vector<TimeFigure> figures;  // only those usable
  int jobs = 1;
  RecordCache* cache = nullptr;                                 // shared by every fit of one calibrate() call
  std::shared_ptr<int> evaluations = std::make_shared<int>(0);  // shared by the copies Eigen makes

  // Eigen functor interface (NumericalDiff / LevenbergMarquardt).
  using Scalar = double;
  enum { InputsAtCompileTime = Eigen::Dynamic, ValuesAtCompileTime = Eigen::Dynamic };
  using InputType = Eigen::VectorXd;
  using ValueType = Eigen::VectorXd;
  using JacobianType = Eigen::MatrixXd;
  int inputs() const { return static_cast<int>(params.size()); }
  int values() const { return static_cast<int>(figures.size() + params.size()); }

  int operator()(const Eigen::VectorXd& x, Eigen::VectorXd& fvec) const {
    ++*evaluations;
    const auto sims = simulate_all(records, {}, with_values(base, params, x), jobs, cache);
    for (std::size_t k = 0; k < figures.size(); ++k)
      fvec[static_cast<Eigen::Index>(k)] = log_error(figures[k], sims) / kFigureSigma;
    for (std::size_t i = 0; i < params.size(); ++i) {
      const double v = to_value(params[i], x[static_cast<Eigen::Index>(i)]);
      fvec[static_cast<Eigen::Index>(figures.size() + i)] = std::log(v / params[i].prior) / kPriorSigma;
    }
    return 0;
  }
};

Problem make_problem(const std::vector<ValidationRecord>& records, const std::vector<CalibrationParameter>& params,
                     const sim::Calibration& base, int jobs, RecordCache* cache) {
  Problem p{records, params, base, time_figures(records), jobs, cache};
  return p;
}

// Runs LM from x; returns (x, iterations).
int minimise(Problem& p, Eigen::VectorXd& x, int max_evaluations) {
  Eigen::NumericalDiff<Problem> nd(p, kDiffEpsilon);
  Eigen::LevenbergMarquardt<Eigen::NumericalDiff<Problem>> lm(nd);
  lm.parameters.maxfev = max_evaluations;
  lm.parameters.xtol = 1e-4;
  lm.parameters.ftol = 1e-6;
  lm.minimize(x);
  return static_cast<int>(lm.iter);
}

}  // namespace

namespace {

using ParameterRef = std::function<double&(sim::Calibration&)>;

// Appends the parameter `ref` names, bounded by [lower, upper]; its prior is that field's default
// in sim/scenario/calibration.h, where each prior is documented with its source.
void add_parameter(std::vector<CalibrationParameter>& out, std::string name, double lower, double upper, std::string unit,
                   ParameterRef ref) {
  sim::Calibration defaults;
  const double prior = ref(defaults);
  out.push_back({std::move(name), lower, upper, prior, std::move(unit), std::move(ref)});
}

// The devices, training backends and rollout engines the records use, each once: the fit has
// parameters for these only.
struct RecordUses {
  std::set<std::string> devices;
  std::set<sim::TrainingBackend> backends, moe_backends;
  std::set<sim::RolloutEngineKind> engines, moe_engines, eager, graphs;
  std::set<sim::RolloutEngineKind> quantised_sync;  // engines loading weights quantised on the fly
};

RecordUses record_uses(const std::vector<ValidationRecord>& records) {
  RecordUses u;
  for (const auto& r : records) {
    const auto& s = r.scenario;
    if (s.rollout.precision.linear.weight.element != models::Element::kBf16) u.quantised_sync.insert(s.rollout.engine);
    u.devices.insert(s.cluster.device.name);
    u.backends.insert(s.training.backend);
    u.engines.insert(s.rollout.engine);
    (s.rollout.enforce_eager ? u.eager : u.graphs).insert(s.rollout.engine);
    if (s.model.moe) {
      u.moe_backends.insert(s.training.backend);
      u.moe_engines.insert(s.rollout.engine);
    }
  }
  return u;
}

// A field of device `d`'s calibration (the 'other' device's values until the fit sets it).
ParameterRef device_ref(const std::string& d, double sim::DeviceCalibration::*field) {
  return [d, field](sim::Calibration& c) -> double& {
    if (!c.devices.count(d)) c.devices[d] = c.other_device;
    return c.devices[d].*field;
  };
}

// The backend's and engine's structs are bound to a reference before `.*`: GCC 12 at -O2 and above
// applies `.*` to a temporary copy of a conditional expression of class type, so
// `(x ? c.fsdp : c.megatron).*field` returned a dangling reference.
ParameterRef backend_ref(sim::TrainingBackend b, double sim::BackendCalibration::*field) {
  return [b, field](sim::Calibration& c) -> double& {
    sim::BackendCalibration& backend = b == sim::TrainingBackend::kFsdp ? c.fsdp : c.megatron;
    return backend.*field;
  };
}

ParameterRef engine_ref(sim::RolloutEngineKind e, double sim::EngineCalibration::*field) {
  return [e, field](sim::Calibration& c) -> double& {
    sim::EngineCalibration& engine = e == sim::RolloutEngineKind::kVllm ? c.vllm : c.sglang;
    return engine.*field;
  };
}

// The rollout engines' parameters: GEMM and attention fractions, per-step, per-sequence,
// per-layer (CUDA graphs or eager) and per-MoE-layer costs, the MoE grouped-GEMM shape
// parameters, and the weight sync's per-matrix costs.
void add_engine_parameters(std::vector<CalibrationParameter>& out, const RecordUses& u) {
  using E = sim::EngineCalibration;
  auto name = [](sim::RolloutEngineKind e, const char* what) {
    return fmt::format("rollout.{}.{}", sim::name_in(sim::engine_names(), e), what);
  };
  for (const auto e : u.engines) {
    add_parameter(out, name(e, "compute"), 0.2, 1.0, "", engine_ref(e, &E::compute));
    add_parameter(out, name(e, "attention"), 0.2, 1.0, "", engine_ref(e, &E::attention));
    add_parameter(out, name(e, "iteration"), 0.2e-3, 20e-3, "s", engine_ref(e, &E::iteration_s));
    add_parameter(out, name(e, "per_sequence"), 0.1e-6, 50e-6, "s", engine_ref(e, &E::per_sequence_s));
  }
  for (const auto e : u.graphs) add_parameter(out, name(e, "per_layer"), 2e-6, 200e-6, "s", engine_ref(e, &E::per_layer_s));
  for (const auto e : u.eager)
    add_parameter(out, name(e, "per_layer_eager"), 20e-6, 1e-3, "s", engine_ref(e, &E::per_layer_eager_s));
  for (const auto e : u.moe_engines) add_parameter(out, name(e, "moe_layer"), 2e-6, 1e-3, "s", engine_ref(e, &E::moe_layer_s));
  if (!u.moe_engines.empty()) {
    add_parameter(out, "moe.grouped_gemm_half_tokens", 0.5, 512, "",
                  [](sim::Calibration& c) -> double& { return c.moe_half_tokens; });
    add_parameter(out, "moe.grouped_gemm_half_width", 1.0, 4096, "",
                  [](sim::Calibration& c) -> double& { return c.moe_half_width; });
  }
  for (const auto e : u.engines)
    add_parameter(out, name(e, "sync_per_matrix"), 1e-6, 10e-3, "s", engine_ref(e, &E::sync_per_matrix_s));
  for (const auto e : u.quantised_sync)
    add_parameter(out, name(e, "sync_quantize_per_matrix"), 1e-6, 20e-3, "s", engine_ref(e, &E::sync_quantize_per_matrix_s));
}

}  // namespace

std::vector<CalibrationParameter> calibration_parameters(const std::vector<ValidationRecord>& records) {
  const RecordUses u = record_uses(records);
  std::vector<CalibrationParameter> out;
  for (const auto& d : u.devices) {
    add_parameter(out, "devices." + d + ".memory", 0.2, 0.95, "", device_ref(d, &sim::DeviceCalibration::memory));
    add_parameter(out, "devices." + d + ".compute", 0.2, 0.98, "", device_ref(d, &sim::DeviceCalibration::compute));
  }
  auto backend = [](sim::TrainingBackend b, const char* what) {
    return fmt::format("training.{}.{}", sim::name_in(sim::backend_names(), b), what);
  };
  for (const auto b : u.backends) {
    add_parameter(out, backend(b, "dense"), 0.2, 1.0, "", backend_ref(b, &sim::BackendCalibration::dense));
    add_parameter(out, backend(b, "forward"), 0.3, 1.0, "", backend_ref(b, &sim::BackendCalibration::forward));
  }
  for (const auto b : u.moe_backends)
    add_parameter(out, backend(b, "moe"), 0.05, 1.0, "", backend_ref(b, &sim::BackendCalibration::moe));
  add_engine_parameters(out, u);
  add_parameter(out, "step_overhead", 0.1, 120, "s", [](sim::Calibration& c) -> double& { return c.step_overhead_s; });
  return out;
}

namespace {

// Leave-one-out by a linearised refit: at the full fit x, with the Jacobian J of the residuals
// (figures and priors) and residuals f, dropping record k's rows (its figures and the ratios that
// refer to it) moves the Gauss-Newton optimum by dx = -(J'J - Jk'Jk)^-1 (J'f - Jk'fk) (the
// one-step refit of Cook 1977 / Pregibon 1981 for least squares; the priors keep J'J - Jk'Jk
// positive definite). Record k is then simulated at x + dx. One Jacobian for all records, where
// an iterated refit per record costs a Jacobian per iteration and, on this piecewise-smooth
// objective, often rejects its first steps. Steps are clamped to +-2 in the free variables.
void leave_one_out(Problem& full, const Eigen::VectorXd& x, const sim::Calibration& start, RecordCache& cache,
                   CalibrationFit& fit, const std::function<void(const std::string&)>& say) {
  const auto& records = full.records;
  const auto& figures = full.figures;
  const auto& params = full.params;
  Eigen::VectorXd f(full.values());
  full(x, f);
  Eigen::MatrixXd J(full.values(), full.inputs());
  Eigen::NumericalDiff<Problem> nd(full, kDiffEpsilon);
  nd.df(x, J);
  const Eigen::MatrixXd JtJ = J.transpose() * J;
  const Eigen::VectorXd Jtf = J.transpose() * f;
  for (std::size_t k = 0; k < records.size(); ++k) {
    Eigen::MatrixXd A = JtJ;
    Eigen::VectorXd g = Jtf;
    for (std::size_t r = 0; r < figures.size(); ++r) {
      const auto& fig = figures[r];
      if (fig.record != k && fig.other != k) continue;
      const auto row = J.row(static_cast<Eigen::Index>(r));
      A -= row.transpose() * row;
      g -= row.transpose() * f[static_cast<Eigen::Index>(r)];
    }
    const Eigen::VectorXd dx = (-A.ldlt().solve(g)).cwiseMax(-2.0).cwiseMin(2.0);
    const sim::Calibration ck = with_values(start, params, x + dx);
    // Predict record k (and any record its ratios refer to) with the fit that did not see it.
    std::vector<bool> need(records.size(), false);
    need[k] = true;
    for (const auto& t : figures) {
      if (t.record == k && t.other != std::string::npos) need[t.other] = true;
    }
    const auto sk = simulate_all(records, need, ck, full.jobs, &cache);
    for (const auto& t : figures) {
      if (t.record != k) continue;
      FigureOutcome out;
      out.record = records[k].name;
      out.figure = t.other == std::string::npos ? t.figure : t.figure + " / " + records[t.other].name;
      out.published = t.published;
      out.is_time = t.other == std::string::npos;
      const double le = log_error(t, sk);
      out.predicted = le == kUnfitLogError ? 0.0 : t.published * std::exp(le);
      out.error = out.predicted / out.published - 1.0;
      out.source = records[k].source;
      fit.loo.push_back(out);
    }
    say(fmt::format("leave-one-out {}/{}: {}", k + 1, records.size(), records[k].name));
  }
}

}  // namespace

CalibrationFit calibrate(const std::vector<ValidationRecord>& records, const std::vector<CalibrationParameter>& params,
                         const sim::Calibration& start, const CalibrateOptions& o) {
  auto say = [&](const std::string& s) {
    if (o.progress) o.progress(s);
  };
  const int jobs = std::max(1, o.jobs);
  Eigen::VectorXd x(static_cast<Eigen::Index>(params.size()));
  {
    sim::Calibration c = start;
    for (std::size_t i = 0; i < params.size(); ++i) x[static_cast<Eigen::Index>(i)] = to_free(params[i], params[i].ref(c));
  }
  CalibrationFit fit;
  RecordCache cache(records.size());
  Problem full = make_problem(records, params, start, jobs, &cache);
  say(fmt::format("fitting {} parameters to {} time figures of {} records", params.size(), full.figures.size(), records.size()));
  fit.iterations = minimise(full, x, 60 * static_cast<int>(params.size() + 1));

  fit.calibration = with_values(start, params, x);
  for (std::size_t i = 0; i < params.size(); ++i) fit.values.push_back(to_value(params[i], x[static_cast<Eigen::Index>(i)]));
  {
    Eigen::VectorXd f(full.values());
    full(x, f);
    fit.cost = f.squaredNorm();
  }
  const std::vector<bool> all(records.size(), true);
  const auto sims = simulate_all(records, all, fit.calibration, jobs, &cache);
  fit.outcomes = compare(records, sims);

  // Which records constrain each parameter: their time figures move by > 0.5 % when it moves 10 %.
  const auto& figures = full.figures;
  fit.constrained_by.resize(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    sim::Calibration c = fit.calibration;
    double& v = params[i].ref(c);
    const double up = std::min(v * 1.1, params[i].upper);
    v = up > v ? up : v * 0.9;
    const auto moved = simulate_all(records, all, c, jobs, &cache);
    std::set<std::string> names;
    for (const auto& f : figures) {
      if (std::abs(log_error(f, moved) - log_error(f, sims)) > 0.005) names.insert(records[f.record].name);
    }
    fit.constrained_by[i].assign(names.begin(), names.end());
  }
  fit.evaluations = *full.evaluations;
  say(fmt::format("fit: {} iterations, {} evaluations, cost {:.3f}", fit.iterations, fit.evaluations, fit.cost));

  if (o.leave_one_out && records.size() > 1) leave_one_out(full, x, start, cache, fit, say);
  return fit;
}

}  // namespace rlsim::analysis
