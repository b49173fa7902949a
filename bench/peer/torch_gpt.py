#!/usr/bin/env python3
"""PipeForge's GPT in PyTorch, trained the way `pipeforge train --model gpt` trains it.

The same model (runtime/models/builders.cc, assemble_gpt): token + position embedding, pre-LayerNorm
blocks x + attn(ln1(x)), x + mlp(ln2(x)) with causal multi-head attention (qkv Linear(d, 3d) split
q | k | v, heads the column blocks of each), MLP fc -> tanh-GELU -> proj, LayerNorm eps 1e-5, a final
LayerNorm and an untied head Linear(d, vocab) with bias; mean cross-entropy over all tokens.

The same initial parameters: runtime/models/init.cc reimplemented with numpy (a counter-based
SplitMix64 stream per parameter name, Box-Muller per element; LayerNorm weights 1, biases 0).
The same data: runtime/data/char_text_dataset.cc reimplemented (the licence texts, byte vocabulary,
row starts a pure function of (seed, position, row)). Micro-batch k of step s is data position
s * m + k, as PipeForge pulls them. The first step's loss is printed so the driver can check that
both sides start from the same point (it agrees to ~1e-6).

The same optimizer: AdamW with PipeForge's CLI defaults (lr 3e-3, betas 0.9/0.999, eps 1e-8, weight
decay 0), constant learning rate, no clipping, gradients averaged over the micro-batches.

Modes: sequential (one process, --threads threads, gradient accumulation over the micro-batches),
1f1b and zb-v (torch.distributed.pipelining Schedule1F1B / ScheduleZBVZeroBubble, one process per
rank spawned here, gloo over loopback, 1 thread each) with the layers split into stages as
--layers-per-stage says (the driver passes PipeForge's own partition).

Prints one JSON object: tokens_per_s over the steps after --warmup-steps, first_loss, losses.
"""
import argparse
import json
import os
import time

import numpy as np

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


# ---- runtime/data/random.h and char_text_dataset.cc -------------------------------------------
def data_mix64(x):
    x = (x + GOLDEN) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def hash_words(*words):
    h = words[0]
    for w in words[1:]:
        h = data_mix64(data_mix64(h) ^ ((w + 0x632BE59BD9B4E019) & MASK64))
    return h


ROW_START_STREAM = 0x4348415254455854  # "CHARTEXT"


def default_text_files(folder="/usr/share/common-licenses"):
    files = []
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            head = f.read(4096)
        if head and b"\0" not in head:
            files.append(path)
    # std::sort of the full paths: byte order.
    return sorted(files, key=lambda p: p.encode())


class CharText:
    def __init__(self, seed, seq_len, rows, files=None):
        text = b"".join(open(p, "rb").read() for p in (files or default_text_files()))
        vocab = sorted(set(text))
        lut = np.full(256, -1, dtype=np.int64)
        lut[vocab] = np.arange(len(vocab))
        self.tokens = lut[np.frombuffer(text, dtype=np.uint8)]
        self.vocab = len(vocab)
        self.seed, self.seq_len, self.rows = seed, seq_len, rows

    def batch_at(self, position):
        starts = len(self.tokens) - self.seq_len
        idx = [(hash_words(self.seed, ROW_START_STREAM, position, r) * starts) >> 64 for r in range(self.rows)]
        windows = np.stack([self.tokens[i:i + self.seq_len + 1] for i in idx])
        return windows[:, :-1], windows[:, 1:]


