#!/usr/bin/env python3
"""Runs the peer solvers of `pipeforge glm` on one libsvm file and prints one JSON object.

  peers.py --data FILE.libsvm --loss logistic|squared|hinge --lambda L [--l1 MU] [--threads 2] --json

Every peer minimises the same objective as `pipeforge glm` (L2-regularised, no intercept):

    F(w) = (1/n) * sum_i loss(y_i, w.x_i) + (lambda/2) * ||w||^2
    logistic: log(1 + exp(-y z))    squared: (y - z)^2 / 2    hinge: max(0, 1 - y z)

plus mu * ||w||_1 with --l1 (the elastic net: then the peers that minimise it, PEERS_L1 below),
with the library's own regularisation parameter mapped from lambda (see LAMBDA MAPPINGS below and
bench/glm/README.md), at tight tolerances, so that each peer lands on the optimum. Each peer's
"objective" is F of its coef_ as computed by objective() here in float64, never the library's
own figure; "seconds" times the fit call only (data loading and conversion to the library's input
format are outside it). "reference_objective" is the lowest objective over the peers, and each
peer's "rel_gap" is (objective - reference) / |reference|.

Runs under bench/glm/setup.sh's venv (numpy, scipy, scikit-learn, snapml). A peer whose library
is missing or whose fit fails is listed with an "error" instead of an objective.
"""
import argparse
import json
import sys
import time
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file
from threadpoolctl import threadpool_limits

# LAMBDA MAPPINGS (n = number of rows; verified numerically, see README.md):
#   scikit-learn LogisticRegression / LinearSVC minimise  C * sum_i loss_i + 1/2 ||w||^2
#       -> divide by C n: C = 1 / (n lambda)
#   scikit-learn Ridge minimises ||y - Xw||^2 + alpha ||w||^2 = 2 * (sum_i 1/2 (y_i - z_i)^2
#       + alpha/2 ||w||^2) -> alpha = n lambda
#   Snap ML LogisticRegression / SupportVectorMachine / LinearRegression minimise
#       sum_i loss_i + regularizer/2 ||w||^2 (squared loss with the 1/2) -> regularizer = n lambda
# The elastic net, lambda/2 ||w||^2 + mu ||w||_1 (--l1 mu): with a = lambda + mu, r = mu / a,
#   scikit-learn ElasticNet minimises (1/(2n)) ||y - Xw||^2 + a r ||w||_1 + a (1 - r)/2 ||w||^2
#       -> alpha = a, l1_ratio = r
#   scikit-learn LogisticRegression (saga) minimises C sum_i loss_i + r ||w||_1 + (1 - r)/2 ||w||^2
#       -> C = 1 / (n a), l1_ratio = r
#   Snap ML offers L1 alone or L2 alone, not their sum: it has no peer here.


def objective(X, y, w, loss, lam, l1=0.0):
    """F(w) in float64: mean loss over the rows plus lambda/2 ||w||^2 plus l1 ||w||_1 (the one
    definition used for every peer)."""
    w = np.asarray(w, dtype=np.float64).ravel()
    z = X @ w
    if loss == "logistic":
        # log(1 + exp(-m)) without overflow for large |m|
        losses = np.logaddexp(0.0, -y * z)
    elif loss == "squared":
        losses = 0.5 * (y - z) ** 2
    elif loss == "hinge":
        losses = np.maximum(0.0, 1.0 - y * z)
    else:
        raise ValueError(loss)
    return float(losses.mean() + 0.5 * lam * np.dot(w, w) + l1 * np.abs(w).sum())


# ---------------------------------------------------------------------------------------------
# Peers (random_state fixed wherever a solver shuffles, so reruns repeat). Each factory takes
# (n, lam, threads, tol) and returns (estimator, params dict, how to prepare X for it). `tol` is
# None for the peer's own tight default. PEERS lists (name, factory[, run by default]); --peers
# names any of them, default-off ones included.


