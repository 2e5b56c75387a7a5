// Per-device memory ledger: tagged allocations over simulated time. One ledger stands for one
// device of a symmetric group (all colocated devices, or one rollout / training device).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/engine/time.h"

namespace rlsim::sim {

/// Tracks live allocations (bytes, by tag) on one device against its capacity. Exceeding the
/// capacity is recorded as an out-of-memory result (first occurrence, with the breakdown), never
/// an exception: not fitting is an answer the user asked for.
class MemoryLedger {
 public:
  using AllocId = std::uint64_t;

  struct Event {
    TimeNs time;
    std::string tag;
    double delta_bytes;  // + allocate, - free
    double total_bytes;  // in use after the event
  };

  struct Oom {
    TimeNs time = 0;
    std::string phase;  // phase label active when it happened
    std::string tag;    // the allocation that did not fit
    double requested_bytes = 0;
    double capacity_bytes = 0;
    std::map<std::string, double> breakdown;  // live bytes by tag, including the request
  };

  /// `capacity_bytes` > 0 (std::invalid_argument otherwise).
  MemoryLedger(std::string group, double capacity_bytes);

  /// Records an allocation of `bytes` (>= 0) under `tag` at time `t` (non-decreasing across calls).
  AllocId allocate(TimeNs t, const std::string& tag, double bytes);

  /// Frees an allocation; throws std::logic_error for an unknown or already freed id.
  void free(TimeNs t, AllocId id);

  /// Frees every live allocation at time `t` (end of simulation), in allocation order.
  void free_all(TimeNs t);

  /// Sets the phase label that subsequent peaks are attributed to (e.g. "rollout", "training").
  void set_phase(const std::string& phase) { phase_ = phase; }

  double in_use() const { return in_use_; }
  double capacity() const { return capacity_; }
  double peak() const { return peak_; }
  /// Peak in-use bytes while `phase` was set (0 if never).
  double peak_in(const std::string& phase) const;
  /// Live bytes by tag at the overall peak.
  const std::map<std::string, double>& peak_breakdown() const { return peak_breakdown_; }
  std::map<std::string, double> live_breakdown() const;
  std::size_t live_allocations() const { return live_.size(); }
  const std::optional<Oom>& oom() const { return oom_; }
  const std::vector<Event>& events() const { return events_; }
  const std::string& group() const { return group_; }

 private:
  struct Alloc {
    std::string tag;
    double bytes;
  };
  std::string group_;
  double capacity_;
  double in_use_ = 0;
  double peak_ = 0;
  std::string phase_ = "init";
  std::map<std::string, double> phase_peak_;
  std::map<std::string, double> peak_breakdown_;
  std::map<AllocId, Alloc> live_;
  AllocId next_id_ = 0;
  std::optional<Oom> oom_;
  std::vector<Event> events_;
};

}  // namespace rlsim::sim
