#!/usr/bin/env bash
# CLI contract tests (SCENARIO.md): exit status 2 with file:line:column and no output directory
# on bad input; byte-identical outputs for the same seed; every output file written; --help
# describes every option. Usage: cli_test.sh RLSIM_BINARY SOURCE_DIR. "rlsim train" has its own
# script, train_test.sh.
set -u
RLSIM="$1"
SRC="$(cd "$2" && pwd)"
source "$(dirname "${BASH_SOURCE[0]}")/check.sh"

cat > "$WORK/base.yaml" <<'YAML'
name: cli test
seed: 5
steps: 2
model: qwen3-8b
cluster:
  device: h100-sxm
  nodes: 1
  devices_per_node: 8
workload:
  prompts_per_step: 8
  samples_per_prompt: 4
  prompt_tokens: {dist: fixed, value: 256}
  response_tokens: {dist: lognormal, median: 800, sigma: 0.8, max: 4096}
rollout: {memory_utilization: 0.6}
YAML

# --- bad input: unknown key, number without unit, unknown device --------------------------------
bad_case() {  # bad_case NAME EXPECTED_LOCATION_REGEX YAML_APPEND_OR_SED
  local name="$1" want="$2" file="$WORK/$1.yaml"
  cp "$WORK/base.yaml" "$file"
  eval "$3"
  "$RLSIM" run "$file" --out "$WORK/out_$name" >"$WORK/$name.stdout" 2>"$WORK/$name.stderr"
  local rc=$?
  check "$name: exit status 2 (got $rc)" test "$rc" -eq 2
  check "$name: message names file:line:column ($(cat "$WORK/$name.stderr"))" grep -qE "$want" "$WORK/$name.stderr"
  check "$name: no output directory" test ! -e "$WORK/out_$name"
  check "$name: no temporary directory" test ! -e "$WORK/.out_$name.tmp"
}
bad_case unknown_key "unknown_key\.yaml:15:3: unknown key 'rollout\.max_num_seq'" \
  'printf "rollout:\n  max_num_seq: 8\n" >> "$file"; sed -i "/^rollout: {memory_utilization/d" "$file"'
bad_case no_unit "no_unit\.yaml:16:11: 'weight_sync\.bucket': '512' has no unit" \
  'printf "weight_sync:\n  bucket: 512\n" >> "$file"'
bad_case unknown_device "unknown_device\.yaml:6:11: unknown device 'h300'" \
  'sed -i "s/device: h100-sxm/device: h300/" "$file"'

"$RLSIM" run "$WORK/missing.yaml" >/dev/null 2>&1
check "missing file: exit 2" test $? -eq 2
"$RLSIM" run "$WORK/base.yaml" --set nonsense >/dev/null 2>"$WORK/set.err"
check "bad --set: exit 2" test $? -eq 2
"$RLSIM" run --bogus-flag >/dev/null 2>&1
check "unknown flag: exit 2" test $? -eq 2

# --- outputs and determinism --------------------------------------------------------------------
"$RLSIM" run "$WORK/base.yaml" --out "$WORK/a" >"$WORK/a.stdout" 2>&1
check "run exits 0" test $? -eq 0
for f in summary.json steps.csv phases.csv memory.csv requests.csv trace.json timeline.png memory.png; do
  check "writes $f" test -s "$WORK/a/$f"
done
check "summary on stdout names the bottleneck" grep -q "bottleneck:" "$WORK/a.stdout"
check "steps.csv header" grep -qx "step,step_time_s,rollout_s,old_logprob_s,reference_s,actor_update_s,weight_sync_s,offload_s,generated_tokens,step_overhead_s" "$WORK/a/steps.csv"
check "trace.json has traceEvents" grep -q '"traceEvents"' "$WORK/a/trace.json"
check "timeline.png is a PNG" bash -c "head -c 8 '$WORK/a/timeline.png' | od -An -tx1 | grep -q '89 50 4e 47'"
"$RLSIM" run "$WORK/base.yaml" --out "$WORK/b" -q
for f in steps.csv requests.csv trace.json summary.json memory.csv phases.csv; do
  check "$f byte-identical across runs" cmp -s "$WORK/a/$f" "$WORK/b/$f"
done
"$RLSIM" run "$WORK/base.yaml" --out "$WORK/c" --seed 6 -q
check "another seed changes requests.csv" bash -c "! cmp -s '$WORK/a/requests.csv' '$WORK/c/requests.csv'"
"$RLSIM" run "$WORK/base.yaml" --out "$WORK/a" -q --no-plots --no-trace
check "rerun replaces the directory" test ! -e "$WORK/a/trace.json"

"$RLSIM" run "$WORK/base.yaml" --out "$WORK/odd: [dir]" -q --no-plots
check "an output path with YAML characters is taken literally" test -s "$WORK/odd: [dir]/summary.json"

# --- not fitting is a result, exit 0 ------------------------------------------------------------
"$RLSIM" run "$WORK/base.yaml" --set model=deepseek-v3 --out "$WORK/oom" -q
check "oom: exit 0" test $? -eq 0
check "oom: fits false" grep -q '"fits": false' "$WORK/oom/summary.json"
check "oom: names the role" grep -q '"role": "rollout"' "$WORK/oom/summary.json"

# --- help and config ----------------------------------------------------------------------------
"$RLSIM" --help >"$WORK/help" 2>&1
check "--help exits 0" test $? -eq 0
for word in run catalog; do check "--help lists $word" grep -q "$word" "$WORK/help"; done
"$RLSIM" run --help >"$WORK/runhelp" 2>&1
for opt in --out --set --seed --steps --print-config --no-plots --no-trace --quiet; do
  check "run --help describes $opt" grep -q -- "$opt" "$WORK/runhelp"
done
"$RLSIM" run "$WORK/base.yaml" --print-config --set rollout.precision=fp8-block >"$WORK/resolved.yaml"
check "--print-config shows the resolved recipe" grep -q "fp8-e4m3/block128x128" "$WORK/resolved.yaml"
"$RLSIM" run "$WORK/resolved.yaml" --out "$WORK/r" -q
check "resolved config runs" test $? -eq 0

# --- benchmark ---------------------------------------------------------------------------------
"$RLSIM" bench sim --repeat 1 --max-requests 100000 >"$WORK/bench" 2>&1
check "bench sim exits 0" test $? -eq 0
check "bench sim prints events/s" grep -q "events/s" "$WORK/bench"
check "bench sim prints the scaling rows with peak RSS (10^4 and 10^5 requests)" \
  test "$(grep -cE '^ +(10000|100000) +[0-9]+ .* MB ' "$WORK/bench")" -eq 2
"$RLSIM" bench nope >/dev/null 2>&1
check "bench: unknown benchmark is bad input (2)" test $? -eq 2

# --- rlsim quantize: spec values through the CLI ------------------------------------------------
q() { printf '%s\n' "$2" | "$RLSIM" quantize --format "$1" "${@:3}"; }
check "quantize: E4M3 max 448, overflow saturates" test "$(q fp8-e4m3 '448 1000 -1e9' | head -3 | tr '\n' ' ')" = "448 448 -448 "
check "quantize: E4M3 saturated count" grep -q "saturated 2," <(q fp8-e4m3 '448 1000 -1e9')
check "quantize: E4M3 NaN code 0x7f" test "$(q fp8-e4m3 nan --codes | head -1)" = "nan 0x7f"
check "quantize: E5M2 max 57344" test "$(q fp8-e5m2 '57344 1e6' | head -2 | tr '\n' ' ')" = "57344 57344 "
check "quantize: E2M1 value set" test "$(q fp4-e2m1 '0 0.5 1 1.5 2 3 4 6 5 7' | head -10 | tr '\n' ' ')" = "0 0.5 1 1.5 2 3 4 6 4 6 "
check "quantize: E8M0 NaN" test "$(q e8m0 'nan 3' --codes | head -2 | tr '\n' ' ')" = "nan 0xff 2 0x80 "
check "quantize: MX block with a NaN is NaN" test "$(q mxfp8 '1 nan 2' | head -3 | tr '\n' ' ')" = "nan nan nan "
check "quantize: HiF8 max 32768" test "$(q hif8 '32768 1e6' --codes | head -2 | tr '\n' ' ')" = "32768 0x6e 32768 0x6e "
check "quantize: exact format reports sqnr inf" grep -q "sqnr inf dB" <(q bf16 '1 2 3')
check "quantize: --scaling and --shape" grep -q "format int4/group32, shape 2x3" <(q int4 '1 2 3 4 5 6' --scaling group32 --shape 2,3)
q fp8-e4m3 '1 two 3' >/dev/null 2>"$WORK/qerr"
check "quantize: bad number is bad input (2)" test $? -eq 2
check "quantize: error names stdin:line:column" grep -q "stdin:1:3" "$WORK/qerr"
q fp8-e4m3 '1 2 3' --shape 2,2 >/dev/null 2>&1
check "quantize: shape mismatch is bad input (2)" test $? -eq 2
q hif4/group32 '1' >/dev/null 2>&1
check "quantize: hif4 with a scaling is bad input (2)" test $? -eq 2
"$RLSIM" catalog formats >"$WORK/formats"
check "catalog formats: hif4 at 4.5 bits per value" grep -Eq "^hif4 +4.5000" "$WORK/formats"
check "catalog formats: nvfp4 column" grep -Eq "^fp4-e2m1 .* 4.5000$" "$WORK/formats"
"$RLSIM" bench quantize --repeat 1 >"$WORK/benchq" 2>&1
check "bench quantize prints GB/s per format" test "$(grep -c 'fp8-e4m3\|int4\|hif' "$WORK/benchq")" -ge 6

