#!/usr/bin/env bash
# One-command set-up for rlsim on Debian bookworm (root, or a user with sudo):
#   ./rlsim.sh run [SCENARIO] [rlsim run options]   install, configure, build, run the simulator
#                                                   (default scenario: scenarios/default.yaml)
#   ./rlsim.sh test                                 install, configure, build, check formatting, run the test suite,
#                                                   then run it again built with ASan + UBSan (build-sanitize/)
#   ./rlsim.sh sanitize                             only the ASan + UBSan suite
#   ./rlsim.sh fuzz [SECONDS] [HARNESS...]          build the libFuzzer harnesses (clang, build-fuzz/) and run each
#                                                   for SECONDS (default 60); crashes go to build-fuzz/crashes/
#   ./rlsim.sh build                                install, configure, build only
# Missing Debian packages are installed with apt-get; configuration happens once (build/).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

PACKAGES=(
  cmake make g++ pkg-config
  libyaml-cpp-dev libfmt-dev nlohmann-json3-dev libcli11-dev
  libeigen3-dev libboost-graph-dev libboost-iostreams-dev libboost-filesystem-dev
  libcsv-dev libgnuplot-iostream-dev gnuplot-nox fonts-liberation
  libgtest-dev
  libopenmpi-dev openmpi-bin
  clang-format
)

# Only `./rlsim.sh fuzz` needs these: clang with its libFuzzer and sanitizer runtimes, and its
# OpenMP runtime.
FUZZ_PACKAGES=(clang libclang-rt-14-dev libomp-14-dev)

install_missing() {
  local missing=()
  for p in "${PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "rlsim.sh: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2
}

# configure_and_build DIR CMAKE_ARGS...: configures DIR once, then builds it; logs are shown only
# when a step fails.
configure_and_build() {
  local dir="$1"
  shift
  mkdir -p "$dir"
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    echo "rlsim.sh: configuring ($dir/)" >&2
    if ! cmake -S . -B "$dir" "$@" >"$dir/configure.log" 2>&1; then
      cat "$dir/configure.log" >&2
      exit 1
    fi
  fi
  if ! cmake --build "$dir" -j "$(nproc)" >"$dir/build.log" 2>&1; then
    cat "$dir/build.log" >&2
    echo "rlsim.sh: build failed (log: $dir/build.log)" >&2
    exit 1
  fi
}

build() {
  install_missing
  configure_and_build build -DCMAKE_BUILD_TYPE=Release -DRLSIM_WERROR=ON
}

# The suite again, built with GCC's AddressSanitizer (with LeakSanitizer) and
# UndefinedBehaviorSanitizer: every report fails its test. Portable code (no -march=native) at
# -O1 with line tables keeps the build and the run short. Warnings are not errors here: GCC's
# -Wmaybe-uninitialized misfires inside Boost.Graph's headers under -fsanitize=address.
sanitize() {
  install_missing
  configure_and_build build-sanitize -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DRLSIM_NATIVE=OFF -DRLSIM_SANITIZE=address,undefined
  echo "rlsim.sh: running the suite under ASan + UBSan (build-sanitize/)" >&2
  ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    LSAN_OPTIONS="suppressions=$PWD/tests/sanitize/lsan.supp:print_suppressions=0" \
    ctest --test-dir build-sanitize --output-on-failure -j "$(nproc)"
}

# The tree follows .clang-format; a file that does not fails the test command (with the fix).
check_format() {
  local bad=()
  while IFS= read -r f; do
    clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done < <(git ls-files '*.cc' '*.h' 2>/dev/null || find sim models analysis tests -name '*.cc' -o -name '*.h')
  if [ ${#bad[@]} -gt 0 ]; then
    echo "rlsim.sh: not formatted as .clang-format says (fix: clang-format -i ${bad[*]})" >&2
    exit 1
  fi
  echo "rlsim.sh: formatting checked (.clang-format)" >&2
}

# Runs each libFuzzer harness of tests/fuzz for $1 seconds (the rest: harness names; default all)
# on its committed seeds plus the corpus it grew before (build-fuzz/corpus/), and prints one line
# per harness: executions, coverage (edges, features), corpus size, and crashes found.
fuzz() {
  local seconds="${1:-60}"
  [ $# -gt 0 ] && shift
  install_missing "${FUZZ_PACKAGES[@]}"
  CC=clang CXX=clang++ configure_and_build build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DRLSIM_NATIVE=OFF -DRLSIM_MPI=OFF -DRLSIM_FUZZ=ON
  local harnesses=("$@")
  if [ ${#harnesses[@]} -eq 0 ]; then
    for h in build-fuzz/fuzz/fuzz_*; do harnesses+=("${h##*/fuzz_}"); done
  fi
  local failed=0
  for name in "${harnesses[@]}"; do
    local bin="build-fuzz/fuzz/fuzz_$name"
    [ -x "$bin" ] || { echo "rlsim.sh: no harness '$name' (see tests/fuzz/)" >&2; exit 2; }
    mkdir -p "build-fuzz/corpus/$name" "build-fuzz/crashes/$name"
    echo "rlsim.sh: fuzzing $name for $seconds s" >&2
    local rc=0
    ASAN_OPTIONS=detect_leaks=1 "$bin" -max_total_time="$seconds" -timeout=1 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="build-fuzz/crashes/$name/" \
      "build-fuzz/corpus/$name" "tests/fuzz/corpus/$name" >"build-fuzz/$name.log" 2>&1 || rc=$?
    local execs cov ft corp crashes
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "build-fuzz/$name.log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "build-fuzz/$name.log" | tail -1 | cut -d' ' -f2)
    ft=$(grep -o 'ft: [0-9]*' "build-fuzz/$name.log" | tail -1 | cut -d' ' -f2)
    corp=$(grep -o 'corp: [0-9]*' "build-fuzz/$name.log" | tail -1 | cut -d' ' -f2)
    crashes=$(find "build-fuzz/crashes/$name" -type f | wc -l)
    echo "$name: ${execs:-?} executions, cov ${cov:-?} edges, ft ${ft:-?} features, corpus ${corp:-?}, crashes $crashes (exit $rc; log build-fuzz/$name.log)"
    if [ "$rc" -ne 0 ]; then
      failed=1
      grep -A25 'ERROR: \|==ERROR\|runtime error\|fuzz property failed\|deadly signal' "build-fuzz/$name.log" | head -40 >&2
    fi
  done
  return $failed
}

cmd="${1:-run}"
[ $# -gt 0 ] && shift
case "$cmd" in
  run)
    build
    if [ $# -eq 0 ]; then set -- scenarios/default.yaml; fi
    exec ./build/rlsim run "$@"
    ;;
  test)
    build
    check_format
    ctest --test-dir build --output-on-failure -j "$(nproc)"
    sanitize
    ;;
  sanitize)
    sanitize
    ;;
  fuzz)
    fuzz "$@"
    ;;
  build)
    build
    ;;
  *)
    echo "usage: $0 run [SCENARIO] [OPTIONS] | test | sanitize | fuzz [SECONDS] [HARNESS...] | build" >&2
    exit 2
    ;;
esac
