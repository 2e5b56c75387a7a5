#include "sim/pipeline/memory_ledger.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace rlsim::sim {

MemoryLedger::MemoryLedger(std::string group, double capacity_bytes) : group_(std::move(group)), capacity_(capacity_bytes) {
  if (!(capacity_bytes > 0)) throw std::invalid_argument("MemoryLedger: capacity must be positive");
}

MemoryLedger::AllocId MemoryLedger::allocate(TimeNs t, MemoryTag tag, double bytes) {
  if (!(bytes >= 0)) throw std::invalid_argument("MemoryLedger: negative allocation for " + std::string(memory_tag_name(tag)));
  const AllocId id = next_id_++;
  live_.emplace(id, Alloc{tag, bytes});
  in_use_ += bytes;
  events_.push_back(Event{t, tag, bytes, in_use_});
  if (phase_) {
    double& pp = phase_peak_[static_cast<std::size_t>(*phase_)];
    pp = std::max(pp, in_use_);
  }
  if (in_use_ > peak_) {
    peak_ = in_use_;
    peak_breakdown_ = live_breakdown();
  }
  if (in_use_ > capacity_ && !oom_) {
    oom_ = Oom{t, phase_, tag, bytes, capacity_, live_breakdown()};
  }
  return id;
}

void MemoryLedger::free(TimeNs t, AllocId id) {
  const auto it = live_.find(id);
  if (it == live_.end()) throw std::logic_error("MemoryLedger: free of an unknown or freed allocation");
  in_use_ -= it->second.bytes;
  if (in_use_ < 0 && in_use_ > -1e-3) in_use_ = 0;  // floating-point residue of many +/- pairs
  events_.push_back(Event{t, it->second.tag, -it->second.bytes, in_use_});
  live_.erase(it);
  if (live_.empty()) in_use_ = 0;
}

void MemoryLedger::free_all(TimeNs t) {
  while (!live_.empty()) free(t, live_.begin()->first);
}

std::map<std::string, double> MemoryLedger::live_breakdown() const {
  std::map<std::string, double> out;
  for (const auto& [_, a] : live_) out[std::string(memory_tag_name(a.tag))] += a.bytes;
  return out;
}

}  // namespace rlsim::sim