# --- rlsim verify: verdicts, exit status, JSON, DOT, GraphML in and out --------------------------
V="$SRC/scenarios"
"$RLSIM" verify "$V/verify-qwen3-8b-jet-rl-fp8-block.yaml" >"$WORK/v0.out"
check "verify consistent: exit 0" test $? -eq 0
check "verify consistent: verdict line" grep -q "^consistent: " "$WORK/v0.out"
"$RLSIM" verify "$V/verify-qwen3-8b-bf16-train-fp8-block-rollout.yaml" --json "$WORK/v.json" --dot "$WORK/dot" \
  --graphml "$WORK/gml" >"$WORK/v1.out"
check "verify inconsistent: exit 1" test $? -eq 1
check "verify inconsistent: verdict line with the count" grep -q "^inconsistent: 504 mismatching edges in 2 groups" "$WORK/v1.out"
check "verify: table row for linear inputs" grep -Eq "^  linear +input +activation +252 +bf16 +fp8-e4m3/group1x128" "$WORK/v1.out"
check "verify json: verdict" grep -q '"verdict": "inconsistent"' "$WORK/v.json"
check "verify json: one object per mismatching edge" test "$(grep -c '"operator": ' "$WORK/v.json")" -eq 504
check "verify json: weight edges" test "$(grep -c '"tensor": "weight"' "$WORK/v.json")" -eq 252
check "verify json: first operator" grep -q '"operator": "layers.0.self_attn.q_proj"' "$WORK/v.json"
for k in kind role train inference reason; do check "verify json: key $k" grep -q "\"$k\": " "$WORK/v.json"; done
for f in training.dot inference.dot; do
  check "verify --dot writes $f" grep -q "^digraph" "$WORK/dot/$f"
  check "verify --dot marks $f in red" grep -q " color=red" "$WORK/dot/$f"
done
"$RLSIM" verify "$V/verify-qwen3-8b-bf16-train-fp8-block-rollout.yaml" --dot "$WORK/dotfull" --full -q >/dev/null
check "verify --full draws every layer" grep -q '"layers.35.mlp.down_proj' "$WORK/dotfull/inference.dot"
"$RLSIM" verify --train "$WORK/gml/training.graphml" --infer "$WORK/gml/inference.graphml" >"$WORK/v2.out"
check "verify GraphML: exit 1" test $? -eq 1
check "verify GraphML: same verdict" grep -q "^inconsistent: 504 mismatching edges" "$WORK/v2.out"
"$RLSIM" verify --train "$WORK/gml/training.graphml" --infer "$WORK/gml/training.graphml" -q >/dev/null
check "verify GraphML: a graph embeds in itself (exit 0)" test $? -eq 0
sed 's/>linear</>linaer</' "$WORK/gml/inference.graphml" >"$WORK/bad.graphml"
"$RLSIM" verify --train "$WORK/gml/training.graphml" --infer "$WORK/bad.graphml" --json "$WORK/bad.json" >/dev/null 2>"$WORK/bad.err"
check "verify bad GraphML: exit 2" test $? -eq 2
check "verify bad GraphML: names file, node and kind" grep -q "bad.graphml: node #[0-9]* ('layers.0.self_attn.q_proj'): unknown kind 'linaer'" "$WORK/bad.err"
check "verify bad GraphML: no JSON written" test ! -e "$WORK/bad.json"
"$RLSIM" verify --train "$WORK/gml/training.graphml" >/dev/null 2>&1
check "verify --train without --infer: exit 2" test $? -eq 2
"$RLSIM" verify "$WORK/missing.yaml" >/dev/null 2>&1
check "verify missing scenario: exit 2" test $? -eq 2
"$RLSIM" run "$SRC/scenarios/default.yaml" --out "$WORK/def" -q --no-plots --no-trace
check "run summary.json: verify verdict" grep -q '"verdict": "inconsistent"' "$WORK/def/summary.json"
"$RLSIM" run "$WORK/base.yaml" --set rollout.precision=fp8-block --out "$WORK/vr" --no-plots --no-trace >"$WORK/vr.out"
check "run summary: verdict and mismatch counts" grep -q "precision flow: inconsistent, 504 mismatching edges (linear input 252, linear weight 252)" "$WORK/vr.out"
"$RLSIM" bench verify --repeat 1 >"$WORK/benchv" 2>&1
check "bench verify prints vertices, edges and time for both models" test "$(grep -c 'vertices.*edges.*total' "$WORK/benchv")" -eq 4

# --- rlsim generate: the llama2.c project's greedy story, bad input -----------------------------
ST="$SRC/../shared/models/stories260K"
"$RLSIM" generate --model "$ST/stories260K.bin" --temperature 0 --steps 1000 -q >"$WORK/story.txt"
check "generate: exit 0" test $? -eq 0
check "generate --temperature 0: the reference greedy story, byte for byte" cmp -s "$WORK/story.txt" "$ST/reference/greedy/text.txt"
"$RLSIM" generate --model "$ST/stories260K.bin" --temperature 0 --steps 200 -q >"$WORK/story200.txt"
n200=$(( $(wc -c <"$WORK/story200.txt") - 1 ))  # without the final newline
check "generate --steps 200: a prefix of the story ($n200 bytes)" cmp -s -n "$n200" "$WORK/story200.txt" "$ST/reference/greedy/text.txt"
"$RLSIM" generate --model "$ST/stories260K.bin" --prompt "Tom and his dog Max went to the big lake" --temperature 0 --steps 128 -q >"$WORK/prompt.txt"
check "generate --prompt: the reference prompt continuation" cmp -s "$WORK/prompt.txt" "$ST/reference/prompt/text.txt"
"$RLSIM" generate --model "$ST/stories260K.bin" --temperature 0.8 --seed 3 --steps 60 -q >"$WORK/s1.txt"
"$RLSIM" generate --model "$ST/stories260K.bin" --temperature 0.8 --seed 3 --steps 60 -q >"$WORK/s2.txt"
check "generate: same seed, same text" cmp -s "$WORK/s1.txt" "$WORK/s2.txt"
"$RLSIM" generate --model "$ST/stories260K.bin" --precision fp8-block --temperature 0 --steps 40 -q >/dev/null
check "generate --precision fp8-block: exit 0" test $? -eq 0
"$RLSIM" generate --model "$ST/stories260K.bin" --precision fp9 >/dev/null 2>"$WORK/gen.err"
check "generate: unknown precision is bad input (2)" test $? -eq 2
head -c 5000 "$ST/stories260K.bin" >"$WORK/cut.bin"
"$RLSIM" generate --model "$WORK/cut.bin" --tokenizer "$ST/tok512.bin" >/dev/null 2>"$WORK/cut.err"
check "generate: truncated checkpoint is bad input (2)" test $? -eq 2
check "generate: error names the file and the tensor" grep -q "cut.bin: truncated in tensor 'token_embedding'" "$WORK/cut.err"

