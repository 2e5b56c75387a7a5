#!/usr/bin/env bash
# One-command set-up for rlsim on Debian bookworm (root, or a user with sudo):
#   ./rlsim.sh run [SCENARIO] [rlsim run options]   install, configure, build, run the simulator
#                                                   (default scenario: scenarios/default.yaml)
#   ./rlsim.sh test                                 install, configure, build, check formatting, run the test suite
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

install_missing() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "rlsim.sh: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2
}

build() {
  install_missing
  mkdir -p build
  if [ ! -f build/CMakeCache.txt ]; then
    echo "rlsim.sh: configuring (build/)" >&2
    if ! cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DRLSIM_WERROR=ON >build/configure.log 2>&1; then
      cat build/configure.log >&2
      exit 1
    fi
  fi
  # The build log is shown only when the build fails.
  if ! cmake --build build -j "$(nproc)" >build/build.log 2>&1; then
    cat build/build.log >&2
    echo "rlsim.sh: build failed (log: build/build.log)" >&2
    exit 1
  fi
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
    exec ctest --test-dir build --output-on-failure -j "$(nproc)"
    ;;
  build)
    build
    ;;
  *)
    echo "usage: $0 run [SCENARIO] [OPTIONS] | test | build" >&2
    exit 2
    ;;
esac
