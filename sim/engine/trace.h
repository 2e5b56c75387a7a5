// The trace-sink interface: what the simulation reports as it runs. The pipeline writes to a
// TraceSink; analysis/ provides a Chrome-trace writer, and tests use RecordingSink.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "sim/engine/time.h"

namespace rlsim::sim {

/// One span of activity on a track (a device group, an engine, the trainer).
struct Span {
  std::string track;     // e.g. "rollout/engine 3", "trainer"
  std::string name;      // e.g. "decode b=64", "actor_update"
  std::string category;  // e.g. "rollout", "train", "sync"
  TimeNs start = 0;
  TimeNs duration = 0;
  std::vector<std::pair<std::string, double>> args;  // numeric annotations
  bool detail = false;  // one engine iteration (a writer may drop these first; phases are never details)
};

/// A sampled value over time (memory in bytes, running sequences).
struct CounterSample {
  std::string track;
  std::string name;
  TimeNs time = 0;
  double value = 0;
};

/// Receives spans and counter samples in the order the simulation produces them.
class TraceSink {
 public:
  virtual ~TraceSink() = default;
  virtual void span(const Span& s) = 0;
  virtual void counter(const CounterSample& c) = 0;
};

/// Discards everything (when no trace is requested).
class NullSink final : public TraceSink {
 public:
  void span(const Span&) override {}
  void counter(const CounterSample&) override {}
};

/// Keeps everything in memory (tests, and the writers that need all events before output).
class RecordingSink final : public TraceSink {
 public:
  void span(const Span& s) override { spans.push_back(s); }
  void counter(const CounterSample& c) override { counters.push_back(c); }
  std::vector<Span> spans;
  std::vector<CounterSample> counters;
};

}  // namespace rlsim::sim
