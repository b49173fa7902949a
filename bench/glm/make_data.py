#!/usr/bin/env python3
"""Writes a synthetic data set for the GLM benchmark in libsvm format.

  make_data.py --rows 100000 --cols 100 --out /tmp/glm-dense.libsvm
  make_data.py --rows 200000 --cols 500 --density 0.05 --out /tmp/glm-sparse.libsvm
  make_data.py --rows 100000 --cols 100 --task regression --out /tmp/glm-reg.libsvm

classification: sklearn.datasets.make_classification, two classes, labels written as -1 / +1.
regression: sklearn.datasets.make_regression, real labels.
--density D < 1 keeps each entry of the generated matrix independently with probability D (the
rest become zero), so about a share D of the entries are stored. The generator's labels then
hardly depend on what is left (logistic optimum ~0.67 against log 2 = 0.69 at D = 0.05), so by
default (--labels planted) they are drawn again from the sparse matrix X:
  regression:     y = X @ coef + noise, with make_regression's own coef and --noise;
  classification: y = +1 with probability sigmoid(4 z / std(z)), z = X @ v, v ~ N(0, 1) on
                  --informative random columns (a logistic model; ~10% of labels against it).
--labels generator keeps make_classification's / make_regression's labels as they are.

The file is libsvm text as sklearn.datasets.dump_svmlight_file writes it: one row per line,
"label idx:value ...", 1-based ascending column indices, zeros omitted, no header line, values
in the shortest form that reads back to the same double. Runs under bench/glm/setup.sh's venv.
"""
import argparse
import sys
import time

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import dump_svmlight_file, make_classification, make_regression


def sparsify(X, density, rng, chunk_rows=8192):
    """Returns X (dense) as CSR with each entry kept with probability `density`.

    Goes chunk by chunk of rows so the mask never holds more than one chunk.
    """
    blocks = []
    for start in range(0, X.shape[0], chunk_rows):
        part = X[start:start + chunk_rows]
        keep = rng.random(part.shape) < density
        blocks.append(sp.csr_matrix(np.where(keep, part, 0.0)))
    return sp.vstack(blocks, format="csr")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--cols", type=int, required=True)
    ap.add_argument("--density", type=float, default=1.0,
                    help="share of entries kept (0 < D <= 1); below 1 the matrix is stored sparse")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--task", choices=["classification", "regression"], default="classification")
    ap.add_argument("--informative", type=int, default=None,
                    help="informative features (default: max(2, cols // 5))")
    ap.add_argument("--noise", type=float, default=1.0,
                    help="regression only: std of the Gaussian noise on the labels")
    ap.add_argument("--labels", choices=["planted", "generator"], default="planted",
                    help="with --density < 1: labels drawn from the sparse matrix (default) or "
                         "the generator's own")
    ap.add_argument("--normalize", action="store_true",
                    help="scale every row to unit L2 norm (as LIBSVM's own data sets are), after "
                         "the labels are drawn")
    ap.add_argument("--out", required=True, help="libsvm file to write")
    args = ap.parse_args()
    if not 0.0 < args.density <= 1.0:
        ap.error("--density must be in (0, 1]")

    t0 = time.perf_counter()
    informative = args.informative or max(2, args.cols // 5)
    informative = min(informative, args.cols)
    if args.task == "classification":
        # A share of redundant (linear-combination) features makes the problem ill-conditioned
        # in the way real data is; flip_y leaves the classes non-separable.
        redundant = min(args.cols - informative, args.cols // 10)
        X, y = make_classification(n_samples=args.rows, n_features=args.cols,
                                   n_informative=informative, n_redundant=redundant,
                                   n_repeated=0, n_classes=2, flip_y=0.01,
                                   random_state=args.seed)
        y = np.where(y > 0, 1, -1).astype(np.int64)  # 0/1 -> -1/+1
    else:
        X, y, coef = make_regression(n_samples=args.rows, n_features=args.cols,
                                     n_informative=informative, noise=args.noise, coef=True,
                                     random_state=args.seed)

    if args.density < 1.0:
        rng = np.random.default_rng(args.seed + 1)
        X = sparsify(X, args.density, rng)
        if args.labels == "planted":
            if args.task == "regression":
                y = X @ coef + args.noise * rng.standard_normal(args.rows)
            else:
                v = np.zeros(args.cols)
                v[rng.choice(args.cols, informative, replace=False)] = \
                    rng.standard_normal(informative)
                z = X @ v
                p = 1.0 / (1.0 + np.exp(-4.0 * z / z.std()))
                y = np.where(rng.random(args.rows) < p, 1, -1).astype(np.int64)

    if args.normalize:
        if sp.issparse(X):
            norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
            X = sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ X
            X = sp.csr_matrix(X)
        else:
            norms = np.linalg.norm(X, axis=1)
            X = X / np.where(norms > 0, norms, 1.0)[:, None]

    dump_svmlight_file(X, y, args.out, zero_based=False)
    nnz = X.nnz if sp.issparse(X) else int(np.count_nonzero(X))
    print(f"wrote {args.out}: {args.rows} x {args.cols}, {nnz} nonzeros "
          f"({nnz / (args.rows * args.cols):.4f}), {args.task}, "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