def _sk_logistic(solver, tol_default, max_iter):
    def make(n, lam, threads, tol):
        from sklearn.linear_model import LogisticRegression
        params = dict(solver=solver, C=1.0 / (n * lam), fit_intercept=False,
                      tol=tol if tol is not None else tol_default, max_iter=max_iter,
                      random_state=0)
        # L2 is LogisticRegression's default penalty (l1_ratio=0); passing penalty= is
        # deprecated in recent scikit-learn.
        return LogisticRegression(**params), params, "native"
    return make


def _sk_linearsvc(n, lam, threads, tol):
    from sklearn.svm import LinearSVC
    # liblinear's dual coordinate descent for the hinge loss often stops on max_iter rather
    # than on tol (its projected-gradient test); by then its objective no longer moves at
    # 1e-7 relative, so max_iter is what bounds the time here.
    params = dict(loss="hinge", dual=True, C=1.0 / (n * lam), fit_intercept=False,
                  tol=tol if tol is not None else 1e-6, max_iter=100_000, random_state=0)
    return LinearSVC(**params), params, "native"


def _sk_ridge(solver, tol_default):
    def make(n, lam, threads, tol):
        from sklearn.linear_model import Ridge
        # max_iter counts epochs for sag and iterations for sparse_cg; cholesky ignores both.
        params = dict(alpha=n * lam, fit_intercept=False, solver=solver,
                      tol=tol if tol is not None else tol_default, max_iter=10_000,
                      random_state=0)
        return Ridge(**params), params, "native"
    return make


def _snap(kind, tol_default, **fixed):
    def make(n, lam, threads, tol):
        import snapml
        cls = {"logistic": snapml.LogisticRegression, "hinge": snapml.SupportVectorMachine,
               "squared": snapml.LinearRegression}[kind]
        params = dict(regularizer=n * lam, fit_intercept=False, n_jobs=threads,
                      tol=tol if tol is not None else tol_default, max_iter=100_000,
                      random_state=0, **fixed)
        if kind != "hinge":
            params["penalty"] = "l2"
        # Snap ML trains in float32: it converts a float64 matrix inside fit(), so the matrix is
        # handed over already in float32 (CSR for its dual solver, CSC for its primal one).
        layout = "f32-csc" if fixed.get("dual") is False else "f32-csr"
        return cls(**params), params, layout
    return make


PEERS = {
    "logistic": [
        ("sklearn-liblinear", _sk_logistic("liblinear", 1e-10, 1000)),
        # saga's tol bounds the relative change of w over an epoch; below ~1e-6 that change
        # stalls at rounding level and it runs to max_iter, while 1e-6 already lands within
        # ~1e-12 of the optimum on the sets in README.md.
        ("sklearn-saga", _sk_logistic("saga", 1e-6, 1000)),
        ("sklearn-newton-cholesky", _sk_logistic("newton-cholesky", 1e-10, 100)),
        ("snapml", _snap("logistic", 1e-7, dual=True)),
        # Snap ML's primal solver (coordinate descent over columns): opt-in, it ran for over
        # 7 minutes on the dense 100k x 100 set where the dual takes ~12 s.
        ("snapml-primal", _snap("logistic", 1e-7, dual=False), False),
    ],
    "hinge": [
        ("sklearn-liblinear", _sk_linearsvc),
        # Snap ML's tol (largest change of a coefficient over an epoch) is a loose proxy for
        # the hinge objective: 1e-9 leaves it ~1e-4 above the optimum on README.md's sets.
        ("snapml", _snap("hinge", 1e-9)),
    ],
    "squared": [
        ("sklearn-ridge-auto", _sk_ridge("auto", 1e-10)),
        ("sklearn-ridge-sag", _sk_ridge("sag", 1e-6)),  # tol as for saga above
        ("snapml", _snap("squared", 1e-7, dual=True)),
        ("snapml-primal", _snap("squared", 1e-7, dual=False)),
    ],
}


# The elastic net's peers: each factory takes (n, lam, mu, threads, tol).
def _sk_elasticnet(n, lam, mu, threads, tol):
    from sklearn.linear_model import ElasticNet
    params = dict(alpha=lam + mu, l1_ratio=mu / (lam + mu), fit_intercept=False,
                  tol=tol if tol is not None else 1e-10, max_iter=100_000, random_state=0)
    return ElasticNet(**params), params, "native"


