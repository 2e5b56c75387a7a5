#include "sim/pipeline/pipeline.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "sim/engine/event_queue.h"
#include "sim/engine/random.h"
#include "sim/scenario/units.h"

namespace rlsim::sim {
namespace {

// Largest number of engines whose individual iterations are written to the trace (beyond it
// only phase spans are traced, keeping trace.json openable for thousand-device clusters).
constexpr int kMaxTracedEngines = 16;

std::string gb(double bytes) { return format_quantity(bytes, Dimension::kBytes); }

class Simulation {
 public:
  Simulation(const Scenario& s, TraceSink& sink, const ProgressFn& progress)
      : s_(s), sink_(sink), progress_(progress), trainer_(s) {}

  SimResult run();

 private:
  MemoryLedger& rollout_ledger() { return ledgers_.front(); }
  MemoryLedger& train_ledger() { return ledgers_.back(); }
  bool colocated() const { return s_.placement.mode == PlacementMode::kColocated; }

  void sample_step(int step);
  void start_rollout(int step, std::function<void()> done);
  // Runs a sequence of (phase, role, seconds) as consecutive events, then `done`.
  struct Stage {
    std::string phase;
    std::string role;
    double seconds;
    std::function<void()> before;  // memory actions at the stage start
    std::function<void()> after;   // memory actions at the stage end
  };
  void run_stages(int step, std::vector<Stage> stages, std::size_t i, std::function<void()> done);
  std::vector<Stage> training_stages(int step);
  std::vector<Stage> sync_stages(int step);
  // Attributes subsequent peaks of the role's device group to the role (colocated: one group).
  void set_phase(const std::string& role) {
    (role == "rollout" ? rollout_ledger() : train_ledger()).set_phase(role);
  }
  void record_phase(int step, const std::string& phase, const std::string& role, TimeNs start, TimeNs end);
  bool check_fit();

