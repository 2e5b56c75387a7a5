#include "sim/engine/stop.h"

#include <atomic>
#include <csignal>
#include <string>

namespace rlsim::sim {
namespace {

// Lock-free, so storing from a signal handler is async-signal-safe.
std::atomic<int> g_stop{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_stop_signal(int s) {
  if (g_stop.load(std::memory_order_relaxed) != 0) std::signal(s, SIG_DFL);  // the second signal: default action next time
  g_stop.store(s, std::memory_order_relaxed);
}

}  // namespace

Interrupted::Interrupted(int signal_number)
    : std::runtime_error(signal_number == SIGTERM  ? std::string("interrupted by SIGTERM")
                         : signal_number == SIGINT ? std::string("interrupted by SIGINT")
                                                   : "interrupted by signal " + std::to_string(signal_number)),
      signal_(signal_number) {}

void install_stop_handlers() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

int stop_requested() { return g_stop.load(std::memory_order_relaxed); }

void request_stop(int signal_number) { g_stop.store(signal_number, std::memory_order_relaxed); }

}  // namespace rlsim::sim