def _sk_saga_elasticnet(n, lam, mu, threads, tol):
    from sklearn.linear_model import LogisticRegression
    params = dict(solver="saga", C=1.0 / (n * (lam + mu)), l1_ratio=mu / (lam + mu), fit_intercept=False,
                  tol=tol if tol is not None else 1e-6, max_iter=1000, random_state=0)
    return LogisticRegression(**params), params, "native"


PEERS_L1 = {
    "squared": [("sklearn-elasticnet", _sk_elasticnet)],
    "logistic": [("sklearn-saga", _sk_saga_elasticnet)],
    "hinge": [],
}


# --sweep: the tolerances each peer is also run at (those looser than its tight default), and the
# relative gaps to the reference objective that "seconds_to_gap" reports the time to reach.
SWEEP_TOLS = [1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8]
GAP_TARGETS = [1e-2, 1e-3, 1e-4, 1e-6]


def prepare(X, layout, cache):
    """X as the peer wants it; conversions are cached and happen outside the timed fit."""
    if layout not in cache:
        if layout == "native":
            cache[layout] = X
        elif sp.issparse(X):
            m = X.astype(np.float32)
            cache[layout] = sp.csc_matrix(m) if layout == "f32-csc" else sp.csr_matrix(m)
        else:
            cache[layout] = (np.asfortranarray(X, dtype=np.float32) if layout == "f32-csc"
                             else np.ascontiguousarray(X, dtype=np.float32))
    return cache[layout]


def coef_of(est):
    return np.asarray(est.coef_, dtype=np.float64).ravel()


def fit_once(make, X, y, args, cache, tol):
    """One peer fit at `tol` (None: the peer's default): its objective, time and diagnostics."""
    est, params, layout = make(X.shape[0], args.lam, args.threads, tol)
    Xp = prepare(X, layout, cache)
    best = None
    for _ in range(args.repeat):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            est.fit(Xp, y)
            dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    out = {"objective": objective(X, y, coef_of(est), args.loss, args.lam, args.l1), "seconds": best}
    n_iter = getattr(est, "n_iter_", None)
    if n_iter is not None:
        out["n_iter"] = int(np.max(n_iter))
    msgs = sorted({str(w.message).splitlines()[0] for w in caught})
    if msgs:
        out["warnings"] = msgs  # e.g. ConvergenceWarning: it stopped on max_iter, not tol
    return out, params


def run_peer(name, make, X, y, args, cache):
    """The peer at its tight tolerance; with --sweep, first at each looser rung of SWEEP_TOLS
    too (each a fresh fit from zero, kept under "sweep")."""
    entry = {"name": name}
    try:
        if args.sweep:
            tight = make(X.shape[0], args.lam, args.threads, args.tol)[1]["tol"]
            entry["sweep"] = []
            for tol in [t for t in SWEEP_TOLS if t > tight]:
                res, _ = fit_once(make, X, y, args, cache, tol)
                entry["sweep"].append({"tol": tol, **res})
        res, params = fit_once(make, X, y, args, cache, args.tol)
        entry["params"] = params
        entry.update(res)
        if args.sweep:
            entry["sweep"].append({"tol": params["tol"], **res})
    except ImportError as e:
        entry["error"] = f"not installed: {e}"
    except Exception as e:  # a failing peer must not take the others down
        entry["error"] = f"{type(e).__name__}: {e}"
    return entry


def time_to_gap(entry, ref):
    """Per target relative gap: the fit time of the fastest sweep rung that is within it."""
    out = {}
    for gap in GAP_TARGETS:
        ok = [r["seconds"] for r in entry["sweep"]
              if (r["objective"] - ref) / abs(ref) <= gap]
        out[f"{gap:g}"] = min(ok) if ok else None
    return out


