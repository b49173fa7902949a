#!/usr/bin/env python3
"""PyTorch counterpart of bench/gpu/gpt_block_gpu_bench.cc: one pre-LN GPT block, same shapes,
same passes, same FLOP counts, on the same GPU. Prints ONE JSON object on stdout; exits 0 with
{"skipped": "<reason>"} when torch or a CUDA device is unavailable.

The block matches runtime/layers/transformer_block.cc and runtime/kernels/cuda/gpt_block.h:
    h = x + proj(attn(qkv(LN1(x))));  y = h + fc2(GELU_tanh(fc1(LN2(h))))
LayerNorm eps 1e-5; qkv columns q | k | v, head i uses columns i*hd of each; causal attention with
scale 1/sqrt(hd); MLP width 4h; GELU is the tanh approximation (runtime/layers/activations.cc:
GPT-2's 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))), so nn.functional.gelu(approximate="tanh").

Attention variants:
  sdpa  - torch.nn.functional.scaled_dot_product_attention(is_causal=True) (flash / cuDNN / efficient
          kernels: skips the masked half, never materialises [T, T])
  naive - q kᵀ * scale, masked_fill(-inf) above the diagonal, softmax, @ v (materialises [T, T],
          like our kernels)

Passes (CUDA events, median of --reps after --warmup):
  F   forward
  BW  full backward: y.backward(dy) (input and weight gradients)
  B   input gradient only: torch.autograd.grad(y, x, dy) (autograd skips the weight-gradient
      matmuls when only x is asked for)
  W   estimated as BW - B (PyTorch cannot run the weight gradients alone)
FLOP counts as in the C++ benchmark (N tokens, h dim, T steps; attention counted in full, not
causal-halved): F = 24 N h^2 + 4 N T h, B = 24 N h^2 + 8 N T h, W = 24 N h^2, BW = B + W.
"""

import argparse
import json
import math
import statistics
import sys


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dims", default="1024,2048,4096")
    p.add_argument("--fp32-dims", default="1024", help="comma list or 'none'")
    p.add_argument("--steps", type=int, default=1024)
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--batch", type=int, default=0, help="> 0 overrides --tokens")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--variants", default="sdpa,naive")
    p.add_argument("--peak-tflops", type=float, default=989.4)
    p.add_argument("--peak-fp32-tflops", type=float, default=67.0)
    p.add_argument("--device", type=int, default=0)
    return p.parse_args()


def dims_of(s):
    return [] if s in ("", "none") else [int(v) for v in s.split(",")]


def flops(n, h, t, hidden):
    linear = 2.0 * n * (h * 3 * h + h * h + h * hidden + hidden * h)
    attn_f = 4.0 * n * t * h
    return {"F": linear + attn_f, "B": linear + 2 * attn_f, "W": linear, "BW": 2 * linear + 2 * attn_f}


