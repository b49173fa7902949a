"""What a user runs after `pip install pipeforge-*.whl`: trains an MLP with 1F1B on two ranks."""
import numpy as np
import pipeforge

x = np.random.default_rng(0).standard_normal((16, 8), dtype=np.float32)
y = (x[:, 0] > x[:, 1]).astype(np.int32)
with pipeforge.Trainer(pipeforge.Model.mlp(input_dim=8, hidden=[32], classes=2), micro_batches=4, lr=1e-2,
                       schedule="1f1b", stages=2) as trainer:
    losses = [trainer.step(x, y).loss for _ in range(30)]
print("pipeforge %s from %s: loss %.4f -> %.4f" % (pipeforge.__version__, pipeforge.__file__, losses[0], losses[-1]))
assert losses[-1] < losses[0]
try:  # on a machine without a GPU: why not, which shows whether the bundled CUDA backend was found
    pipeforge.Trainer(pipeforge.Model.mlp(input_dim=8, hidden=[32], classes=2), devices=["cuda:0"]).close()
    print("cuda: a trainer on cuda:0")
except pipeforge.Error as e:
    print("cuda: %s" % e)
