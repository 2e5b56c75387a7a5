#include "sim/engine/resource.h"

#include <stdexcept>

namespace rlsim::sim {

Resource::Resource(EventQueue& queue, std::string name, std::int64_t capacity)
    : queue_(queue), name_(std::move(name)), capacity_(capacity) {
  if (capacity < 1) throw std::invalid_argument("Resource " + name_ + ": capacity must be >= 1");
}

void Resource::acquire(std::int64_t units, Granted on_grant) {
  if (units < 1 || units > capacity_) {
    throw std::invalid_argument("Resource " + name_ + ": request outside 1..capacity");
  }
  waiters_.push_back(Waiter{units, std::move(on_grant)});
  grant_waiters();
}

void Resource::release(std::int64_t units) {
  if (units < 0 || units > in_use_) {
    throw std::logic_error("Resource " + name_ + ": release of more units than are in use");
  }
  in_use_ -= units;
  grant_waiters();
}

void Resource::grant_waiters() {
  while (!waiters_.empty() && waiters_.front().units <= capacity_ - in_use_) {
    Waiter w = std::move(waiters_.front());
    waiters_.pop_front();
    in_use_ += w.units;
    queue_.schedule_in(0, std::move(w.on_grant));
  }
}

}  // namespace rlsim::sim