# --- rlsim bench runtime: one line per figure, on a small shape --------------------------------
cat >"$WORK/tiny_config.json" <<'JSON'
{"model_type": "llama", "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "vocab_size": 300, "rope_theta": 10000.0, "tie_word_embeddings": true}
JSON
"$RLSIM" bench runtime --shape "$WORK/tiny_config.json" --precision fp32,int4-w4a16-g32 --decode-tokens 4 --prefill-tokens 16 \
  --repeat 1 >"$WORK/bench_rt.txt" 2>"$WORK/bench_rt.err"
check "bench runtime: exit 0" test $? -eq 0
check "bench runtime: bandwidth line" grep -qE '^bandwidth [0-9]+\.[0-9] GB/s streams_1 [0-9]+\.[0-9] streams_2 [0-9]+\.[0-9] streams_4 [0-9]+\.[0-9]$' "$WORK/bench_rt.txt"
check "bench runtime: the roofline's bandwidth is the best stream count's" \
  awk '/^bandwidth / { m = $5; if ($7 > m) m = $7; if ($9 > m) m = $9; ok = ($2 == m) } END { exit !ok }' "$WORK/bench_rt.txt"
check "bench runtime: decode lines with roofline" test "$(grep -cE '^decode (fp32|int4-w4a16-g32) [0-9]+\.[0-9] tok/s roofline [0-9]+\.[0-9]{2} bytes_per_token [1-9][0-9]* bandwidth [0-9]+\.[0-9]$' "$WORK/bench_rt.txt")" -eq 2
# A decode's roofline divides by the bandwidth probed right before its best run (the line's own).
# Each figure is printed rounded: the roofline to +-0.005, tok/s and bandwidth to +-0.05, which
# moves the roofline computed from them by up to f (0.05 / bandwidth + 0.05 / tok/s): 2 % of it
# at the 2.6 GB/s a sanitizer build reads.
check "bench runtime: roofline = tok/s x bytes / the line's bandwidth" \
  awk '/^decode / { f = $3 * $8 / ($10 * 1e9); d = f - $6; tol = 0.005 + f * (0.05 / $10 + 0.05 / $3) + 1e-9; n++
                    if (d < -tol || d > tol) bad = 1 } END { exit !(n == 2 && !bad) }' "$WORK/bench_rt.txt"
check "bench runtime: prefill lines" test "$(grep -cE '^prefill (fp32|int4-w4a16-g32) [0-9]+\.[0-9] tok/s$' "$WORK/bench_rt.txt")" -eq 2
check "bench runtime: prefill-logits lines" test "$(grep -cE '^prefill-logits (fp32|int4-w4a16-g32) [0-9]+\.[0-9] tok/s$' "$WORK/bench_rt.txt")" -eq 2
check "bench runtime: weight memory lines" test "$(grep -cE '^weights (fp32|int4-w4a16-g32) resident_bytes [1-9][0-9]* packed_bytes [1-9][0-9]* ratio [0-9]+\.[0-9]{3}$' "$WORK/bench_rt.txt")" -eq 2
# The cache-resident decode: the shapes cut to one layer (of 2) and vocab / layers, so about half
# the bytes a token of the full decode (one embedding row and the cut vocabulary's rounding
# apart: under 0.6 of them), and G = TOKS x B / 1e9 to its printed rounding; on a host whose sysfs
# gives no last-level cache size, a note on stderr for each recipe instead.
check "bench runtime: cache-resident decode lines (or a note for each why not)" \
  sh -c "test \"\$(grep -cE '^decode-cache-resident (fp32|int4-w4a16-g32) [0-9]+\\.[0-9] tok/s bytes_per_token [1-9][0-9]* gbps [0-9]+\\.[0-9]$' '$WORK/bench_rt.txt')\" -eq 2 ||
         test \"\$(grep -c ': no cache-resident decode: ' '$WORK/bench_rt.err')\" -eq 2"
check "bench runtime: a cache-resident decode reads about half the full one's bytes a token, G = TOKS x B" \
  awk '/^decode / { full[$2] = $8 } /^decode-cache-resident / { n++; g = $3 * $6 / 1e9; tol = 0.05 + g * 0.05 / $3 + 1e-9
         if (!($6 > 0.4 * full[$2] && $6 < 0.6 * full[$2]) || g - $8 > tol || $8 - g > tol) bad = 1 } END { exit !(n == 0 || (n == 2 && !bad)) }' "$WORK/bench_rt.txt"
# The decode-gemv line: a dense decode calls gemv() 4 times a layer (q/k/v, o, gate/up, down)
# and once for the lm_head, 9 times a token on the tiny shape's 2 layers.
check "bench runtime: decode-gemv lines, 4 GEMV calls a layer and the lm_head's" \
  test "$(grep -cE '^decode-gemv (fp32|int4-w4a16-g32) calls_per_token 9\.0 gemv_ms_per_token [0-9]+\.[0-9]{3} other_ms_per_token [0-9]+\.[0-9]{3} fixed_us_per_call (-?[0-9]+\.[0-9]{2}|n/a) stream_gbps ([0-9]+\.[0-9]|n/a) handoff_ns ([1-9][0-9]*|n/a)$' "$WORK/bench_rt.txt")" -eq 2
# Where the prefill runs on AMX (the header on stderr says "AMX-BF16 prefill GEMM"), each recipe
# also prints its prefill without it (prefill-no-amx); elsewhere none.
check "bench runtime: prefill-no-amx lines exactly where the prefill GEMM is AMX's, one a recipe" \
  sh -c "n=\$(grep -cE '^prefill-no-amx (fp32|int4-w4a16-g32) [0-9]+\\.[0-9] tok/s$' '$WORK/bench_rt.txt')
         if grep -q 'AMX-BF16 prefill GEMM' '$WORK/bench_rt.err'; then test \$n -eq 2; else test \$n -eq 0; fi"
check "bench runtime: nothing else on stdout" \
  test "$(grep -vcE '^(decode-cache-resident|prefill-no-amx) ' "$WORK/bench_rt.txt")" -eq 11
# --compare-gguf: llama-bench CSV files in a folder; a recipe compares with its weight class.
mkdir -p "$WORK/gguf"
cat >"$WORK/gguf/q4.csv" <<'CSV'
model_type,model_size,n_threads,n_prompt,n_gen,avg_ts
"llama 1M Q4_0","1000000000","2","16","0","1000.0"
"llama 1M Q4_0","1000000000","2","0","4","100.0"
CSV
cat >"$WORK/gguf/q8.csv" <<'CSV'
model_type,n_threads,n_prompt,n_gen,avg_ts
"llama 1M Q8_0","2","16","0","900.0"
"llama 1M Q8_0","2","0","4","90.0"
CSV
"$RLSIM" bench runtime --shape "$WORK/tiny_config.json" --precision fp32,int4-w4a16-g32,fp8-tensor --decode-tokens 4 \
  --prefill-tokens 16 --repeat 1 --compare-gguf "$WORK/gguf" >"$WORK/bench_cmp.txt" 2>/dev/null
check "bench runtime --compare-gguf: exit 0" test $? -eq 0
check "bench runtime --compare-gguf: the 4-bit recipe against Q4_0, the 8-bit one against Q8_0, nothing for fp32" \
  test "$(grep -cE '^compare (int4-w4a16-g32 Q4_0|fp8-tensor Q8_0) prefill_ratio [0-9]+\.[0-9]{2} decode_ratio [0-9]+\.[0-9]{2} baseline mean$' "$WORK/bench_cmp.txt"),$(grep -c '^compare' "$WORK/bench_cmp.txt")" = "2,2"
# llama.cpp's own roofline: 100 tok/s x 1 GB over the probe's bandwidth, printed to 0.005, the
# bandwidth line to 0.05 GB/s: the roofline lies in [100 / (bw + 0.05), 100 / (bw - 0.05)] widened
# by 0.005. (A first-order tolerance, 100 x 0.05 / bw^2, is narrower than that interval at its
# upper end, the more so the lower the bandwidth: a sanitizer build's probe reads 2-3 GB/s, and
# this check failed once there.) None for Q8_0, whose file has no model_size column.
check "bench runtime --compare-gguf: llama.cpp's roofline = its tok/s x model_size / the bandwidth line's" \
  awk '/^bandwidth / { bw = $2 } /^gguf / { n++; lo = 100 / (bw + 0.05) - 0.005 - 1e-9
         hi = bw > 0.05 ? 100 / (bw - 0.05) + 0.005 + 1e-9 : 1e300
         if ($2 != "Q4_0" || $4 != "100.0" || $7 != "1000000000" || $9 < lo || $9 > hi) bad = 1 }
       END { exit !(n == 1 && !bad && bw > 0) }' "$WORK/bench_cmp.txt"
