#!/bin/bash
# A disaggregated slime launch in the shape of slime's scripts for Qwen3-30B-A3B, run through
# train_async.py (the next rollout overlaps this step's training): 8 trainer GPUs, 8 rollout
# GPUs in one engine with expert parallelism, Megatron EP 8 with the CPU optimizer.
# Test input of rlsim import slime.
MODEL_ARGS=(
   --num-layers 48 --hidden-size 2048 --num-experts 128 --swiglu
)
ARGS=(
   --hf-checkpoint /models/Qwen3-30B-A3B
   --rollout-batch-size 32 --n-samples-per-prompt 8
   --rollout-max-prompt-len 2048 --rollout-max-response-len 16384
   --global-batch-size 64
   --tensor-model-parallel-size 4 --expert-model-parallel-size 8 --expert-tensor-parallel-size 1
   --use-dynamic-batch-size --max-tokens-per-gpu 20480 --log-probs-max-tokens-per-gpu 32768
   --optimizer-cpu-offload --overlap-cpu-optimizer-d2h-h2d
   --rollout-num-gpus-per-engine 8 --sglang-ep-size 8
   --use-rollout-logprobs
   --some-future-flag 3
)
python3 /root/slime/train_async.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 \
  --rollout-num-gpus 8 "${MODEL_ARGS[@]}" "${ARGS[@]}" "$@" 2>&1 | tee run.log
