#!/usr/bin/env python3
"""Measures the GPU rates rlsim's rollout cost model prices, on the GPU this runs on.

Not part of the build and never needed by it: run by hand on a machine with an NVIDIA GPU and
PyTorch (>= 2.5), and keep what it writes as a dated calibration record beside this file
(models/calibration/measured/<device>-<date>/). `rlsim`'s tests compare the cost model with
those records (tests/sim/pipeline/measured_gpu_test.cc).

What it measures (every timing: CUDA events, warm-up first, best of the repeats):
  hbm.csv      read bandwidth (torch.sum of a BF16 tensor, a Triton load-only kernel when
               Triton is there) and copy bandwidth, by size.
  gemm.csv     y = x W^T for the linear shapes of Llama-3.1-8B (qkv, o, gate_up, down, lm_head)
               at M = 1 .. 16384 tokens, BF16 (F.linear) and FP8 E4M3 with per-tensor scales
               (torch._scaled_mm), weights rotated over copies larger than L2 so every call
               reads them from HBM. Columns: seconds, TFLOP/s, weight+activation GB/s.
  decode.csv   one decode step of a Llama-3.1-8B-shaped stack with random BF16 weights
               (32 layers, hidden 4096, 32 query / 8 KV heads of 128, FFN 14336, vocab 128256,
               contiguous KV cache of `context` positions per sequence, SDPA attention,
               greedy argmax) at batch b: eager and replayed as one CUDA graph. The eager minus
               graph time per layer is the launch overhead that `enforce_eager` adds.
  prefill.csv  one prefill of T tokens of one sequence through the same stack (causal SDPA),
               logits of the last position only, as an inference engine prefills a prompt.
  device.json  the device, driver, clocks and library versions.

  grouped_gemm.csv  the routed experts' grouped GEMM (torch._grouped_mm) by tokens per expert, for
               the MoE expert shapes of the catalog: the rate moe.grouped_gemm_half_tokens and
               moe.grouped_gemm_half_width describe.

Usage: python3 gpu_rates.py OUT_DIR [--quick] [--only-grouped]
"""
import json
import math
import os
import platform
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

OUT = sys.argv[1] if len(sys.argv) > 1 else "."
QUICK = "--quick" in sys.argv
os.makedirs(OUT, exist_ok=True)
dev = torch.device("cuda")
torch.backends.cuda.matmul.allow_tf32 = False

# Llama-3.1-8B (meta-llama/Llama-3.1-8B config.json).
HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 4096, 32, 32, 8, 128, 14336, 128256
# The rotation keeps operands out of L2: the device's own L2 size where PyTorch reports it, else
# the H100 SXM's 50 MiB (H100 whitepaper). The H200 has 60 MiB.
L2_BYTES = max(50 * 2**20, getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0))


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Csv:
    """Writes rows as they are measured, so a run cut short keeps what it had."""

    def __init__(self, name, columns):
        self.f = open(os.path.join(OUT, name), "w")
        self.columns = columns
        self.f.write(",".join(columns) + "\n")
        self.f.flush()

    def row(self, **kv):
        self.f.write(",".join(str(kv.get(c, "")) for c in self.columns) + "\n")
        self.f.flush()


def time_cuda(fn, min_time=0.02, warmup=3, repeats=5):
    """Best of `repeats` means, each over enough calls to last `min_time` seconds."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    one = max(start.elapsed_time(end) / 1e3, 1e-6)
    n = max(1, min(2000, int(min_time / one)))
    best = math.inf
    for _ in range(repeats):
        start.record()
        for _ in range(n):
            fn()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3 / n)
    return best


def time_graphed(fn, calls):
    """Seconds per call of `fn`, `calls` calls captured in one CUDA graph and replayed: the GPU's
    time without the host's launch cost, which bounds small kernels launched one by one."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(calls):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    s = time_cuda(graph.replay) / calls
    del graph
    return s