# ---- runtime/models/init.cc --------------------------------------------------------------------
def init_mix64(z):  # no pre-add here, unlike the data's mixer
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def init_mix64_np(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def stream_key(seed, name):
    h = 0xCBF29CE484222325
    for c in name.encode():
        h = ((h ^ c) * 0x100000001B3) & MASK64
    return init_mix64(h ^ init_mix64((seed + GOLDEN) & MASK64))


def normal_init(seed, name, shape, stddev):
    n = int(np.prod(shape))
    key = np.uint64(stream_key(seed, name))
    c = np.arange(n, dtype=np.uint64) * np.uint64(2)
    g = np.uint64(GOLDEN)
    with np.errstate(over="ignore"):
        b1 = init_mix64_np(key + c * g)
        b2 = init_mix64_np(key + (c + np.uint64(1)) * g)
    u1 = ((b1 >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0 ** -53
    u2 = ((b2 >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0 ** -53
    z = np.sqrt(-2.0 * np.log(u1)) * np.cos(6.283185307179586 * u2)
    return (z * float(np.float32(stddev))).astype(np.float32).reshape(shape)


# ---- the model -----------------------------------------------------------------------------------
def build_layers(torch, cfg):
    """PipeForge's top-level layers, in order: embed, blocks.0 .. blocks.{L-1}, ln_f, head."""
    nn, F = torch.nn, torch.nn.functional
    d, heads, hidden = cfg.d_model, cfg.heads, cfg.hidden or 4 * cfg.d_model

    class Embed(nn.Module):
        def __init__(self):
            super().__init__()
            self.token_weight = nn.Parameter(torch.empty(cfg.vocab, d))
            self.position_weight = nn.Parameter(torch.empty(cfg.seq_len, d))

        def forward(self, idx):
            return self.token_weight[idx] + self.position_weight[: idx.shape[1]]

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = self.qkv(x).split(d, dim=2)
            q, k, v = (t.view(B, T, heads, d // heads).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(B, T, d))

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(d, hidden)
            self.proj = nn.Linear(hidden, d)

        def forward(self, x):
            return self.proj(F.gelu(self.fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(d, eps=1e-5)
            self.attn = Attention()
            self.ln2 = nn.LayerNorm(d, eps=1e-5)
            self.mlp = Mlp()

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    layers = [("embed", Embed())]
    layers += [(f"blocks.{i}", Block()) for i in range(cfg.layers)]
    layers += [("ln_f", nn.LayerNorm(d, eps=1e-5)), ("head", nn.Linear(d, cfg.vocab))]
    return layers


def initialize(torch, layers, seed):
    """PipeForge's initial values: LayerNorm weights 1, biases 0, every other weight normal(0, 0.02)
    from the stream of its PipeForge name (the same as the name here, checked against --describe)."""
    with torch.no_grad():
        for lname, layer in layers:
            for mname, module in layer.named_modules():
                for pname, p in module.named_parameters(recurse=False):
                    name = ".".join(part for part in (lname, mname, pname) if part)
                    if pname == "bias":
                        p.zero_()
                    elif isinstance(module, torch.nn.LayerNorm):
                        p.fill_(1.0)
                    else:
                        p.copy_(torch.from_numpy(normal_init(seed, name, tuple(p.shape), 0.02)))


def parameter_names(torch, layers):
    return [f"{lname}.{pname}" for lname, layer in layers for pname, _ in layer.named_parameters()]


def as_module(torch, named):
    """A run of top-level layers as one module (a stage, or the whole model)."""
    seq = torch.nn.Sequential()
    for name, m in named:
        seq.add_module(name.replace(".", "_"), m)
    return seq


def loss_fn(torch, vocab):
    def f(logits, targets):
        return torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
    return f


def step_batches(torch, data, cfg, steps):
    """Per step, the m micro-batches (data positions s*m .. s*m+m-1) stacked into one batch."""
    out = []
    for s in range(steps):
        xs, ys = zip(*(data.batch_at(s * cfg.microbatches + k) for k in range(cfg.microbatches)))
        out.append((torch.from_numpy(np.concatenate(xs)), torch.from_numpy(np.concatenate(ys))))
    return out


LR = 3e-3  # pipeforge train's AdamW default (tools/cli/train_command.h)


def adamw(torch, params):
    """PipeForge's AdamW defaults (runtime/optim/optimizer.h; weight decay: the CLI's 0)."""
    return torch.optim.AdamW(params, lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)


def result_json(cfg, losses, times):
    measured = times[cfg.warmup_steps:]
    tokens = cfg.batch_size * cfg.seq_len * len(measured)
    return {"mode": cfg.mode, "tokens_per_s": tokens / sum(measured) if measured else 0.0,
            "first_loss": losses[0], "losses": losses, "step_seconds": times,
            "warmup_steps": cfg.warmup_steps, "torch_version": __import__("torch").__version__,
            "threads": cfg.threads}


def run_sequential(cfg):
    import torch
    torch.set_num_threads(cfg.threads)
    data = CharText(cfg.seed, cfg.seq_len, cfg.batch_size // cfg.microbatches)
    cfg.vocab = data.vocab
    layers = build_layers(torch, cfg)
    initialize(torch, layers, cfg.seed)
    model = as_module(torch, layers)
    opt = adamw(torch, model.parameters())
    lf = loss_fn(torch, cfg.vocab)
    batches = step_batches(torch, data, cfg, cfg.steps)
    losses, times = [], []
    m = cfg.microbatches
    for x, y in batches:
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for xm, ym in zip(x.chunk(m), y.chunk(m)):
            loss = lf(model(xm), ym) / m
            loss.backward()
            total += loss.item()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(total)
    return result_json(cfg, losses, times)


def pipeline_worker(rank, cfg, port, queue):
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleZBVZeroBubble
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    data = CharText(cfg.seed, cfg.seq_len, cfg.batch_size // cfg.microbatches)
    cfg.vocab = data.vocab
    layers = build_layers(torch, cfg)
    initialize(torch, layers, cfg.seed)  # every rank builds all (cheap) and keeps its stages
    counts = cfg.layers_per_stage
    stage_ranks = cfg.stage_ranks
    num_stages = len(counts)
    bounds = np.cumsum([0] + counts)
    mine = [s for s in range(num_stages) if stage_ranks[s] == rank]
    stages, modules = [], []
    for s in mine:
        mod = as_module(torch, layers[bounds[s]:bounds[s + 1]])
        modules.append(mod)
        stages.append(PipelineStage(mod, s, num_stages, torch.device("cpu"), group=dist.group.WORLD))
    lf = loss_fn(torch, cfg.vocab)
    m = cfg.microbatches
    if cfg.mode == "1f1b":
        schedule = Schedule1F1B(stages[0], n_microbatches=m, loss_fn=lf)
    else:
        schedule = ScheduleZBVZeroBubble(stages, n_microbatches=m, loss_fn=lf)
    params = [p for mod in modules for p in mod.parameters()]
    opt = adamw(torch, params)
    batches = step_batches(torch, data, cfg, cfg.steps)
    has_first = 0 in mine
    has_last = (num_stages - 1) in mine
    losses, times = [], []
    for x, y in batches:
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        step_losses = []
        kwargs = {}
        if has_last:
            kwargs = {"target": y, "losses": step_losses}
        if has_first:
            schedule.step(x, **kwargs)
        else:
            schedule.step(**kwargs)
        opt.step()
        dist.barrier()  # the step ends when both ranks are done, as PipeForge times it
        times.append(time.perf_counter() - t0)
        if has_last:
            losses.append(float(sum(l.item() for l in step_losses) / m))
    if has_last:
        queue.put(result_json(cfg, losses, times))
    dist.destroy_process_group()


def run_pipelined(cfg):
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=pipeline_worker, args=(r, cfg, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    result = queue.get()
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"torch_gpt: pipeline rank exited with {p.exitcode}")
    result["threads"] = 1
    result["processes"] = 2
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["sequential", "1f1b", "zb-v"], default="sequential")
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--microbatches", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="sequential: torch.set_num_threads")
    ap.add_argument("--layers-per-stage", type=str, default="",
                    help="pipelined: comma-separated top-level layer counts per stage (PipeForge's partition)")
    ap.add_argument("--stage-ranks", type=str, default="", help="pipelined: rank of each stage")
    cfg = ap.parse_args()
    if cfg.batch_size % cfg.microbatches:
        raise SystemExit("torch_gpt: --batch-size must be a multiple of --microbatches")
    if cfg.mode == "sequential":
        out = run_sequential(cfg)
    else:
        cfg.layers_per_stage = [int(v) for v in cfg.layers_per_stage.split(",")]
        cfg.stage_ranks = [int(v) for v in cfg.stage_ranks.split(",")]
        if sum(cfg.layers_per_stage) != cfg.layers + 3 or len(cfg.stage_ranks) != len(cfg.layers_per_stage):
            raise SystemExit("torch_gpt: --layers-per-stage must cover the layers + 3 top-level layers, "
                             "one --stage-ranks entry per stage")
        out = run_pipelined(cfg)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
