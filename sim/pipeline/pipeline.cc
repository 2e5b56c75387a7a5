#include "sim/pipeline/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>

#include "sim/engine/event_queue.h"
#include "sim/engine/random.h"
#include "sim/scenario/units.h"

namespace rlsim::sim {

double copy_s(double bytes, const models::Link& link) {
  if (bytes <= 0) return 0.0;
  return bytes / link.bandwidth_bytes_per_s + link.latency_s;
}

namespace {

// Largest number of engines whose individual iterations are written to the trace (beyond it
// only phase spans are traced, keeping trace.json openable for thousand-device clusters).
constexpr int kMaxTracedEngines = 16;

std::string gb(double bytes) { return format_quantity(bytes, Dimension::kBytes); }

// The scenario a critic, reward model or separate reference is priced in: the actor's batch with
// its own model, recipe and layout, on the `devices` of its group; one forward pass per step (the
// old_logprob pass of its TrainTimes), no KL reference of its own (`reference_model` kept only to
// size a forward-only model's weights).
Scenario aux_scenario(const Scenario& s, const AuxModelConfig& aux, int devices, bool forward_only) {
  Scenario a = s;
  a.model = aux.model;
  a.training.precision = aux.precision;
  static_cast<ParallelLayout&>(a.training) = aux.layout;
  a.training.recompute_old_logprob = true;
  a.training.reference_model = forward_only;
  a.algorithm.reference.reset();
  a.placement.train_devices = devices;
  return a;
}

// The scenario the actor is priced in: without the reference's pass and weights when the
// reference runs on devices of its own.
Scenario actor_scenario(const Scenario& s) {
  Scenario a = s;
  if (s.algorithm.reference_separate()) a.training.reference_model = false;
  return a;
}

// The bytes a forward-only pass (old log-probs, reference, reward, values) holds while it runs:
// no gradients are kept, so half of an update's peak activations and logits.
double forward_only_bytes(const TrainMemory& m) { return m.activations / 2 + m.logits / 2; }

// The device group a training-side model runs on.
using Group = TrainerGroup;

// Its trace track and ledger name ("trainer" for the actor's, as ever).
std::string group_name(Group g) { return g == Group::kActor ? "trainer" : std::string(trainer_group_name(g)); }

class Simulation {
 public:
  Simulation(const Scenario& s, TraceSink& sink, const ProgressFn& progress, const RequestFn& on_request)
      : s_(s), sink_(sink), progress_(progress), on_request_(on_request), actor_s_(actor_scenario(s)), trainer_(actor_s_) {
    if (s.algorithm.critic) {
      const auto& c = *s.algorithm.critic;
      if (c.placement == AuxPlacement::kSeparate) critic_group_ = Group::kCritic;
      critic_s_.emplace(aux_scenario(s, c, group_devices(critic_group_), false));
      critic_.emplace(*critic_s_, ModelHead::kValue);
    }
    if (s.algorithm.reward_model) {
      const auto& rm = *s.algorithm.reward_model;
      reward_group_ = rm.placement == AuxPlacement::kSeparate ? Group::kRewardModel
                      : rm.placement == AuxPlacement::kCritic ? critic_group_
                                                              : Group::kActor;
      reward_s_.emplace(aux_scenario(s, rm, group_devices(reward_group_), true));
      reward_.emplace(*reward_s_, ModelHead::kValue);
    }
    if (s.algorithm.reference_separate()) {
      reference_group_ = Group::kReference;
      reference_s_.emplace(aux_scenario(s, *s.algorithm.reference, group_devices(reference_group_), true));
      reference_cost_.emplace(*reference_s_, ModelHead::kLanguage);
    }
  }

  SimResult run();

 private:
  MemoryLedger& rollout_ledger() { return ledgers_.front(); }
  MemoryLedger& train_ledger() { return ledgers_[colocated() ? 0 : 1]; }
  // The ledger of a training-side group: the actor's, or a separate critic's or reward model's
  // (created after the rollout's and the actor's, critic first).
  MemoryLedger& ledger(Group g) {
    return g == Group::kActor ? train_ledger() : ledgers_[group_ledger_[static_cast<std::size_t>(g)]];
  }
  int group_devices(Group g) const {
    if (g == Group::kCritic) return s_.algorithm.critic->devices;
    if (g == Group::kRewardModel) return s_.algorithm.reward_model->devices;
    if (g == Group::kReference) return s_.algorithm.reference->devices;
    return s_.placement.train_devices;
  }
  // Whether any training-side model runs on devices of its own (its passes then run beside the actor's).
  bool separate_groups() const {
    return critic_group_ != Group::kActor || reward_group_ != Group::kActor || reference_group_ != Group::kActor;
  }
  bool colocated() const { return s_.placement.mode == PlacementMode::kColocated; }

  // Step `step`'s requests as drawn from its own seed (sync and one-step-off schedules): the
  // same whenever they are drawn, so the batch shapes can be known before the requests exist.
  std::vector<Request> sample_requests(int step) const;
  void materialize_step(int step);
  // Hands the consumed requests of steps up to `last` to on_request_, in order, and frees them.
  void release_steps(int last);
  Request& streamed(std::int64_t i) { return stream_[static_cast<std::size_t>(i - stream_base_)]; }
  void start_rollout(int step, std::function<void()> done);
  void run_sync_schedule();
  void run_one_step_off();
  void run_async();
  // The schedules: each holds its state as members and its event handlers as methods.
  class SyncSchedule;
  class OneStepOffSchedule;
  class AsyncSchedule;
  // Runs a sequence of (phase, role, seconds) as consecutive events, then `done`.
  struct Stage {
    Phase phase;
    Role role;
    double seconds;
    std::function<void()> before;  // memory actions at the stage start
    std::function<void()> after;   // memory actions at the stage end
    Group group = Group::kActor;   // the devices it runs on (training-side stages)
    // Non-empty: not a stage but concurrent chains, one per device group, each run in order; the
    // next stage starts when every chain has finished.
    std::vector<std::vector<Stage>> lanes = {};
  };
  void run_stages(int step, std::vector<Stage> stages, std::size_t i, std::function<void()> done);
  std::vector<Stage> training_stages(int step);
  // One forward pass over the batch by a model other than the actor, on its group's devices:
  // the reward model's (verl timing_s/reward), a separate reference's (timing_s/ref) or the
  // critic's values (timing_s/values). Its activations (no gradients kept) live for the stage.
  Stage forward_stage(Phase phase, const TrainerCostModel& model, const TrainMemory& m, Group group, const TrainBatch& b);
  // PPO's critic's update.
  Stage critic_update_stage(const TrainBatch& b);
  // A model's update: its gradients, activations, logits and gather buffer live for the stage
  // (after `extra_bytes` tagged `extra_tag`, e.g. optimizer states brought in from the host).
  Stage update_stage(Phase phase, double seconds, const TrainMemory& m, double extra_bytes = 0,
                     MemoryTag extra_tag = MemoryTag::kOptimizer, Group group = Group::kActor);
  // The memory actions of a stage that holds `bytes` tagged `tag` on the group's ledger: allocate
  // at its start, free at its end.
  std::pair<std::function<void()>, std::function<void()>> transient(MemoryTag tag, double bytes, Group group = Group::kActor);
  std::vector<Stage> sync_stages(int step);
  std::vector<Stage> sleep_stages();
  void finish_step(int step);
  // Allocates the rollout weights on the rollout ledger now, unless they are live already.
  void ensure_rollout_weights() {
    if (rollout_w_live_) return;
    rollout_w_ = rollout_ledger().allocate(queue_.now(), MemoryTag::kRolloutWeights, r_.rollout_cost.weight_bytes_per_device);
    rollout_w_live_ = true;
  }
  // Allocates the actor (and reference) parameters on the training ledger now.
  void allocate_params() {
    params_ = train_ledger().allocate(queue_.now(), MemoryTag::kTrainParams, r_.train_memory.params);
    if (r_.train_memory.reference > 0)
      reference_ = train_ledger().allocate(queue_.now(), MemoryTag::kReferenceParams, r_.train_memory.reference);
  }
  TrainBatch batch_of(const std::vector<Request*>& reqs) const;
  // Attributes subsequent peaks of the role's device group to the role (colocated: one group).
  // A weight sync counts as training on the ledgers.
  void set_phase(Role role) {
    if (role == Role::kRollout) {
      rollout_ledger().set_phase(Role::kRollout);
    } else {
      train_ledger().set_phase(Role::kTraining);
    }
  }
  void record_phase(int step, Phase phase, Role role, TimeNs start, TimeNs end, Group group = Group::kActor);
  bool check_fit();
  void make_ledgers();
  void size_training_memory();
  void allocate_resident_state();
  void collect_engine_stats();
  std::string colocated_oom_remedy(const MemoryLedger::Oom& o) const;
  void report_memory();