sed 's/"tie_word_embeddings": true/"tie_word_embeddings": false/' "$WORK/tiny_config.json" >"$WORK/tiny_untied.json"
"$RLSIM" bench runtime --shape "$WORK/tiny_untied.json" --precision int4-w4a16-g32 --decode-tokens 4 --prefill-tokens 16 \
  --repeat 1 --compare-gguf "$WORK/gguf" >"$WORK/bench_untied.txt" 2>"$WORK/bench_untied.err"
check "bench runtime --compare-gguf, untied embeddings: the ratio, no gguf roofline line, and a note why" \
  sh -c "grep -q '^compare int4-w4a16-g32 Q4_0' '$WORK/bench_untied.txt' && ! grep -q '^gguf' '$WORK/bench_untied.txt' &&
         grep -q 'no gguf roofline lines: with untied embeddings' '$WORK/bench_untied.err'"
printf 'model_type,avg_ts\n"x","1"\n' >"$WORK/gguf/bad.csv"
"$RLSIM" bench runtime --shape "$WORK/tiny_config.json" --precision bf16 --compare-gguf "$WORK/gguf" >/dev/null 2>"$WORK/bench_bad.err"
check "bench runtime --compare-gguf: a CSV without llama-bench's columns is bad input (2)" test $? -eq 2
check "bench runtime --compare-gguf: error names the file and column" grep -q "bad.csv:1: no column 'n_prompt'" "$WORK/bench_bad.err"
mkdir -p "$WORK/gguf_size"
printf 'model_type,model_size,n_threads,n_prompt,n_gen,avg_ts\n"x Q8_0","0","2","0","4","12"\n' >"$WORK/gguf_size/zero.csv"
"$RLSIM" bench runtime --shape "$WORK/tiny_config.json" --precision bf16 --compare-gguf "$WORK/gguf_size" >/dev/null 2>"$WORK/bench_bad.err"
check "bench runtime --compare-gguf: a model_size of 0 is bad input (2), named with file and line" \
  sh -c "test $? -eq 2 && grep -q \"zero.csv:2: expected model_size a byte count >= 1, got '0'\" '$WORK/bench_bad.err'"
mkdir -p "$WORK/gguf_num"
printf 'model_type,n_threads,n_prompt,n_gen,avg_ts\n"x Q8_0","2","0","4","12abc"\n' >"$WORK/gguf_num/partial.csv"
"$RLSIM" bench runtime --shape "$WORK/tiny_config.json" --precision bf16 --compare-gguf "$WORK/gguf_num" >/dev/null 2>"$WORK/bench_bad.err"
check "bench runtime --compare-gguf: a field that is not wholly a number is bad input (2)" test $? -eq 2
check "bench runtime --compare-gguf: error names the file, line and field" grep -q "partial.csv:2: .*'12abc'" "$WORK/bench_bad.err"
"$RLSIM" bench runtime --shape "$WORK/tiny_config.json" --precision bf16 --compare-gguf "$WORK/no_such_dir" >/dev/null 2>"$WORK/bench_bad.err"
check "bench runtime --compare-gguf: a missing folder is bad input (2)" test $? -eq 2
# llama-bench -o json in the folder: the best of samples_ts, not avg_ts, is the baseline.
mkdir -p "$WORK/gguf_json"
cat >"$WORK/gguf_json/q4.json" <<'JSON'
[{"model_type": "llama 1M Q4_0", "model_size": 1000000000, "n_threads": 2, "n_prompt": 16, "n_gen": 0, "avg_ts": 900.0,
  "samples_ts": [800.0, 1000.0, 900.0]},
 {"model_type": "llama 1M Q4_0", "model_size": 1000000000, "n_threads": 2, "n_prompt": 0, "n_gen": 4, "avg_ts": 90.0,
  "samples_ts": [100.0, 80.0, 90.0]}]
JSON
"$RLSIM" bench runtime --shape "$WORK/tiny_config.json" --precision int4-w4a16-g32 --decode-tokens 4 --prefill-tokens 16 \
  --repeat 1 --compare-gguf "$WORK/gguf_json" >"$WORK/bench_json.txt" 2>/dev/null
check "bench runtime --compare-gguf, JSON files: compared with the best sample (the gguf line's 100.0 tok/s)" \
  sh -c "grep -qE '^compare int4-w4a16-g32 Q4_0 prefill_ratio [0-9.]+ decode_ratio [0-9.]+ baseline best$' '$WORK/bench_json.txt' &&
         grep -q '^gguf Q4_0 decode 100.0 tok/s model_bytes 1000000000 ' '$WORK/bench_json.txt'"
echo '[{"model_type": "llama 1M Q4_0", "n_threads": 2, "n_prompt": 0, "n_gen": 4, "avg_ts": 9, "samples_ts": [9, -1]}]' \
  >"$WORK/gguf_json/q4.json"
"$RLSIM" bench runtime --shape "$WORK/tiny_config.json" --precision bf16 --compare-gguf "$WORK/gguf_json" >/dev/null 2>"$WORK/bench_bad.err"
check "bench runtime --compare-gguf: a negative sample in a JSON file is bad input (2), named with file and test" \
  sh -c "test $? -eq 2 && grep -q 'q4.json: test 1: expected samples_ts a positive number of tok/s, got -1' '$WORK/bench_bad.err'"
# --llama-bench: rlsim runs llama-bench itself on the folder's GGUF files, interleaved with its own
# runs. The stand-in prints -o json for the weight type written in the "GGUF" file, its best
# sample 10 % over the mean, and logs its arguments.
mkdir -p "$WORK/ggufs"
echo Q4_0 >"$WORK/ggufs/a.gguf"
echo BF16 >"$WORK/ggufs/b.gguf"
cat >"$WORK/fake-llama-bench" <<'SH'
#!/bin/sh
echo "$*" >>"$(dirname "$0")/fake-llama-bench.log"
while [ $# -gt 0 ]; do
  case "$1" in -m) m=$2;; -t) t=$2;; -p) p=$2;; -n) n=$2;; -o) o=$2;; esac
  shift 2
done
[ "$o" = json ] || { echo "expected -o json" >&2; exit 1; }
read -r type flag <"$m"
[ "$type" = broken ] && { echo "error: failed to load model '$m'" >&2; exit 1; }
printf '[\n'
[ "$p" -gt 0 ] && [ "${flag:-}" != no-prefill ] && printf '{"model_type": "llama 1M %s", "model_size": 2000000000, "n_threads": %s, "n_prompt": %s, "n_gen": 0, "avg_ts": 400.0, "samples_ts": [400.0, 440.0, 360.0]},\n' "$type" "$t" "$p"
printf '{"model_type": "llama 1M %s", "model_size": 2000000000, "n_threads": %s, "n_prompt": 0, "n_gen": %s, "avg_ts": 40.0, "samples_ts": [36.0, 44.0, 40.0]}\n]\n' "$type" "$t" "$n"
SH
chmod +x "$WORK/fake-llama-bench"
"$RLSIM" bench runtime --shape "$WORK/tiny_config.json" --precision fp32,int4-w4a16-g32,bf16,nvfp4 --decode-tokens 4 \
  --prefill-tokens 16 --repeat 2 --threads 1 --llama-bench "$WORK/fake-llama-bench" --compare-gguf "$WORK/ggufs" \
  >"$WORK/bench_lb.txt" 2>"$WORK/bench_lb.err"
check "bench runtime --llama-bench: exit 0, each file's type learned from a one-token run" \
  sh -c "test $? -eq 0 && grep -q 'a.gguf is Q4_0' '$WORK/bench_lb.err' && grep -q 'b.gguf is BF16' '$WORK/bench_lb.err' &&
         test \"\$(grep -c -- '-p 0 -n 1 -r 1\$' '$WORK/fake-llama-bench.log')\" -eq 2"
