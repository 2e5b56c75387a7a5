// A simulation with its consumed requests kept in memory, for tests that check every request:
// simulate() hands requests out as their steps end and keeps none itself.
#pragma once

#include <vector>

#include "sim/pipeline/pipeline.h"

namespace rlsim::sim::testing {

/// simulate(s, sink) and the requests it passed to its RequestFn, in the order it passed them.
struct RecordedRun {
  SimResult result;
  std::vector<Request> requests;
};

inline RecordedRun simulate_recorded(const Scenario& s, TraceSink& sink) {
  RecordedRun run;
  run.result = simulate(s, sink, {}, [&](const Request& q) { run.requests.push_back(q); });
  return run;
}

}  // namespace rlsim::sim::testing
