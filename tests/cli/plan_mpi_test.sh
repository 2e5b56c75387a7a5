#!/usr/bin/env bash
# `mpirun -n 2 rlsim plan` splits a study's points across two ranks and gathers them on rank 0:
# results.csv and plan.json must equal those of a one-process run with --jobs 1, and only rank 0
# prints. Usage: plan_mpi_test.sh RLSIM_BINARY SOURCE_DIR MPIEXEC
set -u
RLSIM="$1"
SRC="$(cd "$2" && pwd)"
MPIEXEC="$3"
source "$(dirname "${BASH_SOURCE[0]}")/check.sh"
# OpenMPI refuses root unless told, and a CI machine may have fewer cores than ranks; shared-memory
# single-copy (CMA) is often blocked in containers.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
# Under ASan (./rlsim.sh sanitize), Open MPI's allocations are suppressed by library name
# (tests/sanitize/lsan.supp); the fast unwinder stops inside its frame-pointer-less libraries
# before reaching a name, so leaks are traced with the slow one here. Ignored by normal builds.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"

STUDY="$SRC/scenarios/study-rollout-length-qwen3-8b.yaml"
"$RLSIM" plan "$STUDY" --out "$WORK/one" --jobs 1 --no-plots --set steps=2 >"$WORK/one.txt" 2>&1
check "one process: exit 0" test $? -eq 0
"$MPIEXEC" -n 2 "$RLSIM" plan "$STUDY" --out "$WORK/mpi" --jobs 1 --no-plots --set steps=2 >"$WORK/mpi.txt" 2>&1
rc=$?
check "mpirun -n 2: exit 0 (got $rc)" test $rc -eq 0
[ $rc -ne 0 ] && cat "$WORK/mpi.txt" >&2
check "mpirun -n 2: results.csv equals the one-process run" cmp -s "$WORK/one/results.csv" "$WORK/mpi/results.csv"
check "mpirun -n 2: plan.json equals the one-process run" cmp -s "$WORK/one/plan.json" "$WORK/mpi/plan.json"
check "mpirun -n 2: ran on 2 ranks" grep -q "on each of 2 MPI ranks" "$WORK/mpi.txt"
check "mpirun -n 2: only rank 0 prints (one recommended line)" test "$(grep -c '^recommended: ' "$WORK/mpi.txt")" -eq 1
check "mpirun -n 2: same recommendation" test "$(grep '^recommended: ' "$WORK/one.txt")" = "$(grep '^recommended: ' "$WORK/mpi.txt")"
# A bad study: every rank exits 2, the error is printed once.
printf 'base: %s\nsweep:\n  rollout.precison: [bf16]\n' "$SRC/scenarios/default.yaml" >"$WORK/typo.yaml"
"$MPIEXEC" -n 2 "$RLSIM" plan "$WORK/typo.yaml" --out "$WORK/typo" >"$WORK/typo.txt" 2>&1
check "mpirun -n 2, bad study: non-zero exit" test $? -ne 0
check "mpirun -n 2, bad study: the error once" test "$(grep -c "unknown key 'rollout.precison'" "$WORK/typo.txt")" -eq 1
check "mpirun -n 2, bad study: nothing written" test ! -e "$WORK/typo"

echo "plan mpi: $pass passed, $fail failed"
test "$fail" -eq 0