  const Scenario& s_;
  TraceSink& sink_;
  const ProgressFn& progress_;
  EventQueue queue_;
  TrainerCostModel trainer_;
  SimResult r_;
  std::vector<MemoryLedger> ledgers_;
  std::vector<std::vector<Request>> step_requests_;
  std::vector<std::unique_ptr<RolloutEngine>> engines_;
  std::vector<TrainBatch> batches_;
  double kv_pool_bytes_ = 0;          // per device
  // live allocation ids
  MemoryLedger::AllocId rollout_w_ = 0, kv_ = 0, buffers_ = 0, optimizer_ = 0;
  bool rollout_w_live_ = false;
};

void Simulation::sample_step(int step) {
  Rng rng(mix_seed(s_.seed) + static_cast<std::uint64_t>(step));
  const auto& w = s_.workload;
  std::vector<Request> reqs(static_cast<std::size_t>(w.sequences_per_step()));
  TrainBatch batch;
  for (int p = 0; p < w.prompts_per_step; ++p) {
    const std::int64_t prompt = w.prompt_tokens.sample(rng);  // the n samples share their prompt
    for (int j = 0; j < w.samples_per_prompt; ++j) {
      Request& q = reqs[static_cast<std::size_t>(p * w.samples_per_prompt + j)];
      q.step = step;
      q.index = p * w.samples_per_prompt + j;
      q.prompt_tokens = prompt;
      q.response_tokens = w.response_tokens.sample(rng);
      const double len = static_cast<double>(q.prompt_tokens + q.response_tokens);
      batch.tokens += len;
      batch.attention_flops += s_.model.causal_attention_flops(len);
      batch.max_sequence = std::max(batch.max_sequence, len);
    }
  }
  step_requests_[static_cast<std::size_t>(step)] = std::move(reqs);
  batches_[static_cast<std::size_t>(step)] = batch;
}

void Simulation::record_phase(int step, const std::string& phase, const std::string& role, TimeNs start, TimeNs end) {
  r_.phases.push_back(PhaseSpan{step, phase, role, start, end});
  auto& rec = r_.steps[static_cast<std::size_t>(step)];
  rec.phase_s[phase] += to_seconds(end - start);
  sink_.span(Span{role == "rollout" ? "rollout" : role == "sync" ? "weight sync" : "trainer", phase, role, start, end - start,
                  {{"step", static_cast<double>(step)}}});
}

void Simulation::start_rollout(int step, std::function<void()> done) {
  auto& reqs = step_requests_[static_cast<std::size_t>(step)];
  const TimeNs start = queue_.now();
  set_phase("rollout");
  auto& led = rollout_ledger();
  if (colocated()) {
    if (!rollout_w_live_) {
      rollout_w_ = led.allocate(start, "rollout_weights", r_.rollout_cost.weight_bytes_per_device);
      rollout_w_live_ = true;
    }
    kv_ = led.allocate(start, "kv_cache", kv_pool_bytes_);
    buffers_ = led.allocate(start, "rollout_buffers", s_.rollout.activation_buffer_bytes);
  }
  const int engines = r_.engines;
  auto remaining = std::make_shared<int>(engines);
  auto finish = [this, step, start, remaining, done, engines] {
    if (--*remaining > 0) return;
    const TimeNs end = queue_.now();
    record_phase(step, "rollout", "rollout", start, end);
    auto& rec = r_.steps[static_cast<std::size_t>(step)];
    for (int e = 0; e < engines; ++e) {
      const auto& st = engines_[static_cast<std::size_t>(e)]->stats();
      rec.preemptions += st.preemptions;
      r_.max_running = std::max(r_.max_running, st.max_running);
      r_.kv_limited = r_.kv_limited || st.kv_limited;
      r_.decode_memory_bound_s += st.memory_bound_s;
      r_.decode_compute_bound_s += st.compute_bound_s;
    }
    if (colocated()) {
      // Sleep (vLLM sleep mode level 2): KV cache and weights are discarded, not copied.
      auto& l = rollout_ledger();
      l.free(end, kv_);
      l.free(end, buffers_);
      l.free(end, rollout_w_);
      rollout_w_live_ = false;
    }
    done();
  };
  const auto n = static_cast<int>(reqs.size());
  for (int e = 0; e < engines; ++e) {
    std::vector<Request*> mine;
    const int lo = static_cast<int>(static_cast<std::int64_t>(n) * e / engines);
    const int hi = static_cast<int>(static_cast<std::int64_t>(n) * (e + 1) / engines);
    for (int i = lo; i < hi; ++i) mine.push_back(&reqs[static_cast<std::size_t>(i)]);
    engines_[static_cast<std::size_t>(e)]->start(std::move(mine), finish);
  }
  for (const auto& q : reqs) r_.steps[static_cast<std::size_t>(step)].generated_tokens += q.response_tokens;
}

void Simulation::run_stages(int step, std::vector<Stage> stages, std::size_t i, std::function<void()> done) {
  while (i < stages.size() && stages[i].seconds <= 0 && !stages[i].before && !stages[i].after) ++i;
  if (i >= stages.size()) {
    done();
    return;
  }
  const TimeNs start = queue_.now();
  Stage& st = stages[i];
  set_phase(st.role == "rollout" ? "rollout" : "training");
  if (st.before) st.before();
  const TimeNs end = start + to_ns(st.seconds);
  queue_.schedule_at(end, [this, step, stages = std::move(stages), i, start, done = std::move(done)]() mutable {
    const Stage& s = stages[i];
    if (s.after) s.after();
    if (s.seconds > 0) record_phase(step, s.phase, s.role, start, queue_.now());
    run_stages(step, std::move(stages), i + 1, std::move(done));
  });
}

std::vector<Simulation::Stage> Simulation::training_stages(int step) {
  const TrainBatch& b = batches_[static_cast<std::size_t>(step)];
  const TrainTimes t = trainer_.phase_times(b);
  const TrainMemory& m = r_.train_memory;
  auto& led = train_ledger();
  auto transient = [this, &led](const char* tag, double bytes) {
    // allocate at the stage start, free at its end
    auto id = std::make_shared<MemoryLedger::AllocId>();
    return std::make_pair(std::function<void()>([this, &led, tag, bytes, id] { *id = led.allocate(queue_.now(), tag, bytes); }),
                          std::function<void()>([this, &led, id] { led.free(queue_.now(), *id); }));
  };
  std::vector<Stage> out;
  const bool offload = s_.training.optimizer.offload;
  const double offload_s = offload ? trainer_.optimizer_offload_s() : 0.0;
  const double fwd_act = m.activations / 2 + m.logits / 2;  // forward-only: no gradients kept
  {
    auto [a, f] = transient("activations", fwd_act);
    out.push_back(Stage{"old_logprob", "training", t.old_logprob, t.old_logprob > 0 ? a : nullptr, t.old_logprob > 0 ? f : nullptr});
  }
  {
    auto [a, f] = transient("activations", fwd_act);
    out.push_back(Stage{"reference", "training", t.reference, t.reference > 0 ? a : nullptr, t.reference > 0 ? f : nullptr});
  }
  if (offload) {
    out.push_back(Stage{"offload", "training", offload_s,
                        [this, &led, m] { optimizer_ = led.allocate(queue_.now(), "optimizer", m.optimizer); }, nullptr});
  }
  {
    auto grads_act = std::make_shared<std::vector<MemoryLedger::AllocId>>();
    out.push_back(Stage{"actor_update", "training", t.actor_update,
                        [this, &led, m, grads_act] {
                          grads_act->push_back(led.allocate(queue_.now(), "grads", m.grads));
                          grads_act->push_back(led.allocate(queue_.now(), "activations", m.activations));
                          grads_act->push_back(led.allocate(queue_.now(), "logits", m.logits));
                          grads_act->push_back(led.allocate(queue_.now(), "fsdp_gather_buffer", m.gather_buffer));
                        },
                        [this, &led, grads_act] {
                          for (auto id : *grads_act) led.free(queue_.now(), id);
                        }});
  }
  if (offload) {
    out.push_back(Stage{"offload", "training", offload_s, nullptr, [this, &led] { led.free(queue_.now(), optimizer_); }});
  }
  return out;
}

std::vector<Simulation::Stage> Simulation::sync_stages(int) {
  auto& tl = train_ledger();
  auto& rl = rollout_ledger();
  // verl's FSDP path gathers the full BF16 state dict before sending (the SGLang RL memory
  // blog's 15.4 GB all-gather buffer for a 7B model); Megatron exports one bucket at a time.
  const double full_bf16 = static_cast<double>(s_.model.params().total()) * 2.0;
  const double gather_bytes =
      s_.training.backend == TrainingBackend::kFsdp ? full_bf16 : std::min(full_bf16, s_.weight_sync.bucket_bytes);
  auto gather_id = std::make_shared<MemoryLedger::AllocId>();
  std::vector<Stage> out;
  out.push_back(Stage{"weight_sync", "sync", r_.sync.total(),
                      [this, &tl, &rl, gather_bytes, gather_id] {
                        *gather_id = tl.allocate(queue_.now(), "sync_gather_buffer", gather_bytes);
                        if (!rollout_w_live_) {
                          rollout_w_ = rl.allocate(queue_.now(), "rollout_weights", r_.rollout_cost.weight_bytes_per_device);
                          rollout_w_live_ = true;
                        }
                      },
                      [this, &tl, gather_id] { tl.free(queue_.now(), *gather_id); }});
  return out;
}

bool Simulation::check_fit() {
  const auto& dev = s_.cluster.device;
  const double budget = s_.rollout.memory_utilization * dev.memory_bytes;
  const double kv_bytes = budget - r_.rollout_cost.weight_bytes_per_device - s_.rollout.activation_buffer_bytes;
  const auto& rc = r_.rollout_cost;
  if (kv_bytes <= 0) {
    r_.oom = OomReport{"rollout", rollout_ledger().group(),
                       fmt::format("rollout weights ({}) and buffers ({}) exceed the engine's budget of {} "
                                   "(memory_utilization {:g} x {}): no room for a KV cache",
                                   gb(rc.weight_bytes_per_device), gb(s_.rollout.activation_buffer_bytes), gb(budget),
                                   s_.rollout.memory_utilization, gb(dev.memory_bytes)),
                       budget, rc.weight_bytes_per_device + s_.rollout.activation_buffer_bytes,
                       {{"rollout_weights", rc.weight_bytes_per_device}, {"rollout_buffers", s_.rollout.activation_buffer_bytes}}};
    return false;
  }
  kv_pool_bytes_ = kv_bytes;
  r_.kv_capacity_tokens = std::floor(kv_bytes / rc.kv_bytes_per_token_device);
  const double longest = static_cast<double>(s_.workload.prompt_tokens.upper_bound() + s_.workload.response_tokens.upper_bound());
  if (longest > r_.kv_capacity_tokens) {
    r_.oom = OomReport{"rollout", rollout_ledger().group(),
                       fmt::format("KV cache holds {:.0f} tokens per engine, less than one sequence of up to {:.0f} tokens "
                                   "(the engine refuses to start: max_model_len exceeds KV capacity)",
                                   r_.kv_capacity_tokens, longest),
                       kv_bytes, longest * rc.kv_bytes_per_token_device,
                       {{"rollout_weights", rc.weight_bytes_per_device}, {"kv_cache", kv_bytes},
                        {"rollout_buffers", s_.rollout.activation_buffer_bytes}}};
    return false;
  }
  return true;
}

SimResult Simulation::run() {
  const int devices = s_.cluster.devices();
  r_.rollout_cost = RolloutCostModel::build(s_);
  r_.engines = s_.placement.rollout_devices / s_.rollout.tensor_parallel;
  const double capacity = s_.cluster.device.memory_bytes;
  if (colocated()) {
    ledgers_.emplace_back(fmt::format("colocated ({} devices)", devices), capacity);
  } else {
    ledgers_.emplace_back(fmt::format("rollout ({} devices)", s_.placement.rollout_devices), capacity);
    ledgers_.emplace_back(fmt::format("training ({} devices)", s_.placement.train_devices), capacity);
  }
  r_.sync = trainer_.weight_sync(weight_bytes(s_.model, s_.rollout.precision), s_.placement.rollout_devices,
                                 s_.rollout.tensor_parallel);
  step_requests_.resize(static_cast<std::size_t>(s_.steps));
  batches_.resize(static_cast<std::size_t>(s_.steps));
  r_.steps.resize(static_cast<std::size_t>(s_.steps));
  for (int k = 0; k < s_.steps; ++k) {
    r_.steps[static_cast<std::size_t>(k)].step = k;
    sample_step(k);
  }
  TrainBatch largest;
  for (const auto& b : batches_) largest.max_sequence = std::max(largest.max_sequence, b.max_sequence);
  r_.train_memory = trainer_.memory(largest);

  if (!check_fit()) {
    r_.ledgers = std::move(ledgers_);
    r_.steps.clear();
    return std::move(r_);
  }
  for (int e = 0; e < r_.engines; ++e) {
    engines_.push_back(std::make_unique<RolloutEngine>(r_.rollout_cost, queue_, sink_, e, r_.kv_capacity_tokens,
                                                       s_.rollout.max_num_seqs, s_.output.trace && e < kMaxTracedEngines));
  }
  // Resident training state from t = 0: parameters, reference parameters, optimizer states (the
  // latter on the host when optimizer.offload is set, brought in around the actor update).
  auto& tl = train_ledger();
  tl.set_phase("training");
  tl.allocate(0, "train_params", r_.train_memory.params);
  if (r_.train_memory.reference > 0) tl.allocate(0, "reference_params", r_.train_memory.reference);
  if (!s_.training.optimizer.offload) optimizer_ = tl.allocate(0, "optimizer", r_.train_memory.optimizer);
  if (!colocated()) {
    rollout_ledger().set_phase("rollout");
    rollout_w_ = rollout_ledger().allocate(0, "rollout_weights", r_.rollout_cost.weight_bytes_per_device);
    rollout_ledger().allocate(0, "kv_cache", kv_pool_bytes_);
    rollout_ledger().allocate(0, "rollout_buffers", s_.rollout.activation_buffer_bytes);
    rollout_w_live_ = true;
  }

  auto step_done = [this](int k) {
    auto& rec = r_.steps[static_cast<std::size_t>(k)];
    rec.end = queue_.now();
    if (progress_) progress_(k + 1, s_.steps);
  };

  if (s_.schedule.mode == ScheduleMode::kSync) {
    // rollout -> train -> sync, strictly in sequence.
    std::function<void(int)> step_fn = [this, &step_fn, step_done](int k) {
      if (k >= s_.steps) return;
      r_.steps[static_cast<std::size_t>(k)].start = queue_.now();
      start_rollout(k, [this, k, &step_fn, step_done] {
        run_stages(k, training_stages(k), 0, [this, k, &step_fn, step_done] {
          run_stages(k, sync_stages(k), 0, [this, k, &step_fn, step_done] {
            step_done(k);
            queue_.schedule_in(0, [&step_fn, k] { step_fn(k + 1); });
          });
        });
      });
    };
    queue_.schedule_at(0, [&step_fn] { step_fn(0); });
    queue_.run();
  } else if (s_.schedule.mode == ScheduleMode::kOneStepOff) {
    // verl one-step-off: rollout of step k+1 overlaps training of step k (weights one step
    // stale); weight sync k waits for the trainer (train k done) and the rollout (k+1 done).
    std::vector<bool> rollout_done(static_cast<std::size_t>(s_.steps) + 1, false);
    std::vector<bool> train_done(static_cast<std::size_t>(s_.steps), false);
    std::vector<bool> sync_started(static_cast<std::size_t>(s_.steps), false);
    std::function<void(int)> on_rollout_done, maybe_sync, start_train, start_roll;
    start_roll = [&](int k) {
      if (k >= s_.steps) {
        rollout_done[static_cast<std::size_t>(k)] = true;
        return;
      }
      start_rollout(k, [&, k] { on_rollout_done(k); });
    };
    start_train = [&](int k) {
      run_stages(k, training_stages(k), 0, [&, k] {
        train_done[static_cast<std::size_t>(k)] = true;
        maybe_sync(k);
      });
    };
    maybe_sync = [&](int k) {
      if (!train_done[static_cast<std::size_t>(k)] || !rollout_done[static_cast<std::size_t>(k) + 1] ||
          sync_started[static_cast<std::size_t>(k)]) {
        return;
      }
      sync_started[static_cast<std::size_t>(k)] = true;
      run_stages(k, sync_stages(k), 0, [&, k] {
        step_done(k);
        if (k + 1 < s_.steps) {
          r_.steps[static_cast<std::size_t>(k) + 1].start = r_.steps[static_cast<std::size_t>(k)].end;
          start_train(k + 1);
          start_roll(k + 2);
        }
      });
    };
    on_rollout_done = [&](int k) {
      rollout_done[static_cast<std::size_t>(k)] = true;
      if (k == 0) {
        start_train(0);
        start_roll(1);
      } else {
        maybe_sync(k - 1);
      }
    };
    queue_.schedule_at(0, [&] { start_roll(0); });
    queue_.run();
    // A rollout of step k+2 may be cut by the end of the simulation: only steps 0..steps-1 count.
  } else {
    throw ScenarioError(s_.file + ": schedule.mode async is not simulated yet (sync and one-step-off are); "
                        "use --set schedule.mode=one-step-off for an overlapped schedule");
  }
  r_.events = queue_.events_run();
  // Tear-down: release what stays resident across steps, so every allocation has its free.
  for (auto& l : ledgers_) {
    l.free_all(queue_.now());
  }
  for (const auto& l : ledgers_) {
    if (l.oom() && !r_.oom) {
      const auto& o = *l.oom();
      double total = 0;
      for (const auto& [_, b] : o.breakdown) total += b;
      const bool rollout_role = colocated() ? o.phase == "rollout" : &l == &ledgers_.front();
      r_.oom = OomReport{rollout_role ? "rollout" : "training", l.group(),
                         fmt::format("{} needs {} on a {} device during {} (allocating {} of '{}')", l.group(), gb(total),
                                     gb(o.capacity_bytes), o.phase, gb(o.requested_bytes), o.tag),
                         o.capacity_bytes, total, o.breakdown};
    }
  }
  if (colocated()) {
    r_.peak_rollout_bytes = ledgers_.front().peak_in("rollout");
    r_.peak_training_bytes = ledgers_.front().peak_in("training");
  } else {
    r_.peak_rollout_bytes = ledgers_.front().peak();
    r_.peak_training_bytes = ledgers_.back().peak();
  }
  for (int k = 0; k < s_.steps; ++k) {
    for (auto& q : step_requests_[static_cast<std::size_t>(k)]) r_.requests.push_back(q);
  }
  r_.ledgers = std::move(ledgers_);
  return std::move(r_);
}

}  // namespace

SimResult simulate(const Scenario& s, TraceSink& sink, const ProgressFn& progress) {
  Simulation sim(s, sink, progress);
  return sim.run();
}

}  // namespace rlsim::sim