check "bench runtime --llama-bench: one run after each recipe of a class present (not fp32), with our -t, -p, -n, -r" \
  sh -c "test \"\$(grep -c -- '-t 1 -o json -p 16 -n 4 -r 2\$' '$WORK/fake-llama-bench.log')\" -eq 3 &&
         test \"\$(grep '^llama-bench \|^decode ' '$WORK/bench_lb.txt' | cut -d' ' -f1,2 | tr '\n' ' ')\" = \
'decode fp32 decode int4-w4a16-g32 llama-bench Q4_0 decode bf16 llama-bench BF16 decode nvfp4 llama-bench Q4_0 '"
check "bench runtime --llama-bench: the best samples, each ratio against the run right after the recipe" \
  awk '/^llama-bench / { if ($4 != "440.0" || $7 != "44.0") bad = 1 }
       /^prefill / { pre[$2] = $3 } /^decode / { dec[$2] = $3 }
       function off(got, want) { d = got - want; return (d < 0 ? -d : d) > 0.005 + want * 0.001 + 1e-9 }
       /^compare / { n++; if ($8 != "baseline" || $9 != "best" || off($5, pre[$2] / 440) || off($7, dec[$2] / 44)) bad = 1 }
       END { exit !(n == 3 && !bad) }' "$WORK/bench_lb.txt"
"$RLSIM" bench runtime --shape "$WORK/tiny_config.json" --precision bf16 --llama-bench "$WORK/fake-llama-bench" >/dev/null 2>"$WORK/bench_bad.err"
check "bench runtime --llama-bench without --compare-gguf is bad input (2)" \
  sh -c "test $? -eq 2 && grep -q 'needs --compare-gguf' '$WORK/bench_bad.err'"
"$RLSIM" bench runtime --shape "$WORK/tiny_config.json" --precision bf16 --llama-bench "$WORK/no-such-llama-bench" \
  --compare-gguf "$WORK/ggufs" >/dev/null 2>"$WORK/bench_bad.err"
check "bench runtime --llama-bench: a program that cannot run is bad input (2), named with the system's reason" \
  sh -c "test $? -eq 2 && grep -q 'no-such-llama-bench: cannot run it (No such file or directory)' '$WORK/bench_bad.err'"
echo broken >"$WORK/ggufs/c.gguf"
"$RLSIM" bench runtime --shape "$WORK/tiny_config.json" --precision bf16 --llama-bench "$WORK/fake-llama-bench" \
  --compare-gguf "$WORK/ggufs" >/dev/null 2>"$WORK/bench_bad.err"
check "bench runtime --llama-bench: a failing run is bad input (2), with its exit status and last stderr line" \
  sh -c "test $? -eq 2 && grep -q \"c.gguf -t 2 -o json -p 0 -n 1 -r 1: exit status 1 (error: failed to load model\" '$WORK/bench_bad.err'"
echo BF16 >"$WORK/ggufs/c.gguf"
"$RLSIM" bench runtime --shape "$WORK/tiny_config.json" --precision bf16 --llama-bench "$WORK/fake-llama-bench" \
  --compare-gguf "$WORK/ggufs" >/dev/null 2>"$WORK/bench_bad.err"
check "bench runtime --llama-bench: two files of one weight type are bad input (2)" \
  sh -c "test $? -eq 2 && grep -q 'c.gguf: a second BF16 file beside .*b.gguf' '$WORK/bench_bad.err'"
echo 'Q8_0 no-prefill' >"$WORK/ggufs/c.gguf"
"$RLSIM" bench runtime --shape "$WORK/tiny_config.json" --precision fp8-block --decode-tokens 4 --prefill-tokens 16 --repeat 1 \
  --llama-bench "$WORK/fake-llama-bench" --compare-gguf "$WORK/ggufs" >/dev/null 2>"$WORK/bench_bad.err"
check "bench runtime --llama-bench: a run without the prefill test is bad input (2), named" \
  sh -c "test $? -eq 2 && grep -q 'c.gguf: llama-bench printed no Q8_0 prefill test' '$WORK/bench_bad.err'"
"$RLSIM" bench runtime --shape "$WORK/tiny_config.json" --precision bf16 --decode-tokens 4 --prefill-tokens 16 --repeat 1 --batch-invariant \
  >"$WORK/bench_bi.txt" 2>/dev/null
check "bench runtime --batch-invariant: decode and prefill lines with the ratio" \
  test "$(grep -cE '^batch-invariant (decode|prefill) bf16 [0-9]+\.[0-9] tok/s ratio [0-9]+\.[0-9]{2}$' "$WORK/bench_bi.txt")" -eq 2
"$RLSIM" bench runtime --shape "$WORK/tiny_config.json" --precision fp7 >/dev/null 2>"$WORK/bench_bad.err"
check "bench runtime: unknown precision is bad input (2)" test $? -eq 2
echo '{"model_type": "llama"}' >"$WORK/bad_config.json"
"$RLSIM" bench runtime --shape "$WORK/bad_config.json" >/dev/null 2>"$WORK/bench_bad.err"
check "bench runtime: bad config is bad input (2)" test $? -eq 2
check "bench runtime: error names the file and key" grep -q "bad_config.json: missing integer key 'num_hidden_layers'" "$WORK/bench_bad.err"
# A shape whose synthetic weights no host holds (6 x 10^13 parameters): refused before anything is
# allocated, where Linux's OOM killer would otherwise end the process without a word.
write_vast_config "$WORK/vast_config.json"
for what in runtime reload; do
  "$RLSIM" bench $what --shape "$WORK/vast_config.json" >/dev/null 2>"$WORK/bench_vast.err"
  check "bench $what: a shape beyond the host's memory is bad input (2)" test $? -eq 2
  check "bench $what: the error names the shape, its parameters and the memory they need" \
    grep -qE "vast_config.json \(61268951105536 parameters\) need at least [0-9.]+ GB of host memory" "$WORK/bench_vast.err"
done
# The same shape as a Hugging Face directory (config.json alone): every command that loads a model
# refuses it from its config, before it looks for the safetensors.
mkdir -p "$WORK/vast_model" && cp "$WORK/vast_config.json" "$WORK/vast_model/config.json"
for cmd in "generate --model $WORK/vast_model" "drift --model $WORK/vast_model --pairs bf16:bf16" \
  "bench reload --model $WORK/vast_model" "bench host --model $WORK/vast_model"; do
  "$RLSIM" $cmd >/dev/null 2>"$WORK/load_vast.err"
  check "$cmd: a model beyond the host's memory is bad input (2)" test $? -eq 2
  check "$cmd: the error names the model, its parameters and the memory they need" \
    grep -qE "vast_model \(61268951105536 parameters\) need at least [0-9.]+ GB of host memory" "$WORK/load_vast.err"
done

# --- rlsim bench reload: per-cycle stage lines, the two verdict lines last, bad input -----------
"$RLSIM" bench reload --model "$ST/stories260K.bin" --precision fp8-block,int4-w4a16-g32 --cycles 3 --check-every 2 \
  >"$WORK/reload.txt" 2>"$WORK/reload.err"
check "bench reload: exit 0" test $? -eq 0
check "bench reload: one line per cycle and precision with the four stages and their bytes" \
  test "$(grep -cE '^cycle [1-3] restore_ms [0-9.]+ load_ms [0-9.]+ quantize_ms [0-9.]+ transform_ms [0-9.]+ total_ms [0-9.]+ restore_bytes [1-9][0-9]* load_bytes [1-9][0-9]* quantize_bytes [1-9][0-9]* transform_bytes [1-9][0-9]*' "$WORK/reload.txt")" -eq 6
check "bench reload: cycles 2 and 3 compared with a fresh load" test "$(grep -c ' logit_diff 0$' "$WORK/reload.txt")" -eq 4
check "bench reload: per-byte cost of each stage" test "$(grep -cE '^stage (restore|load|quantize|transform) ms_per_cycle .* ns_per_byte [0-9.]+$' "$WORK/reload.txt")" -eq 8
check "bench reload: last two lines" test "$(tail -n 2 "$WORK/reload.txt" | tr '\n' ' ')" = "max_abs_logit_diff 0 addresses_stable yes "
"$RLSIM" bench reload --model synthetic-moe --precision mxfp8 --cycles 2 >"$WORK/reload_moe.txt" 2>/dev/null
check "bench reload: synthetic MoE, exit 0 and bit-exact" test "$?:$(tail -n 2 "$WORK/reload_moe.txt" | head -n 1)" = "0:max_abs_logit_diff 0"
"$RLSIM" bench reload --model "$ST/stories260K.bin" --precision fp9 --cycles 2 >/dev/null 2>&1
check "bench reload: unknown precision is bad input (2)" test $? -eq 2
"$RLSIM" bench reload --precision fp8-block --cycles 2 >/dev/null 2>"$WORK/reload_bad.err"
check "bench reload: --model is required (2)" test $? -eq 2
check "bench reload: the error says so" grep -q "model is required" "$WORK/reload_bad.err"
"$RLSIM" bench reload --model "$WORK/no-such-model.bin" --cycles 2 >/dev/null 2>&1
check "bench reload: missing model file is bad input (2)" test $? -eq 2
"$RLSIM" bench reload --model "$ST/stories260K.bin" --cycles 0 >/dev/null 2>&1
check "bench reload: zero cycles is bad input (2)" test $? -eq 2

