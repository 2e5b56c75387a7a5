#!/bin/bash
# A slime launch written the way slime's own scripts/run-qwen3-4B.sh and
# scripts/low_precision/run-qwen3-4b-fp8.sh are (THUDM/slime): flags gathered in bash arrays,
# the architecture in a sourced file, a multi-line JSON runtime environment, `ray job submit`.
# Test input of rlsim import slime (tests/analysis/slime_import_test.cc, tests/cli/cli_test.sh).
set -ex
export PYTHONUNBUFFERED=1

NVLINK_COUNT=$(nvidia-smi topo -m 2>/dev/null | grep -o 'NV[0-9][0-9]*' | wc -l)
if [ "$NVLINK_COUNT" -gt 0 ]; then
    HAS_NVLINK=1
else
    HAS_NVLINK=0
fi

SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${SCRIPT_DIR}/models/qwen3-4B.sh"

BASE=/data
CKPT_ARGS=(
   --hf-checkpoint ${BASE}/Qwen3-4B-FP8/
   #--hf-checkpoint ${BASE}/Qwen3-4B
   --ref-load "${BASE}/Qwen3-4B_torch_dist"
   --save-interval 50
)

ROLLOUT_ARGS=(
   --prompt-data ${BASE}/math.jsonl
   --input-key prompt
   --apply-chat-template
   --rm-type deepscaler
   --num-rollout 500
   --rollout-batch-size 64
   --n-samples-per-prompt 8
   --rollout-max-response-len 4096
   --rollout-temperature 1.0   # sampling: no effect on step time

   --global-batch-size 128
   --balance-data
)

PERF_ARGS=(
   --tensor-model-parallel-size 2
   --sequence-parallel
   --pipeline-model-parallel-size 1
   --context-parallel-size 1
   --recompute-granularity full
   --recompute-method uniform
   --recompute-num-layers 1
   --use-dynamic-batch-size
   --max-tokens-per-gpu $((2 * 4608))
)

GRPO_ARGS=(
   --advantage-estimator grpo
   --use-kl-loss
   --kl-loss-coef 0.00
   --eps-clip 0.2
)

SGLANG_ARGS=(
   --rollout-num-gpus-per-engine 2
   --sglang-mem-fraction-static 0.6
   --sglang-cuda-graph-bs 1 2 4 8 $(seq 16 8 128)
)
SGLANG_ARGS+=(--rollout-num-gpus-per-engine 1)

RUNTIME_ENV_JSON="{
  \"env_vars\": {
    \"PYTHONPATH\": \"/root/Megatron-LM/\",
    \"NCCL_NVLS_ENABLE\": \"${HAS_NVLINK}\"
  }
}"

ray job submit --address="http://127.0.0.1:8265" \
   --runtime-env-json="${RUNTIME_ENV_JSON}" \
   -- python3 train.py \
   --actor-num-nodes 1 \
   --actor-num-gpus-per-node 8 \
   --colocate \
   ${MODEL_ARGS[@]} \
   ${CKPT_ARGS[@]} \
   ${ROLLOUT_ARGS[@]} \
   ${GRPO_ARGS[@]} \
   ${PERF_ARGS[@]} \
   "${SGLANG_ARGS[@]}" \
   --lr 1e-6 --weight-decay 0.1
