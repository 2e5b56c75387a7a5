// The discrete-event core: a binary min-heap of events ordered by (time, sequence number).
//
// Processes are plain callbacks, not C++20 coroutines. Why: the pipeline advances time
// analytically between batch changes, so a "process" (a rollout engine, the trainer) is a small
// state machine whose next event is computed, not awaited; callbacks keep that state explicit in
// the object that owns it, cost no coroutine-frame allocation per event, and make cancellation a
// matter of one id. A coroutine wrapper would add an awaitable type and frame lifetimes with no
// scheduling power that callbacks lack.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sim/engine/time.h"

namespace rlsim::sim {

/// Identifies a scheduled event, for cancellation. Ids are never reused within one queue.
using EventId = std::uint64_t;

/// Time-ordered event queue.
///
/// Ordering: by time, then by the order in which events were scheduled (a monotonically
/// increasing sequence number), so events at equal times run first-scheduled-first and a run is
/// deterministic. Cancellation is lazy: a cancelled event stays in the heap and is skipped when
/// popped (O(log n) schedule and pop, O(1) cancel).
class EventQueue {
 public:
  using Callback = std::function<void()>;

  /// Schedules `fn` at absolute time `at`. Throws std::invalid_argument if `at` is earlier than
  /// the current time (the past cannot be changed) or `fn` is empty.
  EventId schedule_at(TimeNs at, Callback fn);

  /// Schedules `fn` `delay` nanoseconds after now (delay >= 0, else std::invalid_argument).
  EventId schedule_in(TimeNs delay, Callback fn) { return schedule_at(now_ + delay, std::move(fn)); }

  /// Cancels a pending event. Returns false if it already ran, was already cancelled or is unknown.
  bool cancel(EventId id);

  /// Runs events in order until the queue is empty or the next event is later than `until`
  /// (then the clock stops at `until`). Returns the number of events run. Throws Interrupted
  /// (sim/engine/stop.h) before the next event once SIGINT or SIGTERM asked to stop.
  std::uint64_t run(TimeNs until = kTimeNever);

  /// Runs exactly one event if any is pending; returns false when none is.
  bool step();

  TimeNs now() const { return now_; }
  bool empty() const { return live_ == 0; }
  std::size_t pending() const { return live_; }
  std::uint64_t events_run() const { return events_run_; }

 private:
  struct Entry {
    TimeNs time;
    std::uint64_t seq;
    EventId id;
  };
  // std::push_heap builds a max-heap; "later" compares greater so the earliest is on top.
  static bool later(const Entry& a, const Entry& b) { return a.time != b.time ? a.time > b.time : a.seq > b.seq; }
  bool pop_live(Entry& out);

  // A callback's place. An EventId is (generation << 32) | slot: a slot is reused once its event
  // ran or was cancelled, with the generation bumped, so memory is bounded by the events pending,
  // not by the events of the whole run, and a stale id (or heap entry) no longer matches.
  struct Slot {
    Callback fn;
    std::uint32_t generation = 0;
  };
  static constexpr int kSlotBits = 32;
  static std::size_t slot_of(EventId id) { return static_cast<std::size_t>(id & ((EventId{1} << kSlotBits) - 1)); }
  bool is_live(EventId id) const;
  Callback release(EventId id);  // takes the callback out and frees the slot

  std::vector<Entry> heap_;
  std::vector<Slot> slots_;
  std::vector<std::size_t> free_slots_;
  TimeNs now_ = 0;
  std::uint64_t next_seq_ = 0;
  std::size_t live_ = 0;
  std::uint64_t events_run_ = 0;
};

}  // namespace rlsim::sim