# --- rlsim drift: the stories260K drift scenarios, reduced; determinism; bad input ----------------
DR=(--prompts 2 --samples 2 --lengths 8,24 --bootstrap 50)
"$RLSIM" drift "$SRC/scenarios/drift-stories260k.yaml" "${DR[@]}" --out "$WORK/drift1" >"$WORK/drift1.txt" 2>"$WORK/drift1.err"
check "drift scenario: exit 0" test $? -eq 0
check "drift: drift.csv header" grep -qx "train,rollout,length,metric,value,ci_low,ci_high" "$WORK/drift1/drift.csv"
for pair in bf16,bf16 bf16,fp8-block fp8-block,fp8-block bf16,int4-w4a16-g32 int4-qat-g32,int4-w4a16-g32 bf16,mxfp8 bf16,nvfp4 \
  fp8-block,fp8-block+kv=fp8-e4m3; do
  for m in mean_abs_delta p99_abs_delta kl max_prob_diff seq_log_ratio_abs tis_clip_fraction; do
    grep -q "^$pair,24,$m," "$WORK/drift1/drift.csv" || { echo "missing $pair,24,$m"; fail=$((fail + 1)); }
  done
done
check "drift: 8 pairs x 2 lengths x 7 metrics" test "$(wc -l <"$WORK/drift1/drift.csv")" -eq $((1 + 8 * 2 * 7))
check "drift: per_token.csv has 8 pairs x 4 sequences x 24 tokens" test "$(wc -l <"$WORK/drift1/per_token.csv")" -eq $((1 + 8 * 4 * 24))
check "drift: three plots" test -s "$WORK/drift1/drift_vs_length.png" -a -s "$WORK/drift1/drift_vs_position.png" -a -s "$WORK/drift1/delta_histogram.png"
check "drift: summary table on stdout" grep -q "^bf16:fp8-block  *24 " "$WORK/drift1.txt"
# FP8 rollout against BF16 training drifts more than the kernel path alone (bf16:bf16).
awk -F, '$3==24 && $4=="mean_abs_delta" {v[$1":"$2]=$5} END {exit !(v["bf16:fp8-block"] > 3 * v["bf16:bf16"] && v["bf16:nvfp4"] > v["bf16:fp8-block"])}' \
  "$WORK/drift1/drift.csv"
check "drift: mean |delta| bf16:nvfp4 > bf16:fp8-block > 3x bf16:bf16" test $? -eq 0
OMP_NUM_THREADS=1 "$RLSIM" drift "$SRC/scenarios/drift-stories260k.yaml" "${DR[@]}" --out "$WORK/drift2" --no-plots -q
check "drift: same seed (and 1 thread instead of 2) -> identical drift.csv" cmp -s "$WORK/drift1/drift.csv" "$WORK/drift2/drift.csv"
check "drift: same seed -> identical per_token.csv" cmp -s "$WORK/drift1/per_token.csv" "$WORK/drift2/per_token.csv"
"$RLSIM" drift "$SRC/scenarios/drift-stories260k-batch-invariant.yaml" "${DR[@]}" --out "$WORK/drift_bi" -q --no-plots
check "drift batch-invariant scenario: exit 0" test $? -eq 0
awk -F, 'NR > 1 && !($1 == "bf16" && $2 == "fp8-block") {n++; if ($9 != 0) bad++} END {exit !(n == 3 * 4 * 24 && bad == 0)}' "$WORK/drift_bi/per_token.csv"
check "drift --batch-invariant: delta exactly 0 at every position for identical numerics" test $? -eq 0
awk -F, 'NR > 1 && $1 == "bf16" && $2 == "fp8-block" && $9 != 0 {n++} END {exit !(n > 0)}' "$WORK/drift_bi/per_token.csv"
check "drift --batch-invariant: a precision pair still drifts" test $? -eq 0
"$RLSIM" drift --model "$ST/stories260K.bin" --pairs bf16:bf16 --lengths 8 --prompts 1 --samples 1 --batch-invariant -q --no-plots --out "$WORK/drift_cli"
check "drift from options alone: zero delta with --batch-invariant" test "$(awk -F, '$4=="mean_abs_delta" {print $5}' "$WORK/drift_cli/drift.csv")" = "0"
printf 'model: ../models/x.bin\npairs: [bf16:bf16]\nlenghts: [8]\n' >"$WORK/bad_drift.yaml"
"$RLSIM" drift "$WORK/bad_drift.yaml" >/dev/null 2>"$WORK/bad_drift.err"
check "drift: unknown key is bad input (2)" test $? -eq 2
check "drift: error names file, line, column and key" grep -q "bad_drift.yaml:3:1: unknown key 'lenghts'" "$WORK/bad_drift.err"
printf 'model: %s\npairs: [bf16:fp9]\n' "$ST/stories260K.bin" >"$WORK/bad_pair.yaml"
"$RLSIM" drift "$WORK/bad_pair.yaml" >/dev/null 2>"$WORK/bad_pair.err"
check "drift: unknown recipe is bad input (2), with the line" test $? -eq 2 -a -n "$(grep 'bad_pair.yaml:2:' "$WORK/bad_pair.err")"
"$RLSIM" drift --model "$ST/stories260K.bin" --pairs bf16:bf16 --lengths 600 --out "$WORK/drift_long" >/dev/null 2>"$WORK/long.err"
check "drift: length past max_seq is bad input (2)" test $? -eq 2
check "drift: ... and says so" grep -q "max_seq 512" "$WORK/long.err"
check "drift: nothing half-written on error" test ! -e "$WORK/drift_long" -a ! -e "$WORK/.drift_long.tmp"
"$RLSIM" drift --model "$ST/stories260K.bin" --pairs bf16:bf16 --temperature 0 >/dev/null 2>&1
check "drift: temperature 0 is bad input (2)" test $? -eq 2

# --- rlsim import verl: a launch script into a scenario that runs; bad input -----------------------
"$RLSIM" import verl "$SRC/tests/data/verl/run_qwen3_8b_grpo.sh" --device h100-sxm --out "$WORK/imported.yaml" 2>"$WORK/import.err"
check "import verl: exit 0" test $? -eq 0
check "import verl: the repeated key's last value, with its verl key" \
  grep -q "tensor_parallel: 2 .*# verl actor_rollout_ref.rollout.tensor_model_parallel_size=2$" "$WORK/imported.yaml"
check "import verl: unmodelled keys are warnings with their line" grep -q "line 27: actor_rollout_ref.rollout.enable_chunked_prefill" "$WORK/import.err"
"$RLSIM" run "$WORK/imported.yaml" --out "$WORK/imported_run" -q --no-plots --no-trace
check "import verl: the imported scenario runs" test -s "$WORK/imported_run/summary.json"
"$RLSIM" import verl -- actor_rollout_ref.model.path=Qwen/Qwen3-8B data.train_batch_size=512 >"$WORK/import2.yaml" 2>/dev/null
check "import verl -- KEY=VALUE: verl defaults for the rest" grep -q "max_num_seqs: 1024 .*(verl default)" "$WORK/import2.yaml"
printf 'step:1 - timing_s/gen:900 - timing_s/old_log_prob:50 - timing_s/ref:45 - timing_s/update_actor:160 - timing_s/step:1200\nstep:2 - timing_s/gen:np.float64(600.5) - timing_s/old_log_prob:40 - timing_s/ref:38 - timing_s/update_actor:150 - timing_s/step:860\n' >"$WORK/verl_timing.log"
"$RLSIM" calibrate "$WORK/imported.yaml" --verl-log "$WORK/verl_timing.log" --out "$WORK/cal_verl" >"$WORK/cal_verl.txt" 2>/dev/null
check "calibrate --verl-log: exit 0 and a calibration.yaml" test $? -eq 0 -a -s "$WORK/cal_verl/calibration.yaml"
awk '$1 == "phase.rollout" {m = $2; b = $3; a = $5} END {exit !(m == 600.50 && (a - m) ^ 2 < (b - m) ^ 2)}' "$WORK/cal_verl.txt"
check "calibrate --verl-log: measured (step 1 left out) vs predicted, closer after than before" test $? -eq 0
check "calibrate --verl-log: no temporary record left" test -z "$(ls -A "$WORK" | grep verl-log.yaml)"
"$RLSIM" run "$WORK/imported.yaml" --calibration "$WORK/cal_verl/calibration.yaml" --out "$WORK/run_verl_cal" -q --no-plots --no-trace
check "calibrate --verl-log: its calibration.yaml runs the scenario" test $? -eq 0
"$RLSIM" import verl "$SRC/tests/data/verl/run_qwen3_8b_grpo.sh" --device h1000 >/dev/null 2>"$WORK/import_bad.err"
check "import verl: unknown device is bad input (2) with the catalog" test $? -eq 2 -a -n "$(grep 'unknown device' "$WORK/import_bad.err")"

