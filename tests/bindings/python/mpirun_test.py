"""`mpirun -np 2 python3 ...` through the Python binding: a 1F1B training with one process per rank
(tests/bindings/python/mpi_worker.py) ends with the parameter checksum, and the losses, of the
single-process sequential run, computed here; each process ran its own rank, holds its own stages'
parameters and refuses the others'; data parallel 2 x 1 equals the sequential data_parallel=2 run.
The environment is that of the process tests (tests/util/mpirun.sh: Open MPI as root,
--oversubscribe on 2 cores, loopback only, a short TMPDIR)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

# Under tools/sanitize.sh asan, libpipeforge.so is instrumented and this interpreter is not: the
# sanitizer runtime must come first, so the test re-runs itself with it preloaded (as
# pipeforge_test.py does; PF_SANITIZER_PRELOAD, docs/SANITIZERS.md); mpirun passes it on.
_SANITIZER_PRELOAD = os.environ.get("PF_SANITIZER_PRELOAD")
if _SANITIZER_PRELOAD and os.environ.get("LD_PRELOAD") != _SANITIZER_PRELOAD:
    os.environ["LD_PRELOAD"] = _SANITIZER_PRELOAD
    os.environ["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import mpi_worker  # noqa: E402
import pipeforge  # noqa: E402

MPIRUN_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_btl_tcp_if_include": "lo",
    "OMPI_MCA_oob_tcp_if_include": "lo",
}


class MpirunTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if shutil.which("mpirun") is None:
            raise unittest.SkipTest("mpirun not found: run tools/setup.sh")  # noqa: the setup installs it
        cls.out = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        # Open MPI's session sockets must fit a 108-byte Unix socket path: a short TMPDIR.
        cls.session = tempfile.mkdtemp(prefix="pf-mpi.", dir="/tmp")
        env = dict(os.environ, **MPIRUN_ENV, TMPDIR=cls.session)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # where this test found pipeforge
        passed = ["-x", "PYTHONPATH"]
        if _SANITIZER_PRELOAD:  # set above, for this process and the ranks
            passed += ["-x", "LD_PRELOAD", "-x", "ASAN_OPTIONS"]
        command = ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", *passed, sys.executable,
                   os.path.join(HERE, "mpi_worker.py"), cls.out]
        try:
            run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        finally:
            shutil.rmtree(cls.session, ignore_errors=True)
        if run.returncode != 0:
            raise AssertionError(f"mpirun exited with {run.returncode}:\n{run.stdout}\n{run.stderr}")
        cls.ranks = []
        for rank in range(2):
            with open(os.path.join(cls.out, f"rank{rank}.json")) as f:
                cls.ranks.append(json.load(f))
        # The single-process references, in this process.
        cls.losses, cls.checksum = mpi_worker.reference()
        cls.dp_losses, cls.dp_checksum = mpi_worker.reference(micro_batches=2, data_parallel=2,
                                                              gradient_reduction="deterministic")

    def test_every_process_ends_with_the_sequential_checksum_and_losses(self):
        for rank, got in enumerate(self.ranks):
            with self.subTest(rank=rank):
                self.assertEqual(got["checksum"], self.checksum)
                self.assertEqual(got["losses"], self.losses)

    def test_each_process_ran_its_own_rank(self):
        for rank, got in enumerate(self.ranks):
            with self.subTest(rank=rank):
                self.assertEqual(got["process"], [rank, 2])
                self.assertEqual(got["num_ranks"], 2)
                self.assertEqual(got["local"], [r == rank for r in range(2)])
                self.assertEqual(got["busy"], [True, True])  # every rank's stats reach every process

    def test_parameters_live_in_the_process_of_their_stage(self):
        names = list(self.ranks[0]["parameters"])
        self.assertEqual(len(names), 8)
        for name in names:
            outcomes = [got["parameters"][name] for got in self.ranks]
            with self.subTest(parameter=name):
                self.assertEqual(outcomes.count("local"), 1, outcomes)
                self.assertIn("FailedPreconditionError:named", outcomes)

    def test_a_checkpoint_across_processes_reloads_bitwise(self):
        for rank, got in enumerate(self.ranks):
            with self.subTest(rank=rank):
                self.assertEqual(got["reloaded_checksum"], got["checksum"])
                self.assertEqual(got["alone_checksum"], got["checksum"])

    def test_data_parallel_deterministic_equals_the_sequential_replicas(self):
        for rank, got in enumerate(self.ranks):
            with self.subTest(rank=rank):
                self.assertEqual(got["dp_checksum"], self.dp_checksum)
                self.assertEqual(got["dp_losses"], self.dp_losses)


if __name__ == "__main__":
    unittest.main(verbosity=2)
