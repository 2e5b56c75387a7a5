# Sourced by the CLI test scripts: a scratch folder $WORK removed on exit, and
# `check NAME CONDITION...`, which counts passes and failures in $pass and $fail.
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
pass=0
fail=0
check() {  # check NAME CONDITION...
  local name="$1"
  shift
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $name" >&2; fi
}