# --- I/O failures are the environment's (exit 4, path and reason); signals stop cleanly ---------
"$RLSIM" run "$SRC/scenarios/default.yaml" --out "$WORK/io_prev" -q --no-plots --no-trace >/dev/null
"$RLSIM" run "$SRC/scenarios/default.yaml" --out /etc/hostname/sub -q --no-plots --no-trace 2>"$WORK/io1.err"
check "I/O: an output under a file is exit 4 with the system's reason" \
  test $? -eq 4 -a -n "$(grep 'cannot write /etc/hostname/sub: Not a directory' "$WORK/io1.err")"
(trap '' XFSZ; ulimit -f 16; exec "$RLSIM" run "$SRC/scenarios/default.yaml" --out "$WORK/io_prev" -q --no-plots) 2>"$WORK/io2.err"
check "I/O: a write that fails half-way (file size limit) is exit 4 with the reason" \
  test $? -eq 4 -a -n "$(grep 'File too large' "$WORK/io2.err")"
check "I/O: ... the previous output is intact and no temporary is left" \
  test -s "$WORK/io_prev/summary.json" -a ! -e "$WORK/.io_prev.tmp"
mkdir -p "$WORK/.io_prev.tmp/stale"
"$RLSIM" run "$SRC/scenarios/default.yaml" --out "$WORK/io_prev" -q --no-plots --no-trace >/dev/null
check "I/O: a killed run's stale temporary directory is removed by the next run to the path" \
  test ! -e "$WORK/.io_prev.tmp" -a -s "$WORK/io_prev/summary.json"
"$RLSIM" run "$SRC/scenarios/default.yaml" --set workload.prompts_per_step=16384 --set steps=50 --out "$WORK/io_prev" -q \
  2>"$WORK/sig.err" &
SIMPID=$!
sleep 1.5
kill -INT $SIMPID
wait $SIMPID
check "signals: SIGINT stops the run with exit 130" test $? -eq 130
check "signals: ... no temporary output is left and the previous output is kept" \
  test ! -e "$WORK/.io_prev.tmp" -a -s "$WORK/io_prev/summary.json"

# --- the README's worked example: import a verl DAPO launch with its log, calibrate, plan -------
EX=docs/examples/verl-dapo
(cd "$SRC" && "$RLSIM" import verl $EX/run_dapo_qwen2.5_math_7b_megatron.sh --device h20 --log $EX/console.log \
  --out "$WORK/dapo.yaml" 2>/dev/null)
check "worked example: the import is the committed imported.yaml, byte for byte" cmp -s "$WORK/dapo.yaml" "$SRC/$EX/imported.yaml"
"$RLSIM" calibrate "$SRC/$EX/imported.yaml" --verl-log "$SRC/$EX/console.log" --out "$WORK/dapo_cal" >"$WORK/dapo_cal.txt" 2>/dev/null
awk '$1 == "step_time" {e = $6; gsub(/[%+-]/, "", e); exit !(e + 0 < 5)}' "$WORK/dapo_cal.txt"
check "worked example: calibrated on its log, the step is within 5 % of the log's" test $? -eq 0
check "worked example: no temporary record left beside the scenario" test -z "$(ls -A "$SRC/$EX" | grep verl-log)"
"$RLSIM" plan "$SRC/$EX/what-if.yaml" --calibration "$WORK/dapo_cal/calibration.yaml" --out "$WORK/dapo_plan" -q --no-plots \
  >"$WORK/dapo_plan.txt" 2>/dev/null
check "worked example: the what-if study runs and recommends a point" grep -q "^recommended: rollout.tensor_parallel=" "$WORK/dapo_plan.txt"

# --- rlsim import slime: a launch with bash arrays into a scenario that runs; bad input -----------
"$RLSIM" import slime "$SRC/tests/data/slime/run_qwen3_30b_a3b_async.sh" --device h200 --out "$WORK/slime.yaml" \
  -- --rollout-num-gpus-per-engine 4 --sglang-ep-size 4 2>"$WORK/slime.err"
check "import slime: exit 0" test $? -eq 0
check "import slime: a flag after the script wins, with its slime flag" \
  grep -q "tensor_parallel: 4 .*# slime --rollout-num-gpus-per-engine 4$" "$WORK/slime.yaml"
check "import slime: train_async.py is one step off" grep -q "schedule: {mode: one-step-off}" "$WORK/slime.yaml"
check "import slime: unknown flags are warnings with their line" grep -q "line 19: --some-future-flag 3" "$WORK/slime.err"
"$RLSIM" run "$WORK/slime.yaml" --out "$WORK/slime_run" -q --no-plots --no-trace
check "import slime: the imported scenario runs" test -s "$WORK/slime_run/summary.json"
"$RLSIM" import slime -- --hf-checkpoint Qwen3-8B --colocate >/dev/null 2>"$WORK/slime_bad.err"
check "import slime: a missing --rollout-batch-size is bad input (2)" \
  test $? -eq 2 -a -n "$(grep 'rollout-batch-size is required' "$WORK/slime_bad.err")"
"$RLSIM" import slime "$SRC/tests/data/slime/run_qwen3_30b_a3b_async.sh" -- --rollout-num-gpus-per-engine 4 >/dev/null 2>"$WORK/slime_bad2.err"
check "import slime: an imported layout that breaks a scenario rule is bad input (2), with the rule" \
  test $? -eq 2 -a -n "$(grep 'scenario:[0-9]*:[0-9]*: rollout.expert_parallel ([0-9]*) must divide' "$WORK/slime_bad2.err")"

# --- async schedule end to end: staleness and idle ratios in summary.json ------------------------
"$RLSIM" run "$WORK/base.yaml" --out "$WORK/async" -q --no-plots --set placement.mode=disaggregated \
  --set placement.rollout_devices=4 --set placement.train_devices=4 --set schedule.mode=async --set schedule.partial_rollout=true
check "async: exit 0" test $? -eq 0
check "async: summary has staleness" grep -q '"stale_fraction"' "$WORK/async/summary.json"
check "async: summary has idle ratios" grep -q '"idle_ratio"' "$WORK/async/summary.json"
check "async: requests.csv has staleness" grep -q "policy_version,staleness" "$WORK/async/requests.csv"

# --- rlsim plan: studies ---------------------------------------------------------------------------
cat > "$WORK/study.yaml" <<'YAML'
name: cli plan
base: base.yaml
sweep:
  cluster.nodes: [1, 2]
  rollout.precision: [bf16, fp8-block]
  rollout.tensor_parallel: [1, 3]
objective: device_hours_per_step
constraints: {fits_memory: true, max_step_time: 900 s}
YAML
"$RLSIM" plan "$WORK/study.yaml" --out "$WORK/plan1" --jobs 1 >"$WORK/plan1.stdout" 2>&1
check "plan: exit 0" test $? -eq 0
"$RLSIM" plan "$WORK/study.yaml" --out "$WORK/plan2" --jobs 2 >"$WORK/plan2.stdout" 2>&1
check "plan: --jobs 1 and --jobs 2 give the same results.csv" cmp -s "$WORK/plan1/results.csv" "$WORK/plan2/results.csv"
check "plan: --jobs 1 and --jobs 2 give the same plan.json" cmp -s "$WORK/plan1/plan.json" "$WORK/plan2/plan.json"
check "plan: results.csv has one row per point" test "$(wc -l <"$WORK/plan1/results.csv")" -eq 9
check "plan: results.csv names swept columns by dotted key" \
  grep -q "^point,cluster.nodes,rollout.precision,rollout.tensor_parallel,status,step_time_s," "$WORK/plan1/results.csv"
