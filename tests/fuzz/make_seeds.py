#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz harnesses (tests/fuzz/corpus/<harness>/) from the
repository's own files and ../shared/models, plus small generated model files (a llama2.c
checkpoint and a safetensors file of a 1-layer, 8-wide Llama; a 40-token BPE tokenizer.json cut
from SmolLM2-135M's). Run from the repository root; the corpora are committed, this script says
how they were made. Inputs of crashes found later are added beside them as regress-*."""
import json, os, re, shutil, struct, sys, glob

root = os.getcwd()
shared = os.path.join(root, "..", "shared", "models")
out = os.path.join(root, "tests", "fuzz", "corpus")


def put(harness, name, data):
    d = os.path.join(out, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def read(path):
    with open(path, "rb") as f:
        return f.read()


# Scenarios, and one with --set overrides.
for p in sorted(glob.glob("scenarios/*.yaml") + glob.glob("scenarios/validation/*.yaml")):
    text = read(p)
    if b"\nbase:" in b"\n" + text or b"\npairs:" in b"\n" + text or b"\ntask:" in b"\n" + text:
        continue  # studies, drift and train files have their own harnesses
    put("scenario", os.path.basename(p), text)
put("scenario", "default-with-set.yaml",
    read("scenarios/default.yaml") + b"\n#--set\nrollout.precision=int4-w4a16-g32\nworkload.prompts_per_step=3\nsteps=2\n")

# Studies, on the harness's base.yaml.
for p in sorted(glob.glob("scenarios/study-*.yaml")):
    put("study", os.path.basename(p), re.sub(rb"(?m)^base: .*$", b"base: base.yaml", read(p)))

# Drift files.
for p in sorted(glob.glob("scenarios/drift-*.yaml")):
    put("drift_file", os.path.basename(p), read(p))

# Train files, and one setting every key.
for p in sorted(glob.glob("scenarios/train-*.yaml")):
    put("train_file", os.path.basename(p), read(p))
put("train_file", "every-key.yaml",
    "name: n\nmodel: m.bin\ntokenizer: t.bin\ntask: lipogram-e\ntraining_precision: fp8-block\nrollout_precision: nvfp4\n"
    "batch_invariant: true\nprompts_per_step: 2\ngroup_size: 2\nresponse_tokens: 8\nsteps: 1\ntrain_ranks: 1\n"
    "learning_rate: 1.0e-3\ntemperature: 0.7\ntis_cap: 2\nseed: 3\nout: o\n")

# Length CSVs.
put("length_csv", "plain.csv", "prompt_tokens,response_tokens\n120,900\n340,1500\n80,8000\n")
put("length_csv", "quoted.csv", '"id","response_tokens"\n"a, b",12\n"c",7\n')

# A 1-layer llama2.c checkpoint: dim 8, hidden 16, 2 heads, 1 KV head, vocab 16, seq 32
# (header of 7 int32, then the float32 tensors in llama2.c's order; a negative vocab means an
# unshared classifier follows).
dim, hidden, layers, heads, kv, vocab, seq = 8, 16, 1, 2, 1, 16, 32
head = dim // heads
floats = (vocab * dim + layers * dim + layers * dim * dim + 2 * layers * dim * kv * head + layers * dim * dim
          + layers * dim + 3 * layers * dim * hidden + dim + seq * head)
weights = b"".join(struct.pack("<f", ((i * 37) % 17 - 8) / 64.0) for i in range(floats))
put("llama2c_checkpoint", "tiny.bin", struct.pack("<7i", dim, hidden, layers, heads, kv, vocab, seq) + weights)
put("llama2c_checkpoint", "header-only.bin", struct.pack("<7i", dim, hidden, layers, heads, kv, vocab, seq))

# llama2.c tokenizer: stories260K's (512 tokens).
put("llama2c_tokenizer", "tok512.bin", read(os.path.join(shared, "stories260K", "tok512.bin")))

# tokenizer.json: SmolLM2's pre-tokenizer, decoder and special tokens with a 40-token vocabulary.
tj = json.loads(read(os.path.join(shared, "smollm2-135m-tokenizer", "tokenizer.json")))
keep = {k: v for k, v in tj["model"]["vocab"].items() if v < 40}
tj["model"]["vocab"] = keep
tj["model"]["merges"] = [m for m in tj["model"]["merges"]
                         if all(part in keep for part in (m.split(" ") if isinstance(m, str) else m))
                         and "".join(m.split(" ") if isinstance(m, str) else m) in keep]
tj["added_tokens"] = [t for t in tj.get("added_tokens", []) if t["id"] < 40]
put("tokenizer_json", "smollm2-40.json", json.dumps(tj))

# config.json: SmolLM2-135M's, and the safetensors harness's tiny Llama.
put("hf_config", "smollm2-135m.json", read(os.path.join(shared, "smollm2-135m-tokenizer", "config.json")))
tiny_config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8, "intermediate_size": 16,
               "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 16,
               "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
               "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2}
put("hf_config", "tiny-llama.json", json.dumps(tiny_config, indent=1))

# model.safetensors of that tiny Llama (F32; 8-byte little-endian header length, JSON, data).
shapes = [("model.embed_tokens.weight", [16, 8]), ("model.layers.0.input_layernorm.weight", [8]),
          ("model.layers.0.post_attention_layernorm.weight", [8]),
          ("model.layers.0.self_attn.q_proj.weight", [8, 8]), ("model.layers.0.self_attn.k_proj.weight", [4, 8]),
          ("model.layers.0.self_attn.v_proj.weight", [4, 8]), ("model.layers.0.self_attn.o_proj.weight", [8, 8]),
          ("model.layers.0.mlp.gate_proj.weight", [16, 8]), ("model.layers.0.mlp.up_proj.weight", [16, 8]),
          ("model.layers.0.mlp.down_proj.weight", [8, 16]), ("model.norm.weight", [8])]
header, data = {}, b""
for name, shape in shapes:
    n = 1
    for s in shape:
        n *= s
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + 4 * n]}
    data += b"".join(struct.pack("<f", ((i * 13) % 11 - 5) / 32.0) for i in range(n))
h = json.dumps(header).encode()
put("safetensors", "tiny-llama.safetensors", struct.pack("<Q", len(h)) + h + data)

# quantize text.
put("quantize", "e4m3.txt", "fp8-e4m3 tensor -\n1 -2.5 3e-3 448 500 nan inf -inf 0\n")
put("quantize", "mxfp8.txt", "mxfp8 - 2,32\n" + " ".join(str((i % 7) - 3.5) for i in range(64)) + "\n")
put("quantize", "int4-group.txt", "int4 group32 1,64\n" + " ".join(str(i / 10) for i in range(64)) + "\n")
put("quantize", "nvfp4.txt", "nvfp4 - -\n0.1 0.2 -6 6 12 1e-9 -1e9\n")
put("quantize", "e8m0.txt", "e8m0 - -\n1 2 0.5 3 1e38 1e-38\n")
# GraphML precision-flow graphs (rlsim verify --train/--infer), in write_graphml's form: one
# attention block of layer 0 whose key goes through the KV cache, as training (no cache) and
# inference (kv_write -> kv_read, FP8 cache) see it, and one with a fake-quantised weight.
GRAPHML_KEYS = [("node", "name", "string"), ("node", "kind", "string"), ("node", "layer", "int"),
                ("edge", "tensor", "string"), ("edge", "role", "string"), ("edge", "format", "string"),
                ("edge", "mode", "string"), ("edge", "storage", "string"), ("edge", "compute", "string"),
                ("edge", "accumulate", "string"), ("graph", "builder", "string"), ("graph", "side", "string")]


def graphml(side, nodes, edges):
    """nodes: (name, kind, layer); edges: (source, target, tensor, role, format, mode, storage)."""
    key = {(f, n): "key%d" % i for i, (f, n, _) in enumerate(GRAPHML_KEYS)}
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">']
    lines += ['  <key id="%s" for="%s" attr.name="%s" attr.type="%s" />' % (key[(f, n)], f, n, t) for f, n, t in GRAPHML_KEYS]
    lines.append('  <graph id="G" edgedefault="directed">')
    lines.append('    <data key="%s">rlsim</data><data key="%s">%s</data>' % (key[("graph", "builder")], key[("graph", "side")], side))
    for i, (name, kind, layer) in enumerate(nodes):
        lines.append('    <node id="n%d"><data key="%s">%s</data><data key="%s">%s</data><data key="%s">%d</data></node>' %
                     (i, key[("node", "name")], name, key[("node", "kind")], kind, key[("node", "layer")], layer))
    index = {n[0]: i for i, n in enumerate(nodes)}
    for i, (src, dst, tensor, role, fmt, mode, storage) in enumerate(edges):
        data = [("tensor", tensor), ("role", role), ("format", fmt), ("mode", mode), ("storage", storage),
                ("compute", "fp32" if fmt == "bf16" else "fp8"), ("accumulate", "fp32")]
        lines.append('    <edge id="e%d" source="n%d" target="n%d">%s</edge>' % (i, index[src], index[dst], "".join(
            '<data key="%s">%s</data>' % (key[("edge", k)], v) for k, v in data)))
    lines += ["  </graph>", "</graphml>", ""]
    return "\n".join(lines)


attn_nodes = [("layers.0.self_attn.k_proj.weight", "parameter", 0), ("layers.0.input_layernorm", "rmsnorm", 0),
              ("layers.0.self_attn.k_proj", "linear", 0), ("layers.0.self_attn.q_proj.weight", "parameter", 0),
              ("layers.0.self_attn.q_proj", "linear", 0), ("layers.0.self_attn.scores", "attention_scores", 0),
              ("layers.0.self_attn.softmax", "softmax", 0)]
attn_edges = [("layers.0.input_layernorm", "layers.0.self_attn.k_proj", "input", "activation", "fp8-e4m3/group1x128", "real", "fp8-e4m3"),
              ("layers.0.self_attn.k_proj.weight", "layers.0.self_attn.k_proj", "weight", "weight", "fp8-e4m3/block128x128", "real", "fp8-e4m3"),
              ("layers.0.input_layernorm", "layers.0.self_attn.q_proj", "input", "activation", "fp8-e4m3/group1x128", "real", "fp8-e4m3"),
              ("layers.0.self_attn.q_proj.weight", "layers.0.self_attn.q_proj", "weight", "weight", "fp8-e4m3/block128x128", "real", "fp8-e4m3"),
              ("layers.0.self_attn.q_proj", "layers.0.self_attn.scores", "query", "activation", "bf16", "real", "bf16"),
              ("layers.0.self_attn.scores", "layers.0.self_attn.softmax", "input", "activation", "fp32", "real", "fp32")]
put("graphml", "training.graphml", graphml("training", attn_nodes, attn_edges + [
    ("layers.0.self_attn.k_proj", "layers.0.self_attn.scores", "key", "activation", "bf16", "real", "bf16")]))
put("graphml", "inference-fp8-kv.graphml", graphml("inference", attn_nodes + [
    ("layers.0.self_attn.k_cache_write", "kv_write", 0), ("layers.0.self_attn.k_cache_read", "kv_read", 0)], attn_edges + [
    ("layers.0.self_attn.k_proj", "layers.0.self_attn.k_cache_write", "key", "activation", "bf16", "real", "bf16"),
    ("layers.0.self_attn.k_cache_write", "layers.0.self_attn.k_cache_read", "key", "kv", "fp8-e4m3/tensor", "real", "fp8-e4m3"),
    ("layers.0.self_attn.k_cache_read", "layers.0.self_attn.scores", "key", "kv", "fp8-e4m3/tensor", "real", "fp8-e4m3")]))
put("graphml", "fake-quant.graphml", graphml("training", attn_nodes[:3], [
    ("layers.0.input_layernorm", "layers.0.self_attn.k_proj", "input", "activation", "bf16", "real", "bf16"),
    ("layers.0.self_attn.k_proj.weight", "layers.0.self_attn.k_proj", "weight", "weight", "int4/group32", "fake", "bf16")]))
# Calibration files: the built-in one, and one that sets only a device's fractions.
put("calibration", "default.yaml", read("models/calibration/default.yaml"))
put("calibration", "one-device.yaml", "devices:\n  h100-sxm: {compute: 0.5, memory: 0.8}\n")
# llama-bench -o csv output (bench runtime --compare-gguf): its columns as llama.cpp c392e50 writes
# them (a pp and a tg row), and the five columns rlsim reads.
bench_cols = ("build_commit,build_number,cpu_info,gpu_info,backends,model_filename,model_type,model_size,"
              "model_n_params,n_batch,n_ubatch,n_threads,cpu_mask,cpu_strict,poll,type_k,type_v,n_gpu_layers,"
              "split_mode,main_gpu,no_kv_offload,flash_attn,tensor_split,use_mmap,embeddings,n_prompt,n_gen,"
              "test_time,avg_ns,stddev_ns,avg_ts,stddev_ts")
bench_row = ('"unknown","0","AMD EPYC","","CPU","smollm2-q4_0.gguf","llama ?B Q4_0","89941248","134515008","2048",'
             '"512","2","0x0","0","50","f16","f16","99","layer","0","0","0","0.00","1","0",'
             '"{np}","{ng}","2026-11-28T19:10:50Z","{ns}","6168492","{ts}","3.134670"')
put("llama_bench_csv", "llama_bench_q4_0.csv", "\n".join([bench_cols, bench_row.format(np=512, ng=0, ns=1003703977, ts="510.125973"),
                                                           bench_row.format(np=0, ng=128, ns=745054000, ts="171.800000")]) + "\n")
put("llama_bench_csv", "minimal.csv", 'model_type,n_threads,n_prompt,n_gen,avg_ts\n"llama 1M Q4_0","2","16","0","1000.0"\n'
    '"llama 1M Q4_0","2","0","4","100.0"\n')
# llama-bench -o json (an array) and -o jsonl (one test a line), with samples_ts.
bench_json = ('{{"model_type": "llama 135M Q4_0", "model_size": 89941248, "n_threads": 2, "n_prompt": {np}, "n_gen": {ng}, '
              '"avg_ts": {ts}, "stddev_ts": 4.2, "samples_ts": [{ts}, {best}]}}')
put("llama_bench_json", "array.json", "[\n  " + ",\n  ".join([bench_json.format(np=512, ng=0, ts=510.1, best=530.7),
                                                             bench_json.format(np=0, ng=128, ts=171.8, best=180.2)]) + "\n]\n")
put("llama_bench_json", "lines.jsonl", bench_json.format(np=0, ng=64, ts=99.5, best=101.0) + "\n" +
    '{"model_type": "llama 1M BF16", "n_threads": 2, "n_prompt": 16, "n_gen": 0, "avg_ts": 1000.0}\n')
# The differential harness of the activation quantisers' fast paths: format index, 2 rows of 40,
# then FP32 bits of ties, saturating values, a subnormal, -0 and +inf (one seed per format).
vals = [0.5, -1.25, 3.0, 448.0, 1e-3, -0.0, float("inf"), 2688.0, 6.0, 0.25, 0.75, -5.0, 1e-40, 7.0, 12.5, -300.0] * 5
for k in range(10):
    put("quantize_paths", "format%d.bin" % k, bytes([k, 1, 39]) + b"".join(struct.pack("<f", v) for v in vals))
print("seeds written under", out)
