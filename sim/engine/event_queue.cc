#include "sim/engine/event_queue.h"

#include <algorithm>
#include <stdexcept>

#include "sim/engine/stop.h"

namespace rlsim::sim {

EventId EventQueue::schedule_at(TimeNs at, Callback fn) {
  if (at < now_) throw std::invalid_argument("EventQueue: cannot schedule an event in the past");
  if (!fn) throw std::invalid_argument("EventQueue: empty callback");
  std::size_t slot = slots_.size();
  if (free_slots_.empty()) {
    slots_.emplace_back();
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  slots_[slot].fn = std::move(fn);
  const EventId id = (static_cast<EventId>(slots_[slot].generation) << kSlotBits) | slot;
  heap_.push_back(Entry{at, next_seq_++, id});
  std::push_heap(heap_.begin(), heap_.end(), later);
  ++live_;
  return id;
}

bool EventQueue::is_live(EventId id) const {
  const std::size_t slot = slot_of(id);
  return slot < slots_.size() && slots_[slot].generation == (id >> kSlotBits) && slots_[slot].fn;
}

EventQueue::Callback EventQueue::release(EventId id) {
  Slot& s = slots_[slot_of(id)];
  Callback fn = std::move(s.fn);
  s.fn = nullptr;
  ++s.generation;
  free_slots_.push_back(slot_of(id));
  --live_;
  return fn;
}

bool EventQueue::cancel(EventId id) {
  if (!is_live(id)) return false;
  release(id);
  return true;
}

bool EventQueue::pop_live(Entry& out) {
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    out = heap_.back();
    heap_.pop_back();
    if (is_live(out.id)) return true;  // skip cancelled entries
  }
  return false;
}

bool EventQueue::step() {
  Entry e{};
  if (!pop_live(e)) return false;
  now_ = e.time;
  Callback fn = release(e.id);
  ++events_run_;
  fn();
  return true;
}

std::uint64_t EventQueue::run(TimeNs until) {
  std::uint64_t n = 0;
  while (live_ > 0) {
    // Peek: drop cancelled entries on top so the time check sees a live event.
    while (!heap_.empty() && !is_live(heap_.front().id)) {
      std::pop_heap(heap_.begin(), heap_.end(), later);
      heap_.pop_back();
    }
    if (heap_.empty() || heap_.front().time > until) break;
    check_stop();  // SIGINT / SIGTERM: stop at this event boundary
    step();
    ++n;
  }
  if (until != kTimeNever && now_ < until) now_ = until;
  return n;
}

}  // namespace rlsim::sim