check "plan: results.csv has fits and device_hours_per_step" bash -c "head -1 '$WORK/plan1/results.csv' | grep -q ',fits,.*,device_hours_per_step,'"
awk -F, 'NR == 1 {for (i = 1; i <= NF; i++) if ($i == "fits") c = i; next} $c != "true" && $c != "false" {bad++} END {exit !(c > 0 && bad == 0)}' \
  "$WORK/plan1/results.csv"
check "plan: fits is true or false on every row" test $? -eq 0
check "plan: the TP-3 points are recorded as invalid" test "$(grep -c ',3,invalid,' "$WORK/plan1/results.csv")" -eq 4
check "plan: recommended line with the swept keys" \
  grep -qE "^recommended: cluster.nodes=[12] rollout.precision=(bf16|fp8-block) rollout.tensor_parallel=1$" "$WORK/plan1.stdout"
check "plan: the skipped points are listed with the failing override" grep -q "sweep rollout.tensor_parallel=3: " "$WORK/plan1.stdout"
if command -v gnuplot >/dev/null; then
  for png in step_time_heatmap fit_map pareto; do
    check "plan: $png.png is a PNG" bash -c "head -c 8 '$WORK/plan1/$png.png' | od -An -tx1 | grep -q '89 50 4e 47'"
  done
fi
check "plan: --quiet prints the recommended line only" \
  bash -c "'$RLSIM' plan '$WORK/study.yaml' --out '$WORK/plan3' -q --no-plots | grep -c . | grep -qx 1"
check "plan: --no-plots writes no PNG" test ! -e "$WORK/plan3/pareto.png"
"$RLSIM" plan "$WORK/study.yaml" --out "$WORK/plan4" --no-plots --set steps=1 -q >/dev/null
check "plan: --set applies to every point" bash -c "! cmp -s '$WORK/plan1/results.csv' '$WORK/plan4/results.csv'"
sed 's/rollout.precision:/rollout.precison:/' "$WORK/study.yaml" >"$WORK/study_typo.yaml"
"$RLSIM" plan "$WORK/study_typo.yaml" --out "$WORK/plan_typo" >/dev/null 2>"$WORK/plan_typo.err"
check "plan: a misspelt swept key is bad input (2)" test $? -eq 2
check "plan: ... naming the study's line and the key" grep -q "study_typo.yaml:5:3: sweep rollout.precison=bf16: unknown key 'rollout.precison'" "$WORK/plan_typo.err"
check "plan: ... and writing nothing" test ! -e "$WORK/plan_typo"
printf 'base: base.yaml\nsweep:\n  cluster.nodes: [1, 2]\nconstraints: {max_step_time: 900}\n' >"$WORK/study_bad.yaml"
"$RLSIM" plan "$WORK/study_bad.yaml" --out "$WORK/plan_bad" >/dev/null 2>"$WORK/plan_bad.err"
check "plan: a time without unit is bad input (2) at file:line:column" \
  test $? -eq 2 -a -n "$(grep "study_bad.yaml:4:30: 'constraints.max_step_time'" "$WORK/plan_bad.err")"
"$RLSIM" run "$WORK/study.yaml" --out "$WORK/run_study" >/dev/null 2>"$WORK/run_study.err"
check "run on a study file: exit 2, pointing to rlsim plan" test $? -eq 2 -a -n "$(grep 'rlsim plan' "$WORK/run_study.err")"
# A file meant for another command: exit 2 naming that command, nothing written.
while read -r cmd file other; do
  "$RLSIM" "$cmd" "$SRC/scenarios/$file" --out "$WORK/wrong_kind" >/dev/null 2>"$WORK/wrong_kind.err"
  check "$cmd on $file: exit 2, pointing to rlsim $other" \
    test $? -eq 2 -a -n "$(grep -F "run it with \`rlsim $other $SRC/scenarios/$file\`" "$WORK/wrong_kind.err")"
  check "... and writing nothing" test ! -e "$WORK/wrong_kind"
done <<'KINDS'
drift default.yaml run
train drift-stories260k.yaml drift
run train-lipogram-bf16.yaml train
plan default.yaml run
KINDS
"$RLSIM" plan --help >"$WORK/plan_help.txt"
check "plan --help lists --jobs, --set, --heatmap" bash -c "grep -q -- '--jobs' '$WORK/plan_help.txt' && grep -q -- '--set' '$WORK/plan_help.txt' && grep -q -- '--heatmap' '$WORK/plan_help.txt'"
"$RLSIM" bench plan --repeat 1 >"$WORK/bench_plan.txt"
check "bench plan: exit 0 and prints points/s" test $? -eq 0 -a -n "$(grep -E 'best wall [0-9.]+ s, [0-9.]+ points/s' "$WORK/bench_plan.txt")"

# --- rlsim validate / calibrate: records of published runs ------------------------------------------
"$RLSIM" validate --out "$WORK/val" >"$WORK/val.stdout" 2>&1
check "validate: every repository record in band (exit 0)" test $? -eq 0
check "validate: writes validation.csv and parity.png" test -s "$WORK/val/validation.csv" -a -s "$WORK/val/parity.png"
check "validate: CSV header" grep -q '^record,figure,predicted,published,error,band,in_band,source$' "$WORK/val/validation.csv"
check "validate: statistics line" grep -qE 'step time \|error\|: median [0-9.]+ %, worst [0-9.]+ %' "$WORK/val.stdout"
sed 's/published: 97.7 s/published: 300 s/' "$SRC/scenarios/validation/nemo-rl-llama3.1-8b-h100-16.yaml" >"$WORK/off_band.yaml"
"$RLSIM" validate "$WORK/off_band.yaml" --out "$WORK/val_off" --no-plots >"$WORK/val_off.stdout" 2>&1
check "validate: a figure out of band exits 1" test $? -eq 1 -a -n "$(grep 'OUT OF BAND' "$WORK/val_off.stdout")"
sed 's/published: 97.7 s/published: 97.7/' "$SRC/scenarios/validation/nemo-rl-llama3.1-8b-h100-16.yaml" >"$WORK/val_bad.yaml"
"$RLSIM" validate "$WORK/val_bad.yaml" --out "$WORK/val_bad" >/dev/null 2>"$WORK/val_bad.err"
check "validate: a time without unit is bad input (2) at file:line:column, nothing written" \
  test $? -eq 2 -a -n "$(grep -E 'val_bad.yaml:[0-9]+:[0-9]+: .*published' "$WORK/val_bad.err")" -a ! -e "$WORK/val_bad"
"$RLSIM" calibrate "$SRC/scenarios/validation/nemo-rl-llama3.1-8b-h100-16.yaml" \
  "$SRC/scenarios/validation/nemo-rl-qwen3-32b-h100-32.yaml" --out "$WORK/cal" >"$WORK/cal.stdout" 2>&1
check "calibrate: exit 0, calibration.yaml with leave-one-out" test $? -eq 0 -a -s "$WORK/cal/calibration.yaml" -a -n "$(grep 'leave-one-out:' "$WORK/cal.stdout")"
"$RLSIM" run "$SRC/scenarios/default.yaml" --calibration "$WORK/cal/calibration.yaml" --out "$WORK/run_cal" -q >/dev/null 2>&1
check "run --calibration FILE reads what calibrate wrote" test $? -eq 0
printf 'devices:\n  h100-sxm: {memory: 2.0}\n' >"$WORK/cal_bad.yaml"
"$RLSIM" run "$SRC/scenarios/default.yaml" --calibration "$WORK/cal_bad.yaml" --out "$WORK/run_cal_bad" >/dev/null 2>"$WORK/cal_bad.err"
check "run --calibration with a fraction above 1: exit 2 at file:line:column" test $? -eq 2 -a -n "$(grep 'cal_bad.yaml:2:' "$WORK/cal_bad.err")"

echo "cli: $pass passed, $fail failed"
test "$fail" -eq 0
