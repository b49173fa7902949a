"""The plain PyTorch loop a sweep replaces: each MLP of the grid trained alone, one after another
(nn.Sequential(Linear, activation, Linear), AdamW, cross-entropy, batches of a shuffled epoch).
Trains one model per hidden width and activation (repeat 0 of the grid) and prints one JSON object
with their mean seconds; bench/sweep/run.sh multiplies by the grid's model count.

  python torch_loop.py --features 20 --classes 4 --train-rows 4000 --hidden 4,8 --activations relu,gelu
"""
import argparse
import json
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--features", type=int, required=True)
    p.add_argument("--classes", type=int, required=True)
    p.add_argument("--train-rows", type=int, required=True)
    p.add_argument("--hidden", required=True)
    p.add_argument("--activations", required=True)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    x = torch.randn(a.train_rows, a.features)
    y = torch.randint(0, a.classes, (a.train_rows,))
    make_activation = {"relu": torch.nn.ReLU, "gelu": lambda: torch.nn.GELU(approximate="tanh"),
                       "tanh": torch.nn.Tanh, "sigmoid": torch.nn.Sigmoid, "identity": torch.nn.Identity}
    times = []
    for h in [int(v) for v in a.hidden.split(",")]:
        for act in a.activations.split(","):
            t0 = time.perf_counter()
            model = torch.nn.Sequential(torch.nn.Linear(a.features, h), make_activation[act](),
                                        torch.nn.Linear(h, a.classes))
            opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
            for _ in range(a.epochs):
                order = torch.randperm(a.train_rows)
                for begin in range(0, a.train_rows, a.batch):
                    idx = order[begin:begin + a.batch]
                    loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
            times.append(time.perf_counter() - t0)
    print(json.dumps({"torch": torch.__version__, "threads": a.threads, "models_timed": len(times),
                      "seconds_per_model": sum(times) / len(times)}))


if __name__ == "__main__":
    main()