def load(path, fmt):
    X, y = load_svmlight_file(path, dtype=np.float64, zero_based=False)
    X = sp.csr_matrix(X)  # Snap ML checks for the csr_matrix class by name, not csr_array
    if X.nnz < 2**31:
        # load_svmlight_file may hand back int64 indices, which liblinear and saga refuse
        X.indices = X.indices.astype(np.int32)
        X.indptr = X.indptr.astype(np.int32)
    density = X.nnz / max(1, X.shape[0] * X.shape[1])
    if fmt == "dense" or (fmt == "auto" and density > 0.5):
        X = X.toarray()
    return X, np.asarray(y, dtype=np.float64), density


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="libsvm file, 1-based indices")
    ap.add_argument("--loss", required=True, choices=sorted(PEERS))
    ap.add_argument("--lambda", dest="lam", type=float, required=True)
    ap.add_argument("--l1", type=float, default=0.0,
                    help="mu of the elastic net's mu ||w||_1 (0: L2 only); the peers are then PEERS_L1's")
    ap.add_argument("--threads", type=int, default=2,
                    help="Snap ML's n_jobs and the BLAS / OpenMP pool (liblinear and saga are "
                         "single-threaded)")
    ap.add_argument("--tol", type=float, default=None,
                    help="one tolerance for every peer (default: each peer's tight default)")
    ap.add_argument("--peers", default=None,
                    help="comma-separated subset of peer names (default: all for the loss)")
    ap.add_argument("--format", choices=["auto", "dense", "sparse"], default="auto",
                    help="auto: a dense ndarray when over half the entries are stored, else CSR")
    ap.add_argument("--repeat", type=int, default=1, help="fits per peer; the fastest is kept")
    ap.add_argument("--sweep", action="store_true",
                    help="also fit each peer at looser tolerances and report the time each "
                         "needs to get within 1e-2 .. 1e-6 of the reference objective")
    ap.add_argument("--json", action="store_true",
                    help="print the JSON object (the only output there is; kept for symmetry "
                         "with pipeforge glm --json)")
    args = ap.parse_args()
    if args.lam <= 0:
        ap.error("--lambda must be > 0")

    t0 = time.perf_counter()
    X, y, density = load(args.data, args.format)
    if args.loss in ("logistic", "hinge") and not np.all(np.isin(y, (-1.0, 1.0))):
        sys.exit(f"{args.data}: {args.loss} needs labels -1 / +1")
    print(f"loaded {args.data}: {X.shape[0]} x {X.shape[1]}, density {density:.4f}, "
          f"{'dense' if isinstance(X, np.ndarray) else 'csr'}, "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)

    if args.l1 > 0:
        table = [(name, (lambda f: lambda n, lam, threads, tol: f(n, lam, args.l1, threads, tol))(make))
                 for name, make in PEERS_L1[args.loss]]
    else:
        table = PEERS[args.loss]
    wanted = set(args.peers.split(",")) if args.peers else None
    unknown = (wanted or set()) - {p[0] for p in table}
    if unknown:
        ap.error(f"no such peer for {args.loss}: {', '.join(sorted(unknown))}")
    cache = {}
    peers = []
    with threadpool_limits(limits=args.threads):
        for name, make, *on in table:
            if (name not in wanted) if wanted is not None else (on and not on[0]):
                continue
            entry = run_peer(name, make, X, y, args, cache)
            print(f"  {name}: " + (f"objective {entry['objective']:.12g}, "
                                   f"{entry['seconds']:.3f} s" if "objective" in entry
                                   else entry["error"]), file=sys.stderr)
            peers.append(entry)

    ok = [p for p in peers if "objective" in p]
    result = {
        "data": {"path": args.data, "rows": X.shape[0], "cols": X.shape[1],
                 "density": density, "format": "dense" if isinstance(X, np.ndarray) else "csr"},
        "loss": args.loss, "lambda": args.lam, "l1": args.l1, "threads": args.threads,
        "peers": peers,
    }
    if ok:
        ref = min(ok, key=lambda p: p["objective"])
        result["reference_objective"] = ref["objective"]
        result["reference_peer"] = ref["name"]
        for p in ok:
            p["rel_gap"] = (p["objective"] - ref["objective"]) / abs(ref["objective"])
            if args.sweep:
                p["seconds_to_gap"] = time_to_gap(p, ref["objective"])
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
