// How the rlsim executable words what it prints to stderr, in one place.
#pragma once

#include <exception>
#include <string>

namespace rlsim::cli {

/// The line reporting bad input (exit status 2): "rlsim: error: WHAT\n".
inline std::string input_error_line(const std::exception& e) { return std::string("rlsim: error: ") + e.what() + "\n"; }

/// The line reporting an output that could not be written (exit status 4): "rlsim: error: WHAT\n",
/// WHAT naming the path and the system's reason.
inline std::string output_error_line(const std::exception& e) { return std::string("rlsim: error: ") + e.what() + "\n"; }

/// The line reporting a stop by SIGINT / SIGTERM (exit status 130 / 143).
inline std::string interrupted_line(const std::exception& e) {
  return std::string("rlsim: ") + e.what() + "; the output under construction was removed\n";
}

/// The line reporting a bug in rlsim (exit status 3): "rlsim: internal error: WHAT\n".
inline std::string internal_error_line(const std::exception& e) {
  return std::string("rlsim: internal error: ") + e.what() + "\n";
}

}  // namespace rlsim::cli