def main():
    args = parse_args()
    out = {"benchmark": "torch_gpt_block"}
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001 - any import failure means "skip"
        out["skipped"] = "torch not importable: %s" % e
        print(json.dumps(out, indent=2))
        return 0
    if not torch.cuda.is_available() or torch.cuda.device_count() <= args.device:
        out["skipped"] = "no CUDA device visible to torch %s" % torch.__version__
        print(json.dumps(out, indent=2))
        return 0

    torch.cuda.set_device(args.device)
    dev = torch.device("cuda", args.device)
    props = torch.cuda.get_device_properties(dev)
    out["device"] = {"index": args.device, "name": props.name,
                     "compute_capability": "%d.%d" % (props.major, props.minor),
                     "memory_gib": props.total_memory / 2**30}
    out["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda,
                    "cudnn": torch.backends.cudnn.version()}
    out["peak_tflops"] = {"bf16": args.peak_tflops, "fp32": args.peak_fp32_tflops}
    out["flop_convention"] = ("F = 24*N*h^2 + 4*N*T*h, B = 24*N*h^2 + 8*N*T*h, W = 24*N*h^2, BW = B + W; "
                              "attention counted in full (not causal-halved), element-wise ops not counted")
    batch = args.batch if args.batch > 0 else max(1, args.tokens // args.steps)
    out["config"] = {"steps": args.steps, "batch": batch, "head_dim": args.head_dim,
                     "warmup": args.warmup, "reps": args.reps,
                     "timing": "CUDA events per pass; median (ms_min = fastest) of reps after warm-up; "
                               "W = BW - B (estimate)"}
    # Our fp32 products are true fp32 (CUBLAS_COMPUTE_32F without TF32): match that.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    class Block(torch.nn.Module):
        def __init__(self, dim, heads, hidden, variant):
            super().__init__()
            self.dim, self.heads, self.variant = dim, heads, variant
            self.ln1 = torch.nn.LayerNorm(dim, eps=1e-5)
            self.qkv = torch.nn.Linear(dim, 3 * dim)
            self.proj = torch.nn.Linear(dim, dim)
            self.ln2 = torch.nn.LayerNorm(dim, eps=1e-5)
            self.fc = torch.nn.Linear(dim, hidden)
            self.fc_proj = torch.nn.Linear(hidden, dim)

        def attention(self, x):
            b, t, d = x.shape
            hd = d // self.heads
            qkv = self.qkv(x).view(b, t, 3, self.heads, hd)
            q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # [b, heads, t, hd]
            if self.variant == "sdpa":
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
                mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
                p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
                o = p @ v
            return self.proj(o.transpose(1, 2).reshape(b, t, d))

        def forward(self, x):
            h = x + self.attention(self.ln1(x))
            return h + self.fc_proj(F.gelu(self.fc(self.ln2(h)), approximate="tanh"))

    def events():
        return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def summary(ms, flop, peak):
        med = statistics.median(ms)
        tf = flop / (med * 1e-3) / 1e12
        return {"ms": med, "ms_min": min(ms), "gflop": flop / 1e9, "tflops": tf, "peak_fraction": tf / peak}

    def bench(dtype, dim, variant):
        heads = max(1, dim // args.head_dim)
        hidden = 4 * dim
        torch.manual_seed(0)
        block = Block(dim, heads, hidden, variant).to(device=dev, dtype=dtype)
        x = torch.empty(batch, args.steps, dim, device=dev, dtype=dtype).uniform_(-1, 1).requires_grad_(True)
        dy = torch.empty_like(x).uniform_(-1e-2, 1e-2)
        params = list(block.parameters())
        tf_, tbw, tb = [], [], []
        for rep in range(args.warmup + args.reps):
            timed = rep >= args.warmup
            # F, then full backward
            a, b = events()
            a.record()
            y = block(x)
            b.record()
            c, d = events()
            c.record()
            y.backward(dy)
            d.record()
            torch.cuda.synchronize()
            if timed:
                tf_.append(a.elapsed_time(b))
                tbw.append(c.elapsed_time(d))
            for p in params:
                p.grad = None
            x.grad = None
            del y
            # F (untimed), then input gradient only
            y = block(x)
            e, f = events()
            e.record()
            (dx,) = torch.autograd.grad(y, x, dy)
            f.record()
            torch.cuda.synchronize()
            if timed:
                tb.append(e.elapsed_time(f))
            del y, dx
        n = batch * args.steps
        fl = flops(n, dim, args.steps, hidden)
        peak = args.peak_tflops if dtype == torch.bfloat16 else args.peak_fp32_tflops
        w_est = [max(1e-6, bw - bb) for bw, bb in zip(tbw, tb)]
        r = {"dtype": "bf16" if dtype == torch.bfloat16 else "fp32", "variant": variant, "dim": dim,
             "heads": heads, "hidden": hidden, "batch": batch, "steps": args.steps, "tokens": n,
             "peak_tflops": peak,
             "passes": {"F": summary(tf_, fl["F"], peak), "B": summary(tb, fl["B"], peak),
                        "W": summary(w_est, fl["W"], peak), "BW": summary(tbw, fl["BW"], peak),
                        "FBW": summary([a + b for a, b in zip(tf_, tbw)], fl["F"] + fl["BW"], peak)}}
        del block, x, dy, params
        torch.cuda.empty_cache()
        return r

    results, errors = [], []
    variants = [v for v in args.variants.split(",") if v]
    for dtype, dims in ((torch.bfloat16, dims_of(args.dims)), (torch.float32, dims_of(args.fp32_dims))):
        for dim in dims:
            for variant in variants:
                try:
                    results.append(bench(dtype, dim, variant))
                except Exception as e:  # noqa: BLE001 - report, keep going (e.g. OOM)
                    errors.append({"dtype": str(dtype), "dim": dim, "variant": variant, "error": str(e)[:500]})
                    torch.cuda.empty_cache()
    out["results"] = results
    if errors:
        out["errors"] = errors
    print(json.dumps(out, indent=2))
    return 1 if errors and not results else 0


if __name__ == "__main__":
    sys.exit(main())
