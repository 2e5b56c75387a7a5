// A counted resource with a FIFO wait queue (devices of a pool, KV blocks, link slots).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>

#include "sim/engine/event_queue.h"

namespace rlsim::sim {

/// `capacity` identical units. acquire() grants immediately when enough units are free and no
/// earlier request waits (strict FIFO: a large request at the head blocks later small ones, so
/// nothing starves); otherwise the request waits. release() returns units and grants waiting
/// requests in order, each through an event at the current time (so grants interleave with
/// other same-time events in scheduling order, deterministically).
class Resource {
 public:
  using Granted = std::function<void()>;

  /// Throws std::invalid_argument when capacity < 1.
  Resource(EventQueue& queue, std::string name, std::int64_t capacity);

  /// Requests `units` (1..capacity, else std::invalid_argument); `on_grant` runs when granted.
  void acquire(std::int64_t units, Granted on_grant);

  /// Returns `units` previously granted; throws std::logic_error if more than in use.
  void release(std::int64_t units);

  std::int64_t capacity() const { return capacity_; }
  std::int64_t in_use() const { return in_use_; }
  std::size_t waiting() const { return waiters_.size(); }
  const std::string& name() const { return name_; }

 private:
  void grant_waiters();
  struct Waiter {
    std::int64_t units;
    Granted on_grant;
  };
  EventQueue& queue_;
  std::string name_;
  std::int64_t capacity_;
  std::int64_t in_use_ = 0;
  std::deque<Waiter> waiters_;
};

}  // namespace rlsim::sim
