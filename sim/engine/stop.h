// Stopping a long run on request: SIGINT or SIGTERM sets a flag that the event loop (and other
// long loops: plan points, drift and train steps) checks at its next boundary, where it throws
// Interrupted. The outputs under construction are temporary directories that their writer
// removes as the exception passes (analysis/output_dir.h), so an interrupted run leaves the
// previous output at its path and nothing half-written.
#pragma once

#include <stdexcept>

namespace rlsim::sim {

/// Thrown at the next boundary after SIGINT or SIGTERM. The process should exit 128 + signal
/// (130 for SIGINT, 143 for SIGTERM), as a shell does for a process killed by it.
class Interrupted : public std::runtime_error {
 public:
  explicit Interrupted(int signal_number);
  int signal_number() const { return signal_; }

 private:
  int signal_;
};

/// Installs the SIGINT and SIGTERM handlers (async-signal-safe: they only store the signal
/// number). A second signal of either kind restores the default action, so pressing Ctrl-C
/// twice kills the process at once.
void install_stop_handlers();

/// The signal that asked to stop, 0 when none did.
int stop_requested();

/// Throws Interrupted when a stop was requested; a relaxed atomic load otherwise.
inline void check_stop() {
  if (const int s = stop_requested(); s != 0) throw Interrupted(s);
}

/// Sets the request as the handler does (for tests: a stop without a signal); 0 clears it.
void request_stop(int signal_number);

}  // namespace rlsim::sim
