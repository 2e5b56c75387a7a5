#include "sim/engine/event_queue.h"

#include <algorithm>
#include <stdexcept>

#include "sim/engine/stop.h"

namespace rlsim::sim {

EventId EventQueue::schedule_at(TimeNs at, Callback fn) {
  if (at < now_) throw std::invalid_argument("EventQueue: cannot schedule an event in the past");
  if (!fn) throw std::invalid_argument("EventQueue: empty callback");
  const EventId id = callbacks_.size();
  callbacks_.push_back(std::move(fn));
  heap_.push_back(Entry{at, next_seq_++, id});
  std::push_heap(heap_.begin(), heap_.end(), later);
  ++live_;
  return id;
}

bool EventQueue::cancel(EventId id) {
  if (id >= callbacks_.size() || !callbacks_[id]) return false;
  callbacks_[id] = nullptr;
  --live_;
  return true;
}

bool EventQueue::pop_live(Entry& out) {
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    out = heap_.back();
    heap_.pop_back();
    if (callbacks_[out.id]) return true;  // skip cancelled entries
  }
  return false;
}

bool EventQueue::step() {
  Entry e{};
  if (!pop_live(e)) return false;
  now_ = e.time;
  Callback fn = std::move(callbacks_[e.id]);
  callbacks_[e.id] = nullptr;
  --live_;
  ++events_run_;
  fn();
  return true;
}

std::uint64_t EventQueue::run(TimeNs until) {
  std::uint64_t n = 0;
  while (live_ > 0) {
    // Peek: drop cancelled entries on top so the time check sees a live event.
    while (!heap_.empty() && !callbacks_[heap_.front().id]) {
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
