#!/usr/bin/env bash
# "rlsim train" end to end (README): a short GRPO loop on stories260K that learns, is deterministic
# across thread counts and seeds, reads train_ranks, and refuses bad input. Usage:
# train_test.sh RLSIM_BINARY SOURCE_DIR [native|sanitized] (sanitized: an ASan + UBSan build, where
# the learning run is cut short). Its own ctest entry, apart from cli_test.sh: its runs are most of
# the CLI checks' time, and ctest -j runs the two side by side.
set -u
RLSIM="$1"
SRC="$(cd "$2" && pwd)"
BUILD="${3:-native}"
case "$BUILD" in native | sanitized) ;; *) echo "train_test.sh: the third argument is native or sanitized, not '$BUILD'" >&2; exit 2 ;; esac
source "$(dirname "${BASH_SOURCE[0]}")/check.sh"
mkdir -p "$WORK/vast_model" && write_vast_config "$WORK/vast_model/config.json"

# Under ASan + UBSan these runs took 224 s of the CLI checks' 327 (2026-11-28, alone on 2 cores)
# and the suite came within 15 s of its 10-minute budget. The learning check needs 5 steps; there
# the run takes 2 (the same code at every step: 23 s less) and the native suite checks that the
# reward rises.
train_steps=5
[ "$BUILD" = sanitized ] && train_steps=2
sed -e 's/^steps: .*/steps: 5/' -e 's/^learning_rate: .*/learning_rate: 3.0e-3/' -e "s|\.\./\.\./shared|$SRC/../shared|" \
  "$SRC/scenarios/train-lipogram-bf16.yaml" >"$WORK/train.yaml"
"$RLSIM" train "$WORK/train.yaml" --steps "$train_steps" --out "$WORK/train1" >"$WORK/train1.txt" 2>"$WORK/train1.err"
check "train: exit 0" test $? -eq 0
check "train: a line per step" test "$(grep -c '^step ' "$WORK/train1.txt")" -eq "$train_steps"
check "train: steps.csv has a row per step" test "$(wc -l <"$WORK/train1/train/seed1/steps.csv")" -eq $((train_steps + 1))
if [ "$train_steps" -eq 5 ]; then
  awk -F, 'NR == 2 {r0 = $2} NR == 6 {r4 = $2} END {exit !(r4 > r0 + 0.1)}' "$WORK/train1/train/seed1/steps.csv"
  check "train: the lipogram reward rises by > 0.1 in 5 steps" test $? -eq 0
fi
# Two steps (a rollout, an update, a rollout on the updated weights) keep this check short under
# the sanitizers.
OMP_NUM_THREADS=1 "$RLSIM" train "$WORK/train.yaml" --steps 2 --out "$WORK/train2" -q --no-plots
check "train: same seed (1 thread instead of 2) -> the first 2 steps' metrics identical but the times" \
  cmp -s <(head -n 3 "$WORK/train1/train/seed1/steps.csv" | cut -d, -f1-11) <(cut -d, -f1-11 "$WORK/train2/train/seed1/steps.csv")
"$RLSIM" train "$WORK/train.yaml" --seeds 2 --steps 1 --out "$WORK/train3" -q --no-plots
check "train: another seed -> other rewards" bash -c "! cmp -s <(sed -n 2p '$WORK/train1/train/seed1/steps.csv' | cut -d, -f2) <(sed -n 2p '$WORK/train3/train/seed2/steps.csv' | cut -d, -f2)"
sed -e 's/^steps: .*/steps: 2/' -e 's/^group_size: .*/group_size: 2/' -e "s|\.\./\.\./shared|$SRC/../shared|" \
  "$SRC/scenarios/train-lipogram-fp32-batch-invariant.yaml" >"$WORK/train_bi.yaml"
"$RLSIM" train "$WORK/train_bi.yaml" --out "$WORK/train_bi" -q --no-plots
awk -F, 'NR > 1 && ($5 != 0 || $7 != 1) {bad++} END {exit !(NR == 3 && bad == 0)}' "$WORK/train_bi/train_bi/seed1/steps.csv"
check "train: batch-invariant FP32 pair is bitwise on-policy (max |delta logp| 0, importance weights 1)" test $? -eq 0
# train_ranks (README: the trainer's data-parallel ranks) is a key of the file; the first step's
# rollouts come before any update, so they do not depend on it. One step (its rollouts and the
# one-rank update) is all these checks read.
{ sed -e 's/^steps: .*/steps: 1/' "$WORK/train.yaml"; echo "train_ranks: 1"; } >"$WORK/train_r1.yaml"
"$RLSIM" train "$WORK/train_r1.yaml" --out "$WORK/train_r1" -q --no-plots
check "train: train_ranks is read (exit 0, run.json says 1)" grep -q '"train_ranks": *1' "$WORK/train_r1/train_r1/seed1/run.json"
check "train: ... and its step-1 rewards equal the two-rank run's (the same rollouts)" bash -c \
  "cmp -s <(sed -n 2p '$WORK/train1/train/seed1/steps.csv' | cut -d, -f2) <(sed -n 2p '$WORK/train_r1/train_r1/seed1/steps.csv' | cut -d, -f2)"
sed 's/^group_size: .*/group_sise: 8/' "$WORK/train.yaml" >"$WORK/train_bad.yaml"
"$RLSIM" train "$WORK/train_bad.yaml" >/dev/null 2>"$WORK/train_bad.err"
check "train: unknown key is bad input (2) at file:line:column" \
  test $? -eq 2 -a -n "$(grep "train_bad.yaml:10:1: unknown key 'group_sise'" "$WORK/train_bad.err")"
sed -e "s|^model: .*|model: $WORK/vast_model|" "$WORK/train.yaml" >"$WORK/train_vast.yaml"
"$RLSIM" train "$WORK/train_vast.yaml" --out "$WORK/train_vast" >/dev/null 2>"$WORK/train_vast.err"
check "train: a model beyond the host's memory is bad input (2), refused by name, nothing written" \
  test $? -eq 2 -a -n "$(grep -E 'rlsim train: the FP32 weights of .*vast_model \(61268951105536 parameters\) need' "$WORK/train_vast.err")" \
  -a ! -e "$WORK/train_vast"

echo "train: $pass passed, $fail failed"
test "$fail" -eq 0