  const Scenario& s_;
  TraceSink& sink_;
  const ProgressFn& progress_;
  const RequestFn& on_request_;
  EventQueue queue_;
  Scenario actor_s_;  // actor_scenario(s_): what trainer_ prices
  TrainerCostModel trainer_;
  // PPO's critic and a reward model, priced in their own scenarios (aux_scenario) on the training
  // devices; their resident bytes per device (critic: parameters, optimizer states; reward model:
  // its weights in the compute format).
  // A reference on devices of its own likewise (its weights in the training recipe's reference
  // format).
  std::optional<Scenario> critic_s_, reward_s_, reference_s_;
  std::optional<TrainerCostModel> critic_, reward_, reference_cost_;
  TrainMemory critic_memory_, reward_memory_, reference_memory_;
  Group critic_group_ = Group::kActor, reward_group_ = Group::kActor, reference_group_ = Group::kActor;
  // Index in ledgers_ of a separate critic's / reward model's / reference's group.
  std::array<std::size_t, kTrainerGroupNames.size()> group_ledger_{};
  SimResult r_;
  std::vector<MemoryLedger> ledgers_;
  std::vector<std::vector<Request>> step_requests_;
  std::vector<std::unique_ptr<RolloutEngine>> engines_;
  std::vector<TrainBatch> batches_;
  double kv_pool_bytes_ = 0;  // per device
  int version_ = 0;           // weight updates delivered to the rollout engines
  // live allocation ids
  MemoryLedger::AllocId rollout_w_ = 0, kv_ = 0, buffers_ = 0, optimizer_ = 0, params_ = 0, reference_ = 0;
  bool rollout_w_live_ = false;
  bool rollout_w_on_host_ = false;  // colocated, sleep level 1: weights parked in host memory
  // async schedule: the requests dispatched and not yet released (stable addresses); request i
  // of the run is stream_[i - stream_base_]
  std::deque<Request> stream_;
  std::int64_t stream_base_ = 0;
  std::vector<std::vector<Request*>> consumed_;
  int next_release_ = 0;  // first step whose requests are not yet released
};

TrainBatch Simulation::batch_of(const std::vector<Request*>& reqs) const {
  TrainBatch b;
  std::vector<double> work;  // forward FLOPs of each sequence
  work.reserve(reqs.size());
  const double flops_per_token = 2.0 * static_cast<double>(s_.model.active_matmul_params());
  for (const Request* q : reqs) {
    const double len = static_cast<double>(q->prompt_tokens + q->response_tokens);
    const double attn = s_.model.causal_attention_flops(len);
    b.tokens += len;
    b.attention_flops += attn;
    b.max_sequence = std::max(b.max_sequence, len);
    b.sequences += 1;
    work.push_back(flops_per_token * len + attn);
  }
  const auto& t = s_.training;
  if (t.padding == TrainPadding::kMicroBatch) {
    // Micro-batches of m sequences in step order, as OpenRLHF before --packing_samples laid them
    // out: a forward-only pass scores a generate call's batch (prompts left-padded to the longest
    // prompt, responses right-padded to the longest response: `split` rows), the update re-pads
    // whole sequences from its shuffled replay buffer to the longest one (replay_buffer.py
    // zero_pad_sequences).
    auto padded = [&](int m, bool split) {
      double sum = 0;
      for (std::size_t i = 0; i < reqs.size(); i += static_cast<std::size_t>(m)) {
        const std::size_t end = std::min(reqs.size(), i + static_cast<std::size_t>(m));
        std::int64_t prompt = 0, response = 0, whole = 0;
        for (std::size_t k = i; k < end; ++k) {
          prompt = std::max(prompt, reqs[k]->prompt_tokens);
          response = std::max(response, reqs[k]->response_tokens);
          whole = std::max(whole, reqs[k]->prompt_tokens + reqs[k]->response_tokens);
        }
        const auto row = static_cast<double>(split ? prompt + response : whole);
        sum += static_cast<double>(end - i) * row;
        b.padded_row = std::max(b.padded_row, row);
      }
      return sum - b.tokens;
    };
    b.update_padding = padded(t.micro_batch_sequences, false);
    b.forward_padding = padded(t.logprob_micro_batch_sequences, true);
  } else if (t.padding == TrainPadding::kMaxLength) {
    // Every sequence at the longest prompt plus the longest response the workload allows.
    const auto row = static_cast<double>(s_.workload.prompt_tokens.upper_bound() + s_.workload.response_tokens.upper_bound());
    b.forward_padding = b.update_padding = b.sequences * row - b.tokens;
    b.padded_row = row;
  }
  const int dp = s_.placement.train_devices / t.model_parallel();
  // verl balances the whole batch over the DP ranks (trainer.balance_batch, seqlen_balancing.py)
  // before it splits mini-batches, and a rank's mini-batches then pace the update together: the
  // balance of the whole batch is what both kinds of pass see. (Balancing each mini-batch on its
  // own predicts twice the published actor update of verl's 128 x H20 fully-async baseline.)
  b.imbalance = dp_imbalance(work, dp);
  return b;
}

std::vector<Request> Simulation::sample_requests(int step) const {
  Rng rng(mix_seed(s_.seed) + static_cast<std::uint64_t>(step));
  const auto& w = s_.workload;
  std::vector<Request> reqs(static_cast<std::size_t>(w.sequences_per_step()));
  for (int p = 0; p < w.prompts_per_step; ++p) {
    const std::int64_t prompt = w.prompt_tokens.sample(rng);  // the n samples share their prompt
    for (int j = 0; j < w.samples_per_prompt; ++j) {
      Request& q = reqs[static_cast<std::size_t>(p * w.samples_per_prompt + j)];
      q.step = step;
      q.index = p * w.samples_per_prompt + j;
      q.group = static_cast<std::int64_t>(step) * w.prompts_per_step + p;
      q.prompt_tokens = prompt;
      q.response_tokens = w.response_tokens.sample(rng);
    }
  }
  return reqs;
}

void Simulation::materialize_step(int step) {
  auto& reqs = step_requests_[static_cast<std::size_t>(step)];
  reqs = sample_requests(step);
  auto& consumed = consumed_[static_cast<std::size_t>(step)];
  consumed.clear();
  for (auto& q : reqs) consumed.push_back(&q);
}

void Simulation::release_steps(int last) {
  const std::int64_t limit = s_.workload.response_tokens.upper_bound();
  for (; next_release_ <= last && next_release_ < s_.steps; ++next_release_) {
    const auto k = static_cast<std::size_t>(next_release_);
    auto& reqs = consumed_[k];
    std::sort(reqs.begin(), reqs.end(), [](const Request* a, const Request* b) { return a->index < b->index; });
    for (const Request* q : reqs) {
      r_.requests_consumed++;
      if (q->response_tokens >= limit) r_.responses_at_limit++;
      if (on_request_) on_request_(*q);
    }
    std::vector<Request*>().swap(reqs);
    std::vector<Request>().swap(step_requests_[k]);
  }
  // Async: the oldest dispatched requests, once their steps are released.
  while (!stream_.empty() && stream_.front().step >= 0 && stream_.front().step < next_release_) {
    stream_.pop_front();
    ++stream_base_;
  }
}

void Simulation::record_phase(int step, Phase phase, Role role, TimeNs start, TimeNs end, Group group) {
  r_.phases.push_back(PhaseSpan{step, phase, role, start, end, group});
  auto& rec = r_.steps[static_cast<std::size_t>(step)];
  rec.phase_s[phase] += to_seconds(end - start);
  sink_.span(Span{role == Role::kRollout ? "rollout"
                  : role == Role::kSync  ? "weight sync"
                                         : group_name(group),
                  std::string(phase_name(phase)),
                  std::string(role_name(role)),
                  start,
                  end - start,
                  {{"step", static_cast<double>(step)}}});
}

void Simulation::start_rollout(int step, std::function<void()> done) {
  materialize_step(step);
  auto& reqs = step_requests_[static_cast<std::size_t>(step)];
  const TimeNs start = queue_.now();
  set_phase(Role::kRollout);
  auto& led = rollout_ledger();
  if (colocated()) {
    // Wake-up: the KV cache and buffers are re-allocated (weights came back with the sync).
    ensure_rollout_weights();
    kv_ = led.allocate(start, MemoryTag::kKvCache, kv_pool_bytes_);
    buffers_ = led.allocate(start, MemoryTag::kRolloutBuffers, s_.rollout.activation_buffer_bytes);
  }
  for (auto& q : reqs) q.version = version_;
  const int engines = r_.engines;
  auto remaining = std::make_shared<int>(engines);
  auto finish = [this, step, start, remaining, done] {
    if (--*remaining > 0) return;
    record_phase(step, Phase::kRollout, Role::kRollout, start, queue_.now());
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
}

void Simulation::run_stages(int step, std::vector<Stage> stages, std::size_t i, std::function<void()> done) {
  while (i < stages.size() && stages[i].seconds <= 0 && !stages[i].before && !stages[i].after && stages[i].lanes.empty()) ++i;
  if (i >= stages.size()) {
    done();
    return;
  }
  const TimeNs start = queue_.now();
  Stage& st = stages[i];
  if (!st.lanes.empty()) {
    // Concurrent chains: each runs on its own; the last to finish goes on with stage i + 1.
    auto lanes = std::move(st.lanes);
    auto left = std::make_shared<std::size_t>(lanes.size());
    auto rest =
        std::make_shared<std::function<void()>>([this, step, stages = std::move(stages), i, done = std::move(done)]() mutable {
          run_stages(step, std::move(stages), i + 1, std::move(done));
        });
    for (auto& lane : lanes) {
      run_stages(step, std::move(lane), 0, [left, rest] {
        if (--*left == 0) (*rest)();
      });
    }
    return;
  }
  set_phase(st.role);
  if (st.before) st.before();
  const TimeNs end = start + to_ns(st.seconds);
  queue_.schedule_at(end, [this, step, stages = std::move(stages), i, start, done = std::move(done)]() mutable {
    const Stage& s = stages[i];
    if (s.after) s.after();
    if (s.seconds > 0) {
      record_phase(step, s.phase, s.role, start, queue_.now(), s.group);
      if (s.role == Role::kRollout) {
        for (auto& b : r_.engine_busy_s) b += s.seconds;
      } else if (s.group == Group::kActor) {
        r_.trainer_busy_s += s.seconds;
      }
    }
    run_stages(step, std::move(stages), i + 1, std::move(done));
  });
}

std::vector<Simulation::Stage> Simulation::sleep_stages() {
  // Colocated: the engine sleeps while the trainer runs (vLLM sleep mode). The KV cache and
  // buffers are discarded at once; at level 1 the weights are copied to host memory over the
  // host link (and back at wake-up, before the weight sync), at level 2 they are discarded.
  std::vector<Stage> out;
  if (!colocated()) return out;
  auto& led = rollout_ledger();
  const double w = r_.rollout_cost.weight_bytes_per_device;
  const bool offload = s_.rollout.sleep_level == 1;
  out.push_back(Stage{Phase::kOffload, Role::kRollout, offload ? copy_s(w, s_.cluster.host_link) : 0.0,
                      [this, &led] {
                        led.free(queue_.now(), kv_);
                        led.free(queue_.now(), buffers_);
                      },
                      [this, &led, offload] {
                        led.free(queue_.now(), rollout_w_);
                        rollout_w_live_ = false;
                        rollout_w_on_host_ = offload;
                      }});
  return out;
}

std::vector<Simulation::Stage> Simulation::training_stages(int step) {
  const TrainBatch& b = batches_[static_cast<std::size_t>(step)];
  const TrainTimes t = trainer_.phase_times(b);
  const TrainMemory& m = r_.train_memory;
  auto& led = train_ledger();
  std::vector<Stage> out;
  // Reward, advantages and moving the batch to the trainer: a fixed cost per step (calibrated).
  out.push_back(Stage{Phase::kStepOverhead, Role::kTraining, s_.training.step_overhead_s, nullptr, nullptr});
  const auto& host = s_.cluster.host_link;
  if (s_.training.param_offload) {
    // Parameters (actor and reference) come back from host memory for the training phases.
    out.push_back(
        Stage{Phase::kOffload, Role::kTraining, copy_s(m.params + m.reference, host), [this] { allocate_params(); }, nullptr});
  }
  // The experience passes, then the updates. A model on its own devices runs its passes in a chain
  // beside the actor's (and a reward model on the critic's devices after the critic's values);
  // on the actor's devices they run one after another in the order below.
  std::vector<Stage> actor, critic, reward, reference;
  auto chain = [&](Group g) -> std::vector<Stage>& {
    return g == Group::kCritic ? critic : g == Group::kRewardModel ? reward : g == Group::kReference ? reference : actor;
  };
  // The reward model scores every sequence; the critic gives every token's value.
  auto reward_pass = [&] { return forward_stage(Phase::kReward, *reward_, reward_memory_, reward_group_, b); };
  if (reward_ && reward_group_ != Group::kCritic) chain(reward_group_).push_back(reward_pass());
  const double fwd_act = forward_only_bytes(m);
  {
    auto [a, f] = transient(MemoryTag::kActivations, fwd_act);
    actor.push_back(Stage{Phase::kOldLogprob, Role::kTraining, t.old_logprob, t.old_logprob > 0 ? a : nullptr,
                          t.old_logprob > 0 ? f : nullptr});
  }
  if (reference_cost_) {
    chain(reference_group_).push_back(forward_stage(Phase::kReference, *reference_cost_, reference_memory_, reference_group_, b));
  } else {
    auto [a, f] = transient(MemoryTag::kActivations, fwd_act);
    actor.push_back(
        Stage{Phase::kReference, Role::kTraining, t.reference, t.reference > 0 ? a : nullptr, t.reference > 0 ? f : nullptr});
  }
  if (critic_) chain(critic_group_).push_back(forward_stage(Phase::kValues, *critic_, critic_memory_, critic_group_, b));
  if (reward_ && reward_group_ == Group::kCritic) critic.push_back(reward_pass());
  // Ends a block: with separate groups, one stage of concurrent lanes (its phase is not recorded);
  // otherwise the actor's chain, which then holds every pass, in order.
  auto flush = [&] {
    if (!separate_groups()) {
      for (auto& st : actor) out.push_back(std::move(st));
      actor.clear();
      return;
    }
    Stage block{Phase::kStepOverhead, Role::kTraining, 0.0, nullptr, nullptr};
    for (auto* c : {&actor, &critic, &reward, &reference}) {
      if (!c->empty()) block.lanes.push_back(std::move(*c));
      c->clear();
    }
    out.push_back(std::move(block));
  };
  flush();
  if (critic_) chain(critic_group_).push_back(critic_update_stage(b));
  const bool cpu_opt = trainer_.cpu_optimizer();
  const bool offload = s_.training.optimizer.offload;
  const double offload_s = offload ? trainer_.optimizer_offload_s() : 0.0;
  if (offload) {
    actor.push_back(Stage{Phase::kOffload, Role::kTraining, offload_s,
                          [this, &led, m] { optimizer_ = led.allocate(queue_.now(), MemoryTag::kOptimizer, m.optimizer); },
                          nullptr});
  }
  actor.push_back(update_stage(Phase::kActorUpdate, t.actor_update, m));
  if (offload) {
    actor.push_back(
        Stage{Phase::kOffload, Role::kTraining, offload_s, nullptr, [this, &led] { led.free(queue_.now(), optimizer_); }});
  }
  if (cpu_opt) actor.push_back(Stage{Phase::kOffload, Role::kTraining, trainer_.cpu_optimizer_s(), nullptr, nullptr});
  flush();
  return out;
}

Simulation::Stage Simulation::forward_stage(Phase phase, const TrainerCostModel& model, const TrainMemory& m, Group group,
                                            const TrainBatch& b) {
  auto [a, f] = transient(MemoryTag::kActivations, forward_only_bytes(m), group);
  return Stage{phase, Role::kTraining, model.phase_times(b).old_logprob, a, f, group};
}

Simulation::Stage Simulation::critic_update_stage(const TrainBatch& b) {
  // The critic's update with the actor's epochs and mini-batches (timing_s/update_critic); its
  // optimizer states come in from the host around the update when the actor's do.
  const TrainTimes c = critic_->phase_times(b);
  const TrainMemory& cm = critic_memory_;
  const bool offload = s_.training.optimizer.offload;
  double seconds = c.actor_update + (offload ? 2 * critic_->optimizer_offload_s() : 0.0);
  if (critic_->cpu_optimizer()) seconds += critic_->cpu_optimizer_s();
  return update_stage(Phase::kCriticUpdate, seconds, cm, offload ? cm.optimizer : 0.0, MemoryTag::kCriticOptimizer,
                      critic_group_);
}

std::pair<std::function<void()>, std::function<void()>> Simulation::transient(MemoryTag tag, double bytes, Group group) {
  auto& led = ledger(group);
  auto id = std::make_shared<MemoryLedger::AllocId>();
  return {[this, &led, tag, bytes, id] { *id = led.allocate(queue_.now(), tag, bytes); },
          [this, &led, id] { led.free(queue_.now(), *id); }};
}

Simulation::Stage Simulation::update_stage(Phase phase, double seconds, const TrainMemory& m, double extra_bytes,
                                           MemoryTag extra_tag, Group group) {
  auto& led = ledger(group);
  auto held = std::make_shared<std::vector<MemoryLedger::AllocId>>();
  return Stage{phase,
               Role::kTraining,
               seconds,
               [this, &led, m, held, extra_bytes, extra_tag] {
                 if (extra_bytes > 0) held->push_back(led.allocate(queue_.now(), extra_tag, extra_bytes));
                 held->push_back(led.allocate(queue_.now(), MemoryTag::kGrads, m.grads));
                 held->push_back(led.allocate(queue_.now(), MemoryTag::kActivations, m.activations));
                 held->push_back(led.allocate(queue_.now(), MemoryTag::kLogits, m.logits));
                 held->push_back(led.allocate(queue_.now(), MemoryTag::kFsdpGatherBuffer, m.gather_buffer));
               },
               [this, &led, held] {
                 for (auto id : *held) led.free(queue_.now(), id);
               },
               group};
}

std::vector<Simulation::Stage> Simulation::sync_stages(int) {
  auto& tl = train_ledger();
  std::vector<Stage> out;
  const double w = r_.rollout_cost.weight_bytes_per_device;
  if (colocated()) {
    // Wake-up of the weights (sleep level 1 copies them back from host memory; level 2 only
    // re-allocates, the sync below fills them).
    out.push_back(Stage{Phase::kOffload, Role::kSync, rollout_w_on_host_ ? copy_s(w, s_.cluster.host_link) : 0.0,
                        [this] { ensure_rollout_weights(); }, [this] { rollout_w_on_host_ = false; }});
  }
  // verl (FSDP and Megatron) and slime stream the weights (the training recipe's sync format) in
  // buckets of weight_sync.bucket: one bucket is gathered, handed over and freed before the next
  // (a pipelined pair in flight).
  const double full_model = static_cast<double>(s_.model.params().total()) * models::param_widths(s_.training.precision).sync;
  const double gather_bytes = std::min(full_model, 2.0 * s_.weight_sync.bucket_bytes);
  auto gather_id = std::make_shared<MemoryLedger::AllocId>();
  out.push_back(Stage{Phase::kWeightSync, Role::kSync, r_.sync.total(),
                      [this, &tl, gather_bytes, gather_id] {
                        *gather_id = tl.allocate(queue_.now(), MemoryTag::kSyncGatherBuffer, gather_bytes);
                      },
                      [this, &tl, gather_id] {
                        tl.free(queue_.now(), *gather_id);
                        ++version_;
                      }});
  if (s_.training.param_offload) {
    const TrainMemory& m = r_.train_memory;
    out.push_back(
        Stage{Phase::kOffload, Role::kSync, copy_s(m.params + m.reference, s_.cluster.host_link), nullptr, [this, &tl, m] {
                tl.free(queue_.now(), params_);
                if (m.reference > 0) tl.free(queue_.now(), reference_);
              }});
  }
  return out;
}

bool Simulation::check_fit() {
  const auto& dev = s_.cluster.device;
  const double budget = s_.rollout.memory_utilization * dev.memory_bytes;
  const double kv_bytes = budget - r_.rollout_cost.weight_bytes_per_device - s_.rollout.activation_buffer_bytes;
  const auto& rc = r_.rollout_cost;
  if (kv_bytes <= 0) {
    r_.oom =
        OomReport{Role::kRollout,
                  rollout_ledger().group(),
                  fmt::format("rollout weights ({} per device, engine of {} devices) and buffers ({}) exceed the engine's "
                              "budget of {} (memory_utilization {:g} x {}): no room for a KV cache; spread the engine "
                              "over more devices (rollout.tensor_parallel, possibly across nodes) or use a narrower format",
                              gb(rc.weight_bytes_per_device), s_.rollout.tensor_parallel, gb(s_.rollout.activation_buffer_bytes),
                              gb(budget), s_.rollout.memory_utilization, gb(dev.memory_bytes)),
                  budget,
                  rc.weight_bytes_per_device + s_.rollout.activation_buffer_bytes,
                  {{std::string(memory_tag_name(MemoryTag::kRolloutWeights)), rc.weight_bytes_per_device},
                   {std::string(memory_tag_name(MemoryTag::kRolloutBuffers)), s_.rollout.activation_buffer_bytes}}};
    return false;
  }
  kv_pool_bytes_ = kv_bytes;
  // Each attention DP rank caches its own sequences: the engine holds DP times one rank's tokens,
  // and one sequence has to fit in a rank.
  const int dp = s_.rollout.data_parallel;
  const double rank_capacity = std::floor(kv_bytes / rc.kv_bytes_per_token_device);
  r_.kv_capacity_tokens = rank_capacity * dp;
  const double longest = static_cast<double>(s_.workload.prompt_tokens.upper_bound() + s_.workload.response_tokens.upper_bound());
  if (longest > rank_capacity) {
    r_.oom = OomReport{Role::kRollout,
                       rollout_ledger().group(),
                       fmt::format("KV cache holds {:.0f} tokens per {}, less than one sequence of up to {:.0f} tokens "
                                   "(the engine refuses to start: max_model_len exceeds KV capacity)",
                                   rank_capacity, dp > 1 ? "attention DP rank" : "engine", longest),
                       kv_bytes,
                       longest * rc.kv_bytes_per_token_device,
                       {{"rollout_weights", rc.weight_bytes_per_device},
                        {std::string(memory_tag_name(MemoryTag::kKvCache)), kv_bytes},
                        {"rollout_buffers", s_.rollout.activation_buffer_bytes}}};
    return false;
  }
  return true;
}

void Simulation::finish_step(int k) {
  auto& rec = r_.steps[static_cast<std::size_t>(k)];
  rec.end = queue_.now();
  const auto& reqs = consumed_[static_cast<std::size_t>(k)];
  double sum = 0;
  for (const Request* q : reqs) {
    const int stale = k - q->version;
    sum += stale;
    rec.staleness_max = std::max(rec.staleness_max, stale);
    if (stale > 0) rec.stale_sequences++;
    rec.preemptions += q->preemptions;
    rec.interruptions += q->interruptions;
    rec.generated_tokens += q->response_tokens;
  }
  rec.staleness_mean = reqs.empty() ? 0.0 : sum / static_cast<double>(reqs.size());
  release_steps(k);
  if (progress_) progress_(k + 1, s_.steps);
}

// Synchronous schedule: rollout -> (sleep) -> train -> (wake) sync, strictly in sequence.
class Simulation::SyncSchedule {
 public:
  explicit SyncSchedule(Simulation& sim) : sim_(sim) {}
  void run() {
    sim_.queue_.schedule_at(0, [this] { step(0); });
    sim_.queue_.run();
  }

 private:
  void step(int k) {
    if (k >= sim_.s_.steps) return;
    sim_.r_.steps[static_cast<std::size_t>(k)].start = sim_.queue_.now();
    sim_.start_rollout(k, [this, k] { train(k); });
  }
  void train(int k) {
    auto stages = sim_.sleep_stages();
    for (auto& st : sim_.training_stages(k)) stages.push_back(std::move(st));
    sim_.run_stages(k, std::move(stages), 0, [this, k] { sync(k); });
  }
  void sync(int k) {
    sim_.run_stages(k, sim_.sync_stages(k), 0, [this, k] {
      sim_.finish_step(k);
      sim_.queue_.schedule_in(0, [this, k] { step(k + 1); });
    });
  }

  Simulation& sim_;
};

// verl one-step-off: rollout of step k+1 overlaps training of step k (weights one step stale);
// weight sync k waits for the trainer (train k done) and the rollout (k+1 done).
class Simulation::OneStepOffSchedule {
 public:
  explicit OneStepOffSchedule(Simulation& sim)
      : sim_(sim),
        rollout_done_(static_cast<std::size_t>(sim.s_.steps) + 1, false),
        train_done_(static_cast<std::size_t>(sim.s_.steps), false),
        sync_started_(static_cast<std::size_t>(sim.s_.steps), false) {}
  void run() {
    sim_.queue_.schedule_at(0, [this] { start_rollout(0); });
    sim_.queue_.run();
  }

 private:
  void start_rollout(int k) {
    if (k >= sim_.s_.steps) {
      rollout_done_[static_cast<std::size_t>(k)] = true;
      return;
    }
    sim_.start_rollout(k, [this, k] { on_rollout_done(k); });
  }
  void start_train(int k) {
    sim_.run_stages(k, sim_.training_stages(k), 0, [this, k] {
      train_done_[static_cast<std::size_t>(k)] = true;
      maybe_sync(k);
    });
  }
  void maybe_sync(int k) {
    const auto i = static_cast<std::size_t>(k);
    if (!train_done_[i] || !rollout_done_[i + 1] || sync_started_[i]) return;
    sync_started_[i] = true;
    sim_.run_stages(k, sim_.sync_stages(k), 0, [this, k] {
      sim_.finish_step(k);
      if (k + 1 < sim_.s_.steps) {
        sim_.r_.steps[static_cast<std::size_t>(k) + 1].start = sim_.r_.steps[static_cast<std::size_t>(k)].end;
        start_train(k + 1);
        start_rollout(k + 2);
      }
    });
  }
  void on_rollout_done(int k) {
    rollout_done_[static_cast<std::size_t>(k)] = true;
    if (k == 0) {
      start_train(0);
      start_rollout(1);
    } else {
      maybe_sync(k - 1);
    }
  }

  Simulation& sim_;
  std::vector<bool> rollout_done_;  // by step (one more: the rollout after the last step)
  std::vector<bool> train_done_;
  std::vector<bool> sync_started_;
};

void Simulation::run_sync_schedule() {
  SyncSchedule schedule(*this);
  schedule.run();
}

void Simulation::run_one_step_off() {
  OneStepOffSchedule schedule(*this);
  schedule.run();
}

// verl fully_async_policy (docs/advance/fully_async.md), with trigger_parameter_sync_step = 1
// and require_batches x ppo_mini_batch_size = one step's prompts:
//  - the Rollouter streams prompt groups (n samples each) into the engines, at most
//    engine_max_seqs() sequences outstanding per engine;
//  - between two weight updates it starts at most (1 + staleness) x B groups minus those
//    already generated or in flight (num_stale_samples), B = prompts per step;
//  - the Trainer takes the first B finished groups (FIFO), trains, then triggers the sync;
//  - sync without partial rollout: no new groups are started and the sync waits for the
//    groups in flight to finish; with partial rollout (and staleness > 0, as in verl) the
//    engines pause at once, keep the generated tokens, and continue after the update.
// The schedule's state lives in its members; engine callbacks and stage continuations call its
// methods.
class Simulation::AsyncSchedule {
 public:
  explicit AsyncSchedule(Simulation& sim)
      : sim_(sim),
        n_(sim.s_.workload.samples_per_prompt),
        batch_(sim.s_.workload.prompts_per_step),
        partial_(sim.s_.schedule.partial_rollout && sim.s_.schedule.staleness > 0),
        window_(static_cast<std::int64_t>(std::floor((1.0 + sim.s_.schedule.staleness) * batch_ + 1e-9))),
        quota_(window_) {}

  void run() {
    for (auto& e : sim_.engines_) {
      e->set_callbacks([this](Request* q) { on_finished(q); }, [this] { maybe_sync(); });
    }
    sim_.r_.steps[0].start = 0;
    sim_.queue_.schedule_at(0, [this] { dispatch(); });
    while (!finished_all_ && sim_.queue_.step()) {
    }
    sim_.r_.left_in_flight = 0;
    for (const auto& q : sim_.stream_) {
      if (q.step < 0) {
        sim_.r_.left_in_flight++;
        sim_.r_.left_in_flight_tokens += q.generated;
      }
    }
  }

 private:
  struct Group {
    std::int64_t first = 0;  // index in the run of its first request (Simulation::streamed)
    int done = 0;
  };

  void sample_group(std::int64_t g) {
    const auto& w = sim_.s_.workload;
    Rng rng(mix_seed(sim_.s_.seed ^ 0xA5A5A5A5A5A5A5A5ULL) + static_cast<std::uint64_t>(g));
    const std::int64_t prompt = w.prompt_tokens.sample(rng);
    Group grp;
    grp.first = sim_.stream_base_ + static_cast<std::int64_t>(sim_.stream_.size());
    for (int j = 0; j < n_; ++j) {
      Request q;
      q.group = g;
      q.index = j;
      q.prompt_tokens = prompt;
      q.response_tokens = w.response_tokens.sample(rng);
      q.version = sim_.version_;
      sim_.stream_.push_back(q);
    }
    groups_.push_back(grp);
  }

  // Starts groups while the window allows, each on the engine with the fewest outstanding
  // sequences that can take the whole group.
  void dispatch() {
    if (draining_ || finished_all_) return;
    auto& engines = sim_.engines_;
    while (started_ < quota_) {
      int best = -1;
      for (int e = 0; e < sim_.r_.engines; ++e) {
        const int o = engines[static_cast<std::size_t>(e)]->outstanding();
        if (o + n_ > sim_.s_.rollout.engine_max_seqs() && o > 0) continue;
        if (best < 0 || o < engines[static_cast<std::size_t>(best)]->outstanding()) best = e;
      }
      if (best < 0) return;
      sample_group(static_cast<std::int64_t>(groups_.size()));
      ++started_;
      ++in_flight_;
      for (int j = 0; j < n_; ++j) {
        engines[static_cast<std::size_t>(best)]->submit(&sim_.streamed(groups_.back().first + j));
      }
    }
  }

  void on_finished(Request* q) {
    Group& grp = groups_[static_cast<std::size_t>(q->group)];
    if (++grp.done == n_) {
      --in_flight_;
      ready_.push_back(q->group);
      try_train();
    }
    dispatch();
  }

  bool idle_all() const {
    for (const auto& e : sim_.engines_) {
      if (e->outstanding() > 0) return false;
    }
    return true;
  }

  // The trainer's wait for samples (a batch, or the drain before a sync): exposed rollout time.
  void record_wait(int k) {
    if (sim_.queue_.now() > waiting_since_)
      sim_.record_phase(k, Phase::kRollout, Role::kRollout, waiting_since_, sim_.queue_.now());
  }

  void begin_sync(int k) {
    record_wait(k);
    sim_.run_stages(k, sim_.sync_stages(k), 0, [this, k] { after_sync(k); });
  }

  void after_sync(int k) {
    sim_.finish_step(k);
    step_ = k + 1;
    trainer_busy_ = false;
    if (step_ >= sim_.s_.steps) {
      finished_all_ = true;
      return;
    }
    sim_.r_.steps[static_cast<std::size_t>(step_)].start = sim_.queue_.now();
    waiting_since_ = sim_.queue_.now();
    // New window: (1 + staleness) B minus what is already generated or in flight.
    quota_ = std::max<std::int64_t>(0, window_ - static_cast<std::int64_t>(ready_.size()) - in_flight_);
    started_ = 0;
    draining_ = false;
    for (auto& e : sim_.engines_) e->resume();
    dispatch();
    try_train();
  }

  void maybe_sync() {
    if (!draining_ || !trainer_busy_) return;
    if (!idle_all()) return;
    begin_sync(step_);
  }

  // Takes the first B finished groups as step k's batch and trains on it.
  void try_train() {
    if (trainer_busy_ || finished_all_ || static_cast<int>(ready_.size()) < batch_) return;
    trainer_busy_ = true;
    const int k = step_;
    auto& reqs = sim_.consumed_[static_cast<std::size_t>(k)];
    for (int i = 0; i < batch_; ++i) {
      const Group& grp = groups_[static_cast<std::size_t>(ready_.front())];
      ready_.pop_front();
      for (int j = 0; j < n_; ++j) {
        Request* q = &sim_.streamed(grp.first + j);
        q->step = k;
        q->index = i * n_ + j;
        reqs.push_back(q);
      }
    }
    sim_.batches_[static_cast<std::size_t>(k)] = sim_.batch_of(reqs);
    record_wait(k);
    sim_.run_stages(k, sim_.training_stages(k), 0, [this, k] { after_training(k); });
  }

  void after_training(int k) {
    waiting_since_ = sim_.queue_.now();
    draining_ = true;
    if (partial_) {
      for (auto& e : sim_.engines_) e->pause();
      begin_sync(k);
    } else {
      maybe_sync();
    }
  }

  Simulation& sim_;
  const int n_;                // samples per prompt (a group)
  const int batch_;            // groups per step (B)
  const bool partial_;         // partial rollout across weight updates
  const std::int64_t window_;  // groups a window may start: (1 + staleness) B
  std::vector<Group> groups_;
  std::deque<std::int64_t> ready_;  // finished groups, FIFO
  std::int64_t quota_ = 0, started_ = 0, in_flight_ = 0;
  bool draining_ = false;  // a sync is due: start no group
  bool finished_all_ = false;
  int step_ = 0;
  bool trainer_busy_ = false;
  TimeNs waiting_since_ = 0;
};

void Simulation::run_async() {
  AsyncSchedule schedule(*this);
  schedule.run();
}

// What a user can change when a colocated device runs out of memory while the engine runs with
// the trainer's state resident beside it (the actor's and a critic's optimizer states, the actor's
// and the reference's parameters): the keys that move that state to the host (those not set
// already), and the engine's share of the device. Empty for any other out-of-memory.
std::string Simulation::colocated_oom_remedy(const MemoryLedger::Oom& o) const {
  if (!colocated() || o.phase != Role::kRollout) return "";
  const auto bytes = [&](MemoryTag t) {
    const auto it = o.breakdown.find(std::string(memory_tag_name(t)));
    return it == o.breakdown.end() ? 0.0 : it->second;
  };
  std::vector<std::string> resident, keys;
  if (const double b = bytes(MemoryTag::kOptimizer) + bytes(MemoryTag::kCriticOptimizer); b > 0) {
    resident.push_back(fmt::format("optimizer states ({})", gb(b)));
    keys.emplace_back("training.optimizer.offload");
  }
  if (const double b = bytes(MemoryTag::kTrainParams) + bytes(MemoryTag::kReferenceParams); b > 0) {
    resident.push_back(fmt::format("parameters ({})", gb(b)));
    if (!s_.training.param_offload) keys.emplace_back("training.param_offload");
  }
  if (resident.empty()) return "";
  const std::string share =
      fmt::format("a lower rollout.memory_utilization (now {}) leaves them room", s_.rollout.memory_utilization);
  return fmt::format(
      "; the trainer's {} stay on the device while the engine runs: {}", fmt::join(resident, " and "),
      keys.empty() ? share : fmt::format("setting {} moves them to the host, or {}", fmt::join(keys, " and "), share));
}

// The first out-of-memory any ledger met, as a result, and the peaks per role.
void Simulation::report_memory() {
  for (const auto& l : ledgers_) {
    if (l.oom() && !r_.oom) {
      const auto& o = *l.oom();
      double total = 0;
      for (const auto& [_, b] : o.breakdown) total += b;
      const bool rollout_role = colocated() ? o.phase == Role::kRollout : &l == &ledgers_.front();
      r_.oom = OomReport{rollout_role ? Role::kRollout : Role::kTraining,
                         l.group(),
                         fmt::format("{} needs {} on a {} device during {} (allocating {} of '{}'){}", l.group(), gb(total),
                                     gb(o.capacity_bytes), o.phase ? role_name(*o.phase) : "init", gb(o.requested_bytes),
                                     memory_tag_name(o.tag), colocated_oom_remedy(o)),
                         o.capacity_bytes,
                         total,
                         o.breakdown};
    }
  }
  if (colocated()) {
    r_.peak_rollout_bytes = ledgers_.front().peak_in(Role::kRollout);
    r_.peak_training_bytes = ledgers_.front().peak_in(Role::kTraining);
  } else {
    r_.peak_rollout_bytes = ledgers_.front().peak();
    r_.peak_training_bytes = train_ledger().peak();
    if (critic_group_ == Group::kCritic) r_.peak_critic_bytes = ledger(Group::kCritic).peak();
    if (reward_group_ == Group::kRewardModel) r_.peak_reward_model_bytes = ledger(Group::kRewardModel).peak();
    if (reference_group_ == Group::kReference) r_.peak_reference_bytes = ledger(Group::kReference).peak();
  }
}

// One memory ledger per device group: the colocated devices, or the engines' and the trainer's,
// and a critic's, a reward model's and a reference's own groups.
void Simulation::make_ledgers() {
  const double capacity = s_.cluster.device.memory_bytes;
  if (colocated()) {
    ledgers_.emplace_back(fmt::format("colocated ({} devices)", s_.cluster.devices()), capacity);
    return;
  }
  ledgers_.emplace_back(fmt::format("rollout ({} devices)", s_.placement.rollout_devices), capacity);
  ledgers_.emplace_back(fmt::format("training ({} devices)", s_.placement.train_devices), capacity);
  for (const Group g : {Group::kCritic, Group::kRewardModel, Group::kReference}) {
    if (critic_group_ != g && reward_group_ != g && reference_group_ != g) continue;
    group_ledger_[static_cast<std::size_t>(g)] = ledgers_.size();
    ledgers_.emplace_back(fmt::format("{} ({} devices)", group_name(g), group_devices(g)), capacity);
    ledgers_.back().set_phase(Role::kTraining);
  }
}

// Each step's batch shape (sync schedules: drawn now, the requests themselves again when the
// step starts) and the training memory of the largest, for every model that trains or scores.
void Simulation::size_training_memory() {
  const bool async = s_.schedule.mode == ScheduleMode::kAsync;
  TrainBatch largest;
  for (int k = 0; k < s_.steps; ++k) {
    r_.steps[static_cast<std::size_t>(k)].step = k;
    if (async) continue;
    std::vector<Request> reqs = sample_requests(k);
    std::vector<Request*> ptrs;
    ptrs.reserve(reqs.size());
    for (auto& q : reqs) ptrs.push_back(&q);
    const TrainBatch& b = batches_[static_cast<std::size_t>(k)] = batch_of(ptrs);
    largest.max_sequence = std::max(largest.max_sequence, b.max_sequence);
    largest.padded_row = std::max(largest.padded_row, b.padded_row);
  }
  if (async) {
    // Batches are formed as groups finish: size the activation peak for the longest possible sequence.
    largest.max_sequence =
        static_cast<double>(s_.workload.prompt_tokens.upper_bound() + s_.workload.response_tokens.upper_bound());
  }
  r_.train_memory = trainer_.memory(largest);
  if (critic_) critic_memory_ = critic_->memory(largest);
  if (reward_) reward_memory_ = reward_->memory(largest);
  if (reference_cost_) reference_memory_ = reference_cost_->memory(largest);
}

// What is resident from t = 0: the actor's parameters and optimizer states (the latter on the
// host when optimizer.offload is set, brought in around the actor update; parameters on the host
// when training.param_offload is set, brought in for training and sync), the critic, reward model
// and reference on their devices (the critic's optimizer states on the host when the actor's
// are), and a disaggregated engine's weights, KV-cache pool and buffers.
void Simulation::allocate_resident_state() {
  auto& tl = train_ledger();
  tl.set_phase(Role::kTraining);
  if (!s_.training.param_offload) allocate_params();
  const bool optimizer_resident = !s_.training.optimizer.offload && !trainer_.cpu_optimizer();
  if (optimizer_resident) optimizer_ = tl.allocate(0, MemoryTag::kOptimizer, r_.train_memory.optimizer);
  if (critic_) {
    auto& cl = ledger(critic_group_);
    cl.allocate(0, MemoryTag::kCriticParams, critic_memory_.params);
    if (optimizer_resident) cl.allocate(0, MemoryTag::kCriticOptimizer, critic_memory_.optimizer);
  }
  if (reward_) ledger(reward_group_).allocate(0, MemoryTag::kRewardParams, reward_memory_.reference);
  if (reference_cost_) ledger(reference_group_).allocate(0, MemoryTag::kReferenceParams, reference_memory_.reference);
  if (!colocated()) {
    rollout_ledger().set_phase(Role::kRollout);
    ensure_rollout_weights();
    rollout_ledger().allocate(0, MemoryTag::kKvCache, kv_pool_bytes_);
    rollout_ledger().allocate(0, MemoryTag::kRolloutBuffers, s_.rollout.activation_buffer_bytes);
  }
}

// Stops every engine at the end of the last step (async: work in flight is cut there), so busy
// time is accounted up to the wall-clock end, and adds up the engines' statistics.
void Simulation::collect_engine_stats() {
  for (std::size_t e = 0; e < engines_.size(); ++e) {
    engines_[e]->pause();
    const auto& st = engines_[e]->stats();
    r_.engine_busy_s[e] += st.busy_s;
    r_.max_running = std::max(r_.max_running, st.max_running);
    r_.kv_limited = r_.kv_limited || st.kv_limited;
    r_.decode_memory_bound_s += st.memory_bound_s;
    r_.decode_compute_bound_s += st.compute_bound_s;
    r_.tokens_generated += st.tokens_generated;
    r_.tokens_recomputed += st.tokens_recomputed;
  }
}

SimResult Simulation::run() {
  r_.rollout_cost = RolloutCostModel::build(s_);
  r_.engines = s_.placement.rollout_devices / s_.rollout.engine_devices();
  make_ledgers();
  r_.sync =
      trainer_.weight_sync(models::weight_bytes(s_.model, s_.rollout.precision), s_.placement.rollout_devices,
                           s_.rollout.tensor_parallel, r_.rollout_cost.wide_ep ? r_.rollout_cost.weight_bytes_per_device : 0.0);
  step_requests_.resize(static_cast<std::size_t>(s_.steps));
  batches_.resize(static_cast<std::size_t>(s_.steps));
  consumed_.resize(static_cast<std::size_t>(s_.steps));
  r_.steps.resize(static_cast<std::size_t>(s_.steps));
  size_training_memory();
  if (!check_fit()) {
    r_.ledgers = std::move(ledgers_);
    r_.steps.clear();
    return std::move(r_);
  }
  for (int e = 0; e < r_.engines; ++e) {
    engines_.push_back(std::make_unique<RolloutEngine>(r_.rollout_cost, queue_, sink_, e, r_.kv_capacity_tokens,
                                                       s_.rollout.engine_max_seqs(), s_.output.trace && e < kMaxTracedEngines,
                                                       s_.rollout.generate_batch));
  }
  r_.engine_busy_s.assign(static_cast<std::size_t>(r_.engines), 0.0);
  allocate_resident_state();
  switch (s_.schedule.mode) {
    case ScheduleMode::kSync:
      run_sync_schedule();
      break;
    case ScheduleMode::kOneStepOff:
      run_one_step_off();
      break;
    case ScheduleMode::kAsync:
      run_async();
      break;
  }
  r_.events = queue_.events_run();
  r_.wall_s = r_.steps.empty() ? 0.0 : to_seconds(r_.steps.back().end);
  collect_engine_stats();
  // Tear-down: release what stays resident across steps, so every allocation has its free.
  for (auto& l : ledgers_) l.free_all(queue_.now());
  report_memory();
  release_steps(s_.steps - 1);
  r_.ledgers = std::move(ledgers_);
  return std::move(r_);
}

}  // namespace

double SimResult::rollout_idle_ratio() const {
  if (wall_s <= 0 || engine_busy_s.empty()) return 0.0;
  double busy = 0;
  for (double b : engine_busy_s) busy += b;
  return std::max(0.0, 1.0 - busy / (wall_s * static_cast<double>(engine_busy_s.size())));
}

double SimResult::trainer_idle_ratio() const {
  if (wall_s <= 0) return 0.0;
  return std::max(0.0, 1.0 - trainer_busy_s / wall_s);
}

std::vector<Phase> phases_of(const Scenario& s) {
  std::vector<Phase> out;
  for (const Phase p : kPhases) {
    if (p == Phase::kReward && !s.algorithm.reward_model) continue;
    if ((p == Phase::kValues || p == Phase::kCriticUpdate) && !s.algorithm.critic) continue;
    out.push_back(p);
  }
  return out;
}

SimResult simulate(const Scenario& s, TraceSink& sink, const ProgressFn& progress, const RequestFn& on_request) {
  Simulation sim(s, sink, progress, on_request);
  return sim.run();
}

}  // namespace rlsim::sim
