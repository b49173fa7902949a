"""Linear models by parallel coordinate descent: pipeforge.train_linear and LinearModel."""

import dataclasses
import json
import numbers
import os
import typing

import numpy as np

from . import core

_LOSSES = ("logistic", "squared", "hinge")
_SOLVERS = ("syscd", "sequential", "async")


@dataclasses.dataclass(frozen=True)
class LinearModel:
    """What train_linear learned: the weights w of (1/n) Σ loss(y, xᵀw) + (λ/2) ‖w‖² + μ ‖w‖₁ (no intercept)
    and how far the solver got. `labels` is (negative, positive): the two classes read as -1 and +1
    (logistic, hinge), None for squared."""

    loss: str
    lambda_: float
    weights: np.ndarray  # float64, one per feature
    objective: float  # the primal objective at `weights`
    dual_objective: float  # a lower bound on the optimum
    duality_gap: float  # objective - dual_objective: how far from the optimum at most
    epochs: int
    converged: bool  # the gap reached tol before max_epochs
    seconds: float  # the solver's wall time
    accuracy: typing.Optional[float]  # classifiers: share of training examples classified right
    labels: typing.Optional[typing.Tuple[float, float]]
    history: typing.List[dict]  # {"epoch", "seconds", "objective", "gap"} where the gap was computed
    l1: float = 0.0  # μ of the elastic net's μ ‖w‖₁ (0: L2 only)

    def decision_function(self, X):
        """Xᵀw for every row of X (a 2-D array or a scipy.sparse matrix)."""
        return np.asarray(X @ self.weights).reshape(-1)

    def predict(self, X):
        """squared: Xᵀw; logistic, hinge: the class of each row (the labels' values)."""
        z = self.decision_function(X)
        if self.labels is None:
            return z
        return np.where(z > 0, self.labels[1], self.labels[0])

    def __repr__(self):
        return (f"LinearModel(loss={self.loss!r}, lambda_={self.lambda_}, "
                f"{f'l1={self.l1}, ' if self.l1 else ''}features={self.weights.size}, "
                f"objective={self.objective:.8g}, duality_gap={self.duality_gap:.3g}, epochs={self.epochs}, "
                f"converged={self.converged})")


def _number(value, name, kind=numbers.Real):
    if isinstance(value, bool) or not isinstance(value, kind):
        raise TypeError(f"{name} must be {'an int' if kind is numbers.Integral else 'a number'}, "
                        f"not {type(value).__name__}")
    return value


def train_linear(data=None, *, X=None, y=None, loss: str = "logistic", lambda_: float = 1e-4,
                 solver: str = "syscd", threads: typing.Optional[int] = None, tol: float = 1e-6,
                 max_epochs: int = 1000, seed: int = 0, bucket_rows: int = 0, features: int = 0,
                 l1: float = 0.0) -> LinearModel:
    """Trains an L2-regularised linear model by dual coordinate descent until the duality gap is at
    most tol x the objective (docs/GLM.md); l1 > 0 adds l1 x ‖w‖₁ (the elastic net, beside lambda_).

    data: a libsvm-format file (<label> <feature>:<value> ..., features from 1; `features` sets d
    when the file's largest index is not it); or X (a 2-D array, or a scipy.sparse matrix, stored as
    CSR) and y. loss: "logistic", "squared" (ridge) or "hinge" (linear SVM); the classifiers take
    labels of two values (the smaller becomes -1). solver: "syscd" (buckets, per-thread replicas,
    dynamic partitioning; deterministic for a seed and thread count), "sequential" or "async"
    (lock-free threads). threads: default every hardware thread (sequential: 1)."""
    if loss not in _LOSSES:
        raise ValueError(f"loss must be one of {', '.join(_LOSSES)}, not {loss!r}")
    if solver not in _SOLVERS:
        raise ValueError(f"solver must be one of {', '.join(_SOLVERS)}, not {solver!r}")
    options = core.GlmOptions()
    options.loss = loss
    options.solver = solver
    options.lambda_ = float(_number(lambda_, "lambda_"))
    options.l1 = float(_number(l1, "l1"))
    options.threads = 0 if threads is None else int(_number(threads, "threads", numbers.Integral))
    options.tol = float(_number(tol, "tol"))
    options.max_epochs = int(_number(max_epochs, "max_epochs", numbers.Integral))
    options.seed = int(_number(seed, "seed", numbers.Integral))
    options.bucket_rows = int(_number(bucket_rows, "bucket_rows", numbers.Integral))
    labels = None
    if data is not None:
        if X is not None or y is not None:
            raise TypeError("pass either data (a libsvm file) or X and y, not both")
        handle = core.GlmModel.train_libsvm(os.fspath(data), int(_number(features, "features", numbers.Integral)),
                                            options)
    else:
        if X is None or y is None:
            raise TypeError("train_linear needs data (a libsvm file) or X and y")
        target = np.asarray(y, dtype=np.float64).reshape(-1)
        if loss != "squared":
            classes = np.unique(target)
            if classes.size != 2:
                raise ValueError(f"y: a classifier needs exactly two label values, found {classes.size}")
            labels = (float(classes[0]), float(classes[1]))
            target = np.where(target == classes[1], 1.0, -1.0)
        arrays = core.GlmData()
        if hasattr(X, "tocsr"):  # scipy.sparse
            csr = X.tocsr()
            csr.sort_indices()
            arrays.set_csr(np.ascontiguousarray(csr.indices, dtype=np.int32),
                           np.ascontiguousarray(csr.data, dtype=np.float32), int(csr.shape[1]))
            arrays.set_row_start(csr.indptr.astype(np.int64).tolist())
        else:
            dense = np.ascontiguousarray(X, dtype=np.float32)
            if dense.ndim != 2:
                raise ValueError(f"X must be 2-D (examples x features), not {dense.ndim}-D")
            arrays.set_dense(dense)
        arrays.set_labels(target.tolist())
        handle = core.GlmModel.train(arrays, options)
    try:
        r = handle.result()
        out = json.loads(handle.to_json())
    finally:
        handle.close()
    if data is not None and loss != "squared":
        labels = (r.negative_label, r.positive_label)
    return LinearModel(loss, float(lambda_), np.asarray(out["weights"], dtype=np.float64), r.objective,
                       r.dual_objective, r.duality_gap, r.epochs, bool(r.converged), r.seconds,
                       None if loss == "squared" else r.accuracy, labels, out["history"], float(l1))


LinearModel.__module__ = "pipeforge"
train_linear.__module__ = "pipeforge"