def device_info():
    p = torch.cuda.get_device_properties(0)
    info = {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "name": p.name,
        "multiprocessors": p.multi_processor_count,
        "memory_bytes": p.total_memory,
        "l2_bytes": getattr(p, "L2_cache_size", None),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
    }
    try:
        info["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:  # noqa: BLE001 - a record without it is still a record
        info["nvidia_smi"] = f"unavailable: {e}"
    try:
        import triton
        info["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        info["triton"] = None
    return info


def measure_hbm():
    out = Csv("hbm.csv", ["method", "bytes", "seconds", "gb_per_s"])
    read_kernel = None
    try:
        import triton
        import triton.language as tl

        @triton.jit
        def _read(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
            pid = tl.program_id(0)
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for start in range(pid * BLOCK, n, tl.num_programs(0) * BLOCK):
                offs = start + tl.arange(0, BLOCK)
                acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
            tl.store(o_ptr + pid, tl.sum(acc))

        def read_kernel(x, o):
            _read[(o.numel(),)](x, o, x.numel(), BLOCK=4096, num_warps=8)
    except Exception as e:  # noqa: BLE001
        log(f"triton read kernel unavailable: {e}")
    sizes = [2**26, 2**28, 2**30, 2**32] if not QUICK else [2**28]
    for nbytes in sizes:
        x = torch.randn(nbytes // 2, device=dev, dtype=torch.bfloat16)
        s = time_cuda(lambda: x.sum(dtype=torch.float32))
        out.row(method="torch_sum", bytes=nbytes, seconds=f"{s:.6e}", gb_per_s=f"{nbytes / s / 1e9:.1f}")
        if read_kernel is not None:
            o = torch.empty(torch.cuda.get_device_properties(0).multi_processor_count * 4, device=dev)
            s = time_cuda(lambda: read_kernel(x, o))
            out.row(method="triton_read", bytes=nbytes, seconds=f"{s:.6e}", gb_per_s=f"{nbytes / s / 1e9:.1f}")
        y = torch.empty_like(x)
        s = time_cuda(lambda: y.copy_(x))
        out.row(method="copy_read_plus_write", bytes=2 * nbytes, seconds=f"{s:.6e}", gb_per_s=f"{2 * nbytes / s / 1e9:.1f}")
        log(f"hbm {nbytes >> 20} MiB done")
        del x, y
    torch.cuda.empty_cache()


LINEARS = [("qkv", (HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN), ("o", HIDDEN, HEADS * HEAD_DIM),
           ("gate_up", 2 * FFN, HIDDEN), ("down", HIDDEN, FFN), ("lm_head", VOCAB, HIDDEN)]
FP8 = torch.float8_e4m3fn


def measure_gemm():
    out = Csv("gemm.csv", ["dtype", "linear", "m", "n", "k", "seconds", "tflops", "gb_per_s", "error"])
    ms = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
    if QUICK:
        ms = [1, 64, 4096]
    for name, n, k in LINEARS:
        for dtype in ("bf16", "fp8_e4m3"):
            elem = 2 if dtype == "bf16" else 1
            copies = max(1, math.ceil(4 * L2_BYTES / (n * k * elem)))
            w32 = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
            if dtype == "bf16":
                ws = w32
            else:
                ws = [w.to(FP8) for w in w32]
                del w32
            one = torch.ones((), device=dev, dtype=torch.float32)
            for m in ms:
                x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                xq = x.to(FP8) if dtype != "bf16" else None
                state = {"i": 0}

                def call():
                    w = ws[state["i"] % copies]
                    state["i"] += 1
                    if dtype == "bf16":
                        return F.linear(x, w)
                    return torch._scaled_mm(xq, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
                try:
                    s = time_graphed(call, 16) if m <= 1024 else time_cuda(call)
                    flops = 2.0 * m * n * k
                    nbytes = n * k * elem + m * k * elem + m * n * 2
                    out.row(dtype=dtype, linear=name, m=m, n=n, k=k, seconds=f"{s:.6e}", tflops=f"{flops / s / 1e12:.2f}",
                            gb_per_s=f"{nbytes / s / 1e9:.1f}")
                except Exception as e:  # noqa: BLE001 - a shape the kernel refuses is a finding
                    out.row(dtype=dtype, linear=name, m=m, n=n, k=k, error=str(e).splitlines()[0].replace(",", ";")[:120])
                del x, xq
            del ws
            torch.cuda.empty_cache()
        log(f"gemm {name} done")


# Routed experts (E, hidden, expert intermediate) of the catalog's MoE models (their config.json):
# Qwen3-30B-A3B, Qwen3-235B-A22B, DeepSeek-V3, and Qwen3-30B-A3B's experts split 8 ways (TP8).
EXPERT_SHAPES = [("qwen3-30b-a3b", 128, 2048, 768), ("qwen3-235b-a22b", 128, 4096, 1536),
                 ("deepseek-v3", 256, 7168, 2048), ("qwen3-30b-a3b-tp8", 128, 2048, 96)]


def measure_grouped():
    """Grouped GEMM of every expert's gate_up projection ([m, hidden] x [hidden, 2 I] per
    expert, all experts touched) at m tokens per expert: torch._grouped_mm (BF16, Hopper)."""
    out = Csv("grouped_gemm.csv", ["model", "experts", "hidden", "width", "tokens_per_expert", "seconds", "tflops",
                                   "weight_gb_per_s", "error"])
    for name, experts, hidden, inter in EXPERT_SHAPES:
        n = 2 * inter
        w = torch.randn(experts, n, hidden, device=dev, dtype=torch.bfloat16) * 0.02
        wt = w.transpose(-2, -1)  # [E, hidden, n], column-major per expert as _grouped_mm wants
        for m in ([1, 2, 4, 8, 16, 32, 64, 128, 256, 512] if not QUICK else [1, 64]):
            try:
                x = torch.randn(experts * m, hidden, device=dev, dtype=torch.bfloat16)
                offs = torch.arange(m, experts * m + 1, m, device=dev, dtype=torch.int32)
                call = lambda: torch._grouped_mm(x, wt, offs=offs, out_dtype=torch.bfloat16)  # noqa: E731
                sec = time_graphed(call, 8) if m <= 64 else time_cuda(call)
                flops = 2.0 * experts * m * hidden * n
                out.row(model=name, experts=experts, hidden=hidden, width=inter, tokens_per_expert=m, seconds=f"{sec:.6e}",
                        tflops=f"{flops / sec / 1e12:.2f}", weight_gb_per_s=f"{w.numel() * 2 / sec / 1e9:.1f}")
            except Exception as e:  # noqa: BLE001 - a refused shape is a finding
                out.row(model=name, experts=experts, hidden=hidden, width=inter, tokens_per_expert=m,
                        error=str(e).splitlines()[0].replace(",", ";")[:120])
                log(f"grouped {name} m={m}: {e}")
        log(f"grouped {name} done")
        del w, wt
        torch.cuda.empty_cache()


class Stack:
    """Llama-3.1-8B-shaped decoder with random BF16 weights and a contiguous KV cache."""

    def __init__(self, fp8=False, layers=LAYERS):
        g = lambda *shape: torch.randn(*shape, device=dev, dtype=torch.bfloat16) * 0.02  # noqa: E731
        self.layers = [dict(norm1=torch.ones(HIDDEN, device=dev, dtype=torch.bfloat16),
                            qkv=g((HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN), o=g(HIDDEN, HEADS * HEAD_DIM),
                            norm2=torch.ones(HIDDEN, device=dev, dtype=torch.bfloat16),
                            gate_up=g(2 * FFN, HIDDEN), down=g(HIDDEN, FFN)) for _ in range(layers)]
        # FP8: the four linears of every layer in E4M3 with a per-tensor weight scale and a static
        # per-tensor activation scale (one quantisation kernel per linear input); lm_head BF16.
        self.fp8 = fp8
        if fp8:
            for layer in self.layers:
                for key in ("qkv", "o", "gate_up", "down"):
                    layer[key] = layer[key].to(FP8)
            self.one = torch.ones((), device=dev, dtype=torch.float32)
        self.embed = g(VOCAB, HIDDEN)
        self.norm = torch.ones(HIDDEN, device=dev, dtype=torch.bfloat16)
        self.lm_head = g(VOCAB, HIDDEN)
        inv = 1.0 / (500000.0 ** (torch.arange(0, HEAD_DIM, 2, device=dev, dtype=torch.float32) / HEAD_DIM))
        ang = torch.outer(torch.arange(131072, device=dev, dtype=torch.float32), inv)
        self.cos, self.sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)

    def weight_bytes(self):
        per = sum(t.numel() * t.element_size() for t in self.layers[0].values())
        return per * len(self.layers) + self.lm_head.numel() * 2

    def linear(self, x, w):
        if not self.fp8:
            return F.linear(x, w)
        return torch._scaled_mm(x.to(FP8), w.t(), scale_a=self.one, scale_b=self.one, out_dtype=torch.bfloat16)

    @staticmethod
    def rope(x, cos, sin):
        x1, x2 = x[..., : HEAD_DIM // 2], x[..., HEAD_DIM // 2:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def decode(self, tokens, pos, kv):
        """tokens [b] int64, pos [1] int64 (the position written), kv list of (k, v) [b, KV, ctx, D]."""
        b = tokens.shape[0]
        h = F.embedding(tokens, self.embed)
        cos, sin = self.cos[pos].view(1, 1, -1), self.sin[pos].view(1, 1, -1)
        for layer, (kc, vc) in zip(self.layers, kv):
            x = F.rms_norm(h, (HIDDEN,), layer["norm1"], 1e-5)
            qkv = self.linear(x, layer["qkv"])
            q, k, v = qkv.split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], dim=-1)
            q = self.rope(q.view(b, HEADS, HEAD_DIM), cos, sin)
            k = self.rope(k.view(b, KV_HEADS, HEAD_DIM), cos, sin)
            kc.index_copy_(2, pos, k.unsqueeze(2))
            vc.index_copy_(2, pos, v.view(b, KV_HEADS, 1, HEAD_DIM))
            # GQA decode: each KV head's query heads as that head's "query rows" (no mask).
            a = F.scaled_dot_product_attention(q.view(b, KV_HEADS, HEADS // KV_HEADS, HEAD_DIM), kc, vc)
            h = h + self.linear(a.reshape(b, HEADS * HEAD_DIM), layer["o"])
            x = F.rms_norm(h, (HIDDEN,), layer["norm2"], 1e-5)
            gu = self.linear(x, layer["gate_up"])
            gate, up = gu.chunk(2, dim=-1)
            h = h + self.linear(F.silu(gate) * up, layer["down"])
        logits = F.linear(F.rms_norm(h, (HIDDEN,), self.norm, 1e-5), self.lm_head)
        return logits.argmax(dim=-1)

    def prefill(self, tokens):
        """tokens [T] of one sequence; logits of the last position."""
        t = tokens.shape[0]
        h = F.embedding(tokens, self.embed)
        cos, sin = self.cos[:t].view(1, t, -1), self.sin[:t].view(1, t, -1)
        for layer in self.layers:
            x = F.rms_norm(h, (HIDDEN,), layer["norm1"], 1e-5)
            q, k, v = F.linear(x, layer["qkv"]).split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], dim=-1)
            q = self.rope(q.view(t, HEADS, HEAD_DIM).transpose(0, 1), cos, sin)
            k = self.rope(k.view(t, KV_HEADS, HEAD_DIM).transpose(0, 1), cos, sin)
            v = v.view(t, KV_HEADS, HEAD_DIM).transpose(0, 1)
            a = F.scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), is_causal=True, enable_gqa=True)
            h = h + F.linear(a.squeeze(0).transpose(0, 1).reshape(t, HEADS * HEAD_DIM), layer["o"])
            x = F.rms_norm(h, (HIDDEN,), layer["norm2"], 1e-5)
            gate, up = F.linear(x, layer["gate_up"]).chunk(2, dim=-1)
            h = h + F.linear(F.silu(gate) * up, layer["down"])
        return F.linear(F.rms_norm(h[-1:], (HIDDEN,), self.norm, 1e-5), self.lm_head)


def count_kernels(fn):
    """GPU kernels one call of `fn` launches (torch.profiler), or "" where the profiler fails."""
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    except Exception as e:  # noqa: BLE001
        log(f"profiler: {e}")
        return ""


def measure_decode(stack, out, precision):
    kv_token = LAYERS * 2 * KV_HEADS * HEAD_DIM * 2
    cases = [(1, 512), (1, 2048), (4, 2048), (16, 2048), (32, 2048), (64, 2048), (128, 512), (128, 2048),
             (256, 512), (256, 1024)]
    if QUICK:
        cases = [(1, 512), (64, 2048)]
    wbytes = stack.weight_bytes()
    for b, ctx in cases:
        try:
            kv = [(torch.randn(b, KV_HEADS, ctx, HEAD_DIM, device=dev, dtype=torch.bfloat16),
                   torch.randn(b, KV_HEADS, ctx, HEAD_DIM, device=dev, dtype=torch.bfloat16)) for _ in range(LAYERS)]
            tokens = torch.randint(0, VOCAB, (b,), device=dev)
            pos = torch.tensor([ctx - 1], device=dev)
            with torch.inference_mode():
                eager = time_cuda(lambda: stack.decode(tokens, pos, kv), min_time=0.2, repeats=3)
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        stack.decode(tokens, pos, kv)
                torch.cuda.current_stream().wait_stream(s)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    stack.decode(tokens, pos, kv)
                replay = time_cuda(graph.replay, min_time=0.2, repeats=3)
                del graph
                kernels = count_kernels(lambda: stack.decode(tokens, pos, kv)) if b == cases[0][0] else ""
            kvb = b * ctx * kv_token
            for mode, sec in (("eager", eager), ("cuda_graph", replay)):
                out.row(precision=precision, batch=b, context=ctx, mode=mode, seconds=f"{sec:.6e}", weight_bytes=wbytes, kv_bytes=kvb, kernels=kernels,
                        gb_per_s=f"{(wbytes + kvb) / sec / 1e9:.1f}")
            log(f"decode {precision} b={b} ctx={ctx}: eager {eager * 1e3:.2f} ms, graph {replay * 1e3:.2f} ms")
        except Exception as e:  # noqa: BLE001 - out of memory at the largest case is a finding, not a stop
            out.row(precision=precision, batch=b, context=ctx, error=str(e).splitlines()[0].replace(",", ";")[:120])
            log(f"decode b={b} ctx={ctx} failed: {e}")
        kv = None
        torch.cuda.empty_cache()


def measure_prefill(stack):
    out = Csv("prefill.csv", ["tokens", "seconds", "tflops_linear", "error"])
    linear_params = sum(n * k for _, n, k in LINEARS[:4]) * LAYERS
    for t in ([128, 512, 2048, 8192, 16384] if not QUICK else [512]):
        try:
            tokens = torch.randint(0, VOCAB, (t,), device=dev)
            with torch.inference_mode():
                s = time_cuda(lambda: stack.prefill(tokens), min_time=0.2, repeats=3)
            out.row(tokens=t, seconds=f"{s:.6e}", tflops_linear=f"{2.0 * linear_params * t / s / 1e12:.1f}")
            log(f"prefill T={t}: {s * 1e3:.2f} ms")
        except Exception as e:  # noqa: BLE001
            out.row(tokens=t, error=str(e).splitlines()[0].replace(",", ";")[:120])
        torch.cuda.empty_cache()


def main():
    info = device_info()
    log(json.dumps(info))
    with open(os.path.join(OUT, "device.json"), "w") as f:
        json.dump(info, f, indent=1)
    t0 = time.time()
    if "--only-grouped" in sys.argv:
        measure_grouped()
        return
    measure_hbm()
    measure_gemm()
    stack = Stack()
    decode = Csv("decode.csv", ["precision", "batch", "context", "mode", "seconds", "weight_bytes", "kv_bytes", "kernels", "gb_per_s", "error"])
    measure_decode(stack, decode, "bf16")
    measure_prefill(stack)
    del stack
    torch.cuda.empty_cache()
    measure_decode(Stack(fp8=True), decode, "fp8_e4m3")
    measure_grouped()
    info["seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(OUT, "device.json"), "w") as f:
        json.dump(info, f, indent=1)
    log(f"done in {info['seconds']} s")


if __name__ == "__main__":
    main()
