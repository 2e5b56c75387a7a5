# Sourced by the CLI test scripts: a scratch folder $WORK removed on exit,
# `check NAME CONDITION...`, which counts passes and failures in $pass and $fail, and
# `write_vast_config FILE`, a Hugging Face config.json no host holds the weights of.
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
pass=0
fail=0
check() {  # check NAME CONDITION...
  local name="$1"
  shift
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $name" >&2; fi
}
write_vast_config() {  # write_vast_config FILE: 6 x 10^13 parameters (61268951105536)
  cat >"$1" <<'JSON'
{"model_type": "llama", "hidden_size": 65536, "intermediate_size": 262144, "num_hidden_layers": 1000,
 "num_attention_heads": 512, "num_key_value_heads": 64, "vocab_size": 1000000, "tie_word_embeddings": true}
JSON
}
