// Per-device memory ledger: tagged allocations over simulated time. One ledger stands for one
// device of a symmetric group (all colocated devices, or one rollout / training device).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/engine/time.h"
#include "sim/pipeline/labels.h"

namespace rlsim::sim {

/// Tracks live allocations (bytes, by tag) on one device against its capacity. Exceeding the
/// capacity is recorded as an out-of-memory result (first occurrence, with the breakdown), never
/// an exception: not fitting is an answer the user asked for.
class MemoryLedger {
 public:
  using AllocId = std::uint64_t;

  struct Event {
    TimeNs time;
    MemoryTag tag;
    double delta_bytes;  // + allocate, - free
    double total_bytes;  // in use after the event
  };

  struct Oom {
    TimeNs time = 0;
    std::optional<Role> phase;  // the role active when it happened; none: before the first phase
    MemoryTag tag;              // the allocation that did not fit
    double requested_bytes = 0;
    double capacity_bytes = 0;
    std::map<std::string, double> breakdown;  // live bytes by tag name, including the request
  };

  /// `capacity_bytes` > 0 (std::invalid_argument otherwise).
  MemoryLedger(std::string group, double capacity_bytes);

  /// Records an allocation of `bytes` (>= 0) under `tag` at time `t` (non-decreasing across calls).
  AllocId allocate(TimeNs t, MemoryTag tag, double bytes);

  /// Frees an allocation; throws std::logic_error for an unknown or already freed id.
  void free(TimeNs t, AllocId id);

  /// Frees every live allocation at time `t` (end of simulation), in allocation order.
  void free_all(TimeNs t);

  /// Sets the role that subsequent peaks are attributed to (kRollout or kTraining).
  void set_phase(Role phase) { phase_ = phase; }

  double in_use() const { return in_use_; }
  double capacity() const { return capacity_; }
  double peak() const { return peak_; }
  /// Peak in-use bytes while `phase` was set (0 if never).
  double peak_in(Role phase) const { return phase_peak_[static_cast<std::size_t>(phase)]; }
  /// Live bytes by tag name at the overall peak.
  const std::map<std::string, double>& peak_breakdown() const { return peak_breakdown_; }
  std::map<std::string, double> live_breakdown() const;
  std::size_t live_allocations() const { return live_.size(); }
  const std::optional<Oom>& oom() const { return oom_; }
  const std::vector<Event>& events() const { return events_; }
  const std::string& group() const { return group_; }

 private:
  struct Alloc {
    MemoryTag tag;
    double bytes;
  };
  std::string group_;
  double capacity_;
  double in_use_ = 0;
  double peak_ = 0;
  std::optional<Role> phase_;
  std::array<double, kRoleNames.size()> phase_peak_{};
  std::map<std::string, double> peak_breakdown_;
  std::map<AllocId, Alloc> live_;
  AllocId next_id_ = 0;
  std::optional<Oom> oom_;
  std::vector<Event> events_;
};

}  // namespace rlsim::sim
