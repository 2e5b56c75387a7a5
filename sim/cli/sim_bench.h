// `rlsim bench sim`: the event engine's speed on a large asynchronous pipeline, and how the cost
// of `rlsim run` (wall time and peak memory) grows with the number of requests simulated.
#pragma once

#include <cstdint>
#include <iosfwd>

namespace rlsim::cli {

/// Prints, for scenarios/bench-sim.yaml (NullSink, no outputs), `repeat` runs' wall time, events
/// and events/s; then `rlsim run`'s cost on the default scenario at 10^4, 10^5, ... requests up to
/// `max_requests` (none below 10^4) (batches of 10^4 sequences: 1,250 prompts x 8 samples, one step per
/// 10^4 requests; requests.csv and trace.json streamed to a temporary directory, no plots), each
/// in a child process so its peak RSS (wait4's ru_maxrss) is its own: wall s, requests/s, peak
/// RSS, bytes per request, and the growth of the cost per request from 10^5 to 10^6 (issue 23's
/// bound: at most 20 %). Throws ScenarioError when a scenario cannot be loaded, OutputError when
/// the temporary directory cannot be made.
int bench_sim(int repeat, std::int64_t max_requests, std::ostream& out);

}  // namespace rlsim::cli
