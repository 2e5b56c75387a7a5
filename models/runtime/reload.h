// The reload driver: what a rollout engine does every RL step once the trainer has new weights —
// restore, load, quantise and transform every tensor (weight_lifecycle.h) — repeated for many
// cycles and checked against a freshly loaded engine.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "models/runtime/model.h"
#include "models/runtime/transformer.h"
#include "models/runtime/weight_lifecycle.h"

namespace rlsim::models {

/// A seeded stand-in for one training step's update of the master weights (until rlsim has a real
/// trainer): every tensor w (embedding, norms, biases, linears, router, experts, lm_head) gets
/// w += N(0, (relative * rms(w))^2) element-wise, drawn from a std::mt19937_64 seeded with (seed,
/// step, tensor index), so the same (seed, step) always gives the same update. An RL step (Adam,
/// lr 1e-6, |update| ~ lr per element) moves weights of rms 0.02 by ~5e-5 of their rms; the
/// default 1e-3 of ReloadOptions is larger so that many quantised codes and scales change every
/// cycle. Throws std::invalid_argument for a negative or non-finite `relative`.
void perturb_weights(ModelWeights& m, std::uint64_t seed, std::int64_t step, double relative);

/// Largest |a - b| between two engines' logits on a probe: the prefill logits of every position
/// of `tokens` (the trainer-style multi-token path) and the decode logits of each token fed one
/// by one from position 0 (the rollout path; both engines' KV caches are reset before and after).
/// 0 means bit-identical logits (a NaN on both sides at the same place counts as equal, on one
/// side as +inf). Throws as prefill() / decode().
double max_abs_logit_diff(Transformer& a, Transformer& b, std::span<const int> tokens);

/// Options of run_reload().
struct ReloadOptions {
  int cycles = 100;            // reloads
  std::uint64_t seed = 1;      // perturbation and probe tokens
  double perturbation = 1e-3;  // perturb_weights' relative step
  int check_every = 0;         // compare with a fresh engine every this many cycles (0: after the last only)
  int probe_tokens = 32;       // probe length (at most max_seq)
};

/// One reload cycle.
struct ReloadCycle {
  int cycle = 0;                 // 1-based
  ReloadStats stats;             // per stage, summed over every tensor
  double seconds = 0;            // wall time of restore + load + process (the perturbation excluded)
  bool checked = false;          // compared with a fresh engine after this cycle
  double logit_diff = 0;         // that comparison's max_abs_logit_diff (when checked)
  bool addresses_stable = true;  // every kernel buffer at the address it had after the first load
};

/// What run_reload() measured.
struct ReloadReport {
  std::vector<ReloadCycle> cycles;
  double max_abs_logit_diff = 0;  // largest over the checked cycles
  int checks = 0;
  bool addresses_stable = true;    // over every cycle
  std::size_t kernel_buffers = 0;  // buffers whose addresses were tracked
};

/// Builds an engine from `initial` in `precision` and `kernels`, then for each cycle perturbs
/// the master weights (perturb_weights(master, seed, cycle, perturbation)) and reloads them into
/// the same engine: restore_weights_for_loading, load_weights, process_weights_after_loading. After
/// every check_every-th cycle and after the last, a fresh engine is constructed from the same master
/// weights and the logits compared (max_abs_logit_diff on `probe_tokens` seeded random tokens).
/// `on_cycle`, when set, is called after each cycle (progress, per-cycle output). Throws
/// std::invalid_argument for cycles < 1, check_every < 0 or probe_tokens < 1, and as Transformer.
ReloadReport run_reload(const ModelWeights& initial, const RuntimePrecision& precision, KernelMode kernels,
                        const ReloadOptions& o, const std::function<void(const ReloadCycle&)>& on_cycle = {});

}  // namespace rlsim::models
