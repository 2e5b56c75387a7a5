#!/usr/bin/env python3
"""Writes a GGUF of SmolLM2-135M's shapes with random weights, for llama-bench.

`rlsim bench runtime` times the runtime on synthetic weights at SmolLM2-135M's shapes; this
script makes the same shapes for llama.cpp so that both can be timed on one machine:

    python3 docs/baseline/smollm2_random_gguf.py --gguf-py LLAMA_CPP/gguf-py \
        --config ../shared/models/smollm2-135m-tokenizer/config.json \
        --tokenizer ../shared/models/smollm2-135m-tokenizer/tokenizer.json --out smollm2-f32.gguf
    LLAMA_CPP/build/bin/llama-quantize smollm2-f32.gguf smollm2-bf16.gguf BF16   # and Q8_0, Q4_0
    # (Q8_0 and Q4_0 with the tied embedding in BF16, as the recipes keep their lm_head:
    #  llama-quantize --token-embedding-type bf16 --output-tensor-type bf16 F32 OUT Q4_0)
    LLAMA_CPP/build/bin/llama-bench -m smollm2-bf16.gguf -t 2 -p 512 -n 128 -o csv > DIR/bf16.csv
    rlsim bench runtime --threads 2 --compare-gguf DIR

Weights are N(0, 0.02^2) from a fixed seed (the values do not change the speed); norms are 1.
The tokenizer (GPT-2 byte-level BPE, vocabulary and merges) is copied from tokenizer.json so that
llama.cpp's loader accepts the file. Tensor names and metadata keys are llama.cpp's "llama"
architecture, written with llama.cpp's own gguf-py (--gguf-py), which imports numpy and sentencepiece
(Debian bookworm: apt-get install python3-numpy python3-sentencepiece; run it with /usr/bin/python3).
"""
import argparse
import json
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf-py", required=True, help="llama.cpp's gguf-py directory")
    ap.add_argument("--config", required=True, help="Hugging Face config.json (LlamaForCausalLM)")
    ap.add_argument("--tokenizer", required=True, help="Hugging Face tokenizer.json (BPE)")
    ap.add_argument("--out", required=True, help="GGUF file to write (F32 weights)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    sys.path.insert(0, a.gguf_py)
    import numpy as np
    import gguf

    with open(a.config, encoding="utf-8") as f:
        c = json.load(f)
    with open(a.tokenizer, encoding="utf-8") as f:
        tok = json.load(f)
    dim, ffn, layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    heads, kv_heads, vocab = c["num_attention_heads"], c["num_key_value_heads"], c["vocab_size"]
    head_dim = dim // heads

    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name("SmolLM2-135M shapes, random weights")
    w.add_context_length(c.get("max_position_embeddings", 2048))
    w.add_embedding_length(dim)
    w.add_feed_forward_length(ffn)
    w.add_block_count(layers)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(c.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(c.get("rms_norm_eps", 1e-5)))
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    # Tokenizer: ids in order, merges as "a b" strings, added tokens as control tokens.
    ids = tok["model"]["vocab"]
    tokens = [""] * vocab
    for t, i in ids.items():
        if i < vocab:
            tokens[i] = t
    types = [gguf.TokenType.NORMAL] * vocab
    for t in tok.get("added_tokens", []):
        if t["id"] < vocab:
            tokens[t["id"]] = t["content"]
            types[t["id"]] = gguf.TokenType.CONTROL if t.get("special") else gguf.TokenType.USER_DEFINED
    for i, t in enumerate(tokens):
        if not t:
            tokens[i] = f"[PAD{i}]"
            types[i] = gguf.TokenType.UNUSED
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"].get("merges", [])]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(c.get("bos_token_id", 1))
    w.add_eos_token_id(c.get("eos_token_id", 2))

    rng = np.random.default_rng(a.seed)

    def rand(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)

    w.add_tensor("token_embd.weight", rand(vocab, dim))
    w.add_tensor("output_norm.weight", np.ones(dim, dtype=np.float32))
    if not c.get("tie_word_embeddings", False):
        w.add_tensor("output.weight", rand(vocab, dim))
    kv_dim = kv_heads * head_dim
    for i in range(layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(dim, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", rand(dim, dim))
        w.add_tensor(p + "attn_k.weight", rand(kv_dim, dim))
        w.add_tensor(p + "attn_v.weight", rand(kv_dim, dim))
        w.add_tensor(p + "attn_output.weight", rand(dim, dim))
        w.add_tensor(p + "ffn_norm.weight", np.ones(dim, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", rand(ffn, dim))
        w.add_tensor(p + "ffn_up.weight", rand(ffn, dim))
        w.add_tensor(p + "ffn_down.weight", rand(dim, ffn))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
