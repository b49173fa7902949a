"""Tests of the Python binding (pipeforge package).

Usage: pipeforge_test.py path/to/reference_loss [unittest arguments]. reference_loss (a C program
on the C API, tests/bindings/reference_loss.c) prints the losses and the parameter checksum of the
reference run; the binding must reproduce them bitwise.
"""

import gc
import json
import os
import pathlib
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

# Under tools/sanitize.sh asan, libpipeforge.so is instrumented and this interpreter is not: the
# sanitizer runtime must come first, so the test re-runs itself with it preloaded
# (PF_SANITIZER_PRELOAD, docs/SANITIZERS.md). The interpreter's own by-design leaks are not ours.
_SANITIZER_PRELOAD = os.environ.get("PF_SANITIZER_PRELOAD")
if _SANITIZER_PRELOAD and os.environ.get("LD_PRELOAD") != _SANITIZER_PRELOAD:
    os.environ["LD_PRELOAD"] = _SANITIZER_PRELOAD
    os.environ["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

import numpy as np

import pipeforge

REFERENCE_BINARY = None  # set from argv

FEATURES, CLASSES, ROWS, MICRO_BATCHES, STEPS = 8, 4, 8, 2, 3
MASK = (1 << 64) - 1


def mix(z):
    """SplitMix64's finaliser, as in reference_loss.c."""
    z = (z + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def batch(step):
    """The reference run's batch `step` (see reference_loss.c): exact float32 values."""
    inputs = np.array([[((mix(step * 1000003 + r * 101 + f) % 2001) - 1000) / 1024.0 for f in range(FEATURES)]
                       for r in range(ROWS)], dtype=np.float32)
    targets = np.array([mix(step * 7919 + r + 1000000007) % CLASSES for r in range(ROWS)], dtype=np.int32)
    return inputs, targets


BATCHES = [batch(s) for s in range(STEPS)]


def micro_batch(position):
    """What the data loader serves: micro-batch `position` of the same batches."""
    inputs, targets = BATCHES[position // 2]
    half = ROWS // MICRO_BATCHES
    rows = slice((position % 2) * half, (position % 2 + 1) * half)
    return inputs[rows], targets[rows]


def bits(x):
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def reference(*pipeline):
    """{'losses': [(loss bits, grad_norm bits), ...], 'checksum': hex} from the C program; with
    `pipeline` (schedule, stages[, chunks]) the C API's pipelined run, which adds 'ranks' and
    'bubble_rate_ok'."""
    out = subprocess.run([REFERENCE_BINARY, *map(str, pipeline)], check=True, capture_output=True, text=True).stdout
    result = {"losses": [], "checksum": None}
    for line in out.splitlines():
        words = line.split()
        if words[0] == "step":
            result["losses"].append((int(words[3], 16), int(words[5], 16)))
        elif words[0] == "checksum":
            result["checksum"] = words[1]
        elif words[0] == "ranks":
            result["ranks"], result["bubble_rate_ok"] = int(words[1]), words[3] == "1"
    return result


def reference_model():
    return pipeforge.Model.mlp(input_dim=FEATURES, hidden=[16, 16], classes=CLASSES, activation="relu")


def reference_trainer(model=None, **pipeline):
    return pipeforge.Trainer(model or reference_model(), micro_batches=MICRO_BATCHES, seed=42, optimizer="adamw",
                             lr=0.01, clip_norm=1.0, **pipeline)


class ReferenceRunTest(unittest.TestCase):
    """The binding trains exactly like the C API."""

    @classmethod
    def setUpClass(cls):
        cls.ref = reference()
        assert len(cls.ref["losses"]) == STEPS and cls.ref["checksum"], cls.ref

    def assert_matches_reference(self, results, trainer):
        self.assertEqual([(bits(r.loss), bits(r.grad_norm)) for r in results], self.ref["losses"])
        self.assertEqual(trainer.checksum(), self.ref["checksum"])

    def test_step_matches_c_api_bitwise(self):
        with reference_trainer() as trainer:
            results = [trainer.step(inputs, targets) for inputs, targets in BATCHES]
            self.assert_matches_reference(results, trainer)
            self.assertEqual(results[0].samples, ROWS)
            self.assertEqual(trainer.metrics().step, STEPS)

    def test_twice_gives_the_same_bits(self):
        with reference_trainer() as a, reference_trainer() as b:
            ra = [a.step(*batch) for batch in BATCHES]
            rb = [b.step(*batch) for batch in BATCHES]
            self.assertEqual([bits(r.loss) for r in ra], [bits(r.loss) for r in rb])
            self.assertEqual(a.checksum(), b.checksum())

    def test_loader_callable_matches_c_api_bitwise(self):
        with reference_trainer() as trainer:
            trainer.set_data_loader(micro_batch)
            results = [trainer.step_from_loader() for _ in range(STEPS)]
            self.assert_matches_reference(results, trainer)
            self.assertEqual(trainer.metrics().data_position, STEPS * MICRO_BATCHES)

    def test_loader_object_with_next_and_seek(self):
        class Loader:
            def __init__(self):
                self.seeks = []

            def next(self, position):
                return micro_batch(position)

            def seek(self, position):
                self.seeks.append(position)

        loader = Loader()
        with reference_trainer() as trainer:
            trainer.set_data_loader(loader)
            results = [trainer.step_from_loader() for _ in range(STEPS)]
            self.assert_matches_reference(results, trainer)

    def test_non_contiguous_and_other_dtypes_are_converted(self):
        with reference_trainer() as trainer:
            results = []
            for inputs, targets in BATCHES:
                fortran = np.asfortranarray(inputs.astype(np.float64))  # strided and float64
                self.assertFalse(fortran.flags.c_contiguous)
                results.append(trainer.step(fortran, targets.astype(np.int64).tolist()))
            self.assert_matches_reference(results, trainer)

    def test_callback_references_are_kept_alive(self):
        with reference_trainer() as trainer:
            trainer.set_data_loader(lambda position: micro_batch(position))  # no other reference
            gc.collect()
            results = [trainer.step_from_loader() for _ in range(STEPS)]
            self.assert_matches_reference(results, trainer)

    def test_failing_loader_surfaces_type_and_message_and_step_can_be_retried(self):
        calls = []

        def loader(position):
            calls.append(position)
            if position == 3 and calls.count(3) == 1:
                raise ZeroDivisionError("shard 3 divided by zero")
            return micro_batch(position)

        with reference_trainer() as trainer:
            trainer.set_data_loader(loader)
            results = [trainer.step_from_loader()]
            with self.assertRaises(pipeforge.CallbackError) as caught:
                trainer.step_from_loader()
            error = caught.exception
            self.assertIn("ZeroDivisionError: shard 3 divided by zero", str(error))
            self.assertIn("micro-batch 1 of 2", str(error))
            self.assertIsInstance(error.__cause__, ZeroDivisionError)
            self.assertEqual(error.code_name, "CALLBACK_ERROR")
            self.assertEqual(trainer.metrics().step, 1)  # nothing changed
            results += [trainer.step_from_loader() for _ in range(STEPS - 1)]  # the retry works
            self.assert_matches_reference(results, trainer)

    def test_loader_returning_garbage(self):
        with reference_trainer() as trainer:
            trainer.set_data_loader(lambda position: "not a batch")
            with self.assertRaisesRegex(pipeforge.CallbackError, "ValueError"):
                trainer.step_from_loader()
            trainer.set_data_loader(lambda position: (np.zeros((4, 3), np.float32), np.zeros(4, np.int32)))
            with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "inputs"):
                trainer.step_from_loader()

    def test_loader_on_another_thread(self):
        # The runtime calls the loader on the thread that steps; the GIL is taken there.
        results, errors = [], []

        def train():
            try:
                with reference_trainer() as trainer:
                    trainer.set_data_loader(micro_batch)
                    results.extend(trainer.step_from_loader() for _ in range(STEPS))
                    results.append(trainer.checksum())
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        thread = threading.Thread(target=train)
        thread.start()
        thread.join()
        self.assertEqual(errors, [])
        self.assertEqual([(bits(r.loss), bits(r.grad_norm)) for r in results[:-1]], self.ref["losses"])
        self.assertEqual(results[-1], self.ref["checksum"])


class ErrorTest(unittest.TestCase):
    def test_bad_json_is_a_value_error_with_the_message(self):
        with self.assertRaises(ValueError) as caught:
            pipeforge.Model.from_json('{"layers": [')
        self.assertIsInstance(caught.exception, pipeforge.InvalidArgumentError)
        self.assertIsInstance(caught.exception, pipeforge.Error)
        self.assertIn("malformed", str(caught.exception))
        self.assertEqual(caught.exception.code, 1)
        with self.assertRaisesRegex(ValueError, r"layers\[0\]"):
            pipeforge.Model.from_json(
                {"input": {"kind": "features", "features": 4, "classes": 2}, "layers": [{"type": "nope"}]})

    def test_json_round_trip(self):
        with reference_model() as model:
            again = pipeforge.Model.from_json(model.to_json())
            self.assertEqual(again.parameter_names(), model.parameter_names())
            self.assertEqual(model.parameter_names()[:2], ["fc0.weight", "fc0.bias"])
            self.assertEqual(model.num_parameter_elements(), 8 * 16 + 16 + 16 * 16 + 16 + 16 * 4 + 4)

    def test_bad_arguments(self):
        with reference_trainer() as trainer:
            with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "inputs"):
                trainer.step(np.zeros((8, 3), np.float32), np.zeros(8, np.int32))
            with self.assertRaises(pipeforge.NotFoundError) as caught:
                trainer.get_parameter("nope.weight")
            self.assertIsInstance(caught.exception, LookupError)
            self.assertIn("nope.weight", str(caught.exception))
            with self.assertRaises(TypeError):
                trainer.step(["a", "b"], np.zeros(2, np.int32))
            with self.assertRaises(ValueError):
                trainer.set_parameter("fc0.bias", np.zeros(3))
            with self.assertRaisesRegex(pipeforge.Error, "/nonexistent/checkpoint"):
                trainer.load_checkpoint("/nonexistent/checkpoint")
        with self.assertRaisesRegex(ValueError, "optimizer"):
            pipeforge.Trainer(reference_model(), optimizer="adam")
        with self.assertRaises(TypeError):
            pipeforge.Trainer(None)
        with self.assertRaises(TypeError):
            pipeforge.Trainer(reference_model(), learning_rate=0.1)
        with self.assertRaises(TypeError):
            reference_trainer().set_data_loader(42)

    def test_closed_objects_raise(self):
        trainer = reference_trainer()
        with trainer:
            pass
        self.assertTrue(trainer.closed)
        with self.assertRaisesRegex(pipeforge.FailedPreconditionError, "closed"):
            trainer.step(*BATCHES[0])
        trainer.close()  # idempotent
        model = reference_model()
        model.close()
        with self.assertRaises(pipeforge.FailedPreconditionError):
            model.to_json()
        with self.assertRaises(pipeforge.FailedPreconditionError):
            pipeforge.Trainer(model)

    def test_one_live_trainer_per_model(self):
        model = reference_model()
        with pipeforge.Trainer(model):
            with self.assertRaises(pipeforge.FailedPreconditionError):
                pipeforge.Trainer(model)
        pipeforge.Trainer(model).close()  # free again


class StateTest(unittest.TestCase):
    def test_parameters_and_checkpoints(self):
        with reference_trainer() as trainer, tempfile.TemporaryDirectory() as folder:
            trainer.step(*BATCHES[0])
            weight = trainer.get_parameter("fc0.weight")
            self.assertEqual(weight.shape, (16, 8))
            self.assertEqual(weight.dtype, np.float32)
            path = os.path.join(folder, "ckpt")
            trainer.save_checkpoint(path)
            saved = trainer.checksum()
            trainer.set_parameter("fc0.weight", np.zeros_like(weight))
            self.assertFalse(trainer.get_parameter("fc0.weight").any())
            self.assertNotEqual(trainer.checksum(), saved)
            trainer.load_checkpoint(path)
            self.assertEqual(trainer.checksum(), saved)
            np.testing.assert_array_equal(trainer.get_parameter("fc0.weight"), weight)

    def test_version(self):
        self.assertRegex(pipeforge.__version__, r"^\d+\.\d+\.\d+$")
        self.assertEqual(pipeforge.ABI_VERSION, pipeforge._core.library_abi_version())


class ScheduleTest(unittest.TestCase):
    def test_1f1b_bubble_rate_and_peak_activations(self):
        with pipeforge.Schedule.generate("1f1b", stages=4, micro_batches=8, chunks=1) as schedule:
            self.assertEqual((schedule.num_ranks, schedule.num_stages, schedule.num_micro_batches), (4, 4, 8))
            with schedule.simulate(t_f=1, t_b=1, t_w=1, t_comm=0, m_b=1, m_w=0) as sim:
                self.assertAlmostEqual(sim.bubble_rate, 3 / 11, places=12)  # (P-1)/(M+P-1)
                self.assertAlmostEqual(sim.span_bubble_rate, 3 / 11, places=12)
                self.assertEqual((sim.makespan, sim.ideal, sim.max_span, sim.num_ranks), (33.0, 24.0, 33.0, 4))
                self.assertEqual([r.peak_activations for r in sim.ranks], [4, 3, 2, 1])
                self.assertEqual([r.peak_activation_bytes for r in sim.ranks], [4.0, 3.0, 2.0, 1.0])
                self.assertEqual([r.first_start for r in sim.ranks], [0.0, 1.0, 2.0, 3.0])
                for r in sim.ranks:
                    self.assertEqual((r.busy, r.busy + r.idle), (24.0, 33.0))
                self.assertIn("rank 3", sim.to_ascii())
                grid = [line for line in sim.to_ascii(width=40).splitlines() if line.startswith("rank ")]
                self.assertEqual([len(line.split("|")[1]) for line in grid], [40] * 4)
                self.assertIn("<svg", sim.to_svg())

    def test_text_round_trip_through_parse(self):
        for name, chunks in (("1f1b", 1), ("zb-v", 1), ("interleaved-1f1b", 2)):
            with pipeforge.Schedule.generate(name, stages=4, micro_batches=8, chunks=chunks) as schedule:
                text = schedule.to_text()
                with pipeforge.Schedule.parse(text) as parsed:
                    self.assertEqual(parsed.to_text(), text, name)
                    self.assertEqual(str(parsed), text)
                    parsed.validate()
                    self.assertEqual(parsed.simulate().makespan, schedule.simulate().makespan)

    def test_bad_names_and_texts_raise_value_errors_naming_them(self):
        with self.assertRaises(ValueError) as cm:
            pipeforge.Schedule.generate("2f2b", stages=4, micro_batches=8)
        self.assertIsInstance(cm.exception, pipeforge.InvalidArgumentError)
        self.assertIn("2f2b", str(cm.exception))
        self.assertIn("zb-h1", str(cm.exception))  # lists the known names
        with self.assertRaisesRegex(ValueError, "stages"):
            pipeforge.Schedule.generate("1f1b", stages=0, micro_batches=8)
        with self.assertRaisesRegex(ValueError, "0QQ1"):
            pipeforge.Schedule.parse("0F0 0QQ1")
        with self.assertRaisesRegex(ValueError, "rank 0"):
            pipeforge.Schedule.parse("0BW0 0F0")  # parses, but B before F
        schedule = pipeforge.Schedule.generate("gpipe", 2, 2)
        with self.assertRaisesRegex(ValueError, "t_f"):
            schedule.simulate(t_f=-1)
        with self.assertRaisesRegex(ValueError, "width"):
            schedule.simulate().to_ascii(width=3)
        with self.assertRaises(TypeError):
            schedule.simulate(stage_t_f=3.0)
        with self.assertRaises(TypeError):
            pipeforge.Schedule(None)
        with self.assertRaises(TypeError):
            pipeforge.Schedule.generate("1f1b", stages=4.5, micro_batches=8)
        schedule.close()
        schedule.close()
        self.assertTrue(schedule.closed)
        with self.assertRaises(pipeforge.FailedPreconditionError):
            schedule.to_text()
        with self.assertRaises(pipeforge.FailedPreconditionError):
            schedule.simulate()

    # Since 0.6: PyTorch's CSV, send/recv semantics, the cost-driven V schedules.
    DEFERRED_RECEIVES = ("0F0,0SEND_F0,0RECV_B0,0F1,0SEND_F1,0B0,0RECV_B1,0B1\n"
                         "1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n")

    def test_pytorch_csv_round_trip(self):
        with pipeforge.Schedule.generate("zb-h1", stages=4, micro_batches=8) as schedule:
            csv = schedule.to_pytorch_csv()
            self.assertNotIn("SEND", csv)
            self.assertIn("3F0,3I0,3F1", csv)  # our B is PyTorch's I
            with pipeforge.Schedule.parse_pytorch_csv(csv) as parsed:
                self.assertEqual(parsed.to_pytorch_csv(with_comms=False), csv)
                self.assertEqual(parsed.simulate().makespan, schedule.simulate().makespan)
            with schedule.lower() as lowered:
                comms = lowered.to_pytorch_csv(with_comms=True)
                self.assertIn("RECV_B", comms)
                with pipeforge.Schedule.parse_pytorch_csv(comms) as parsed:
                    self.assertEqual(parsed.to_pytorch_csv(True), comms)
        with pipeforge.Schedule.generate("1f1b", 2, 2).apply_activation_policy("recompute") as recomputed:
            with self.assertRaisesRegex(ValueError, "RECOMPUTE"):
                recomputed.to_pytorch_csv()
        with self.assertRaisesRegex(ValueError, "0QQ0"):
            pipeforge.Schedule.parse_pytorch_csv("0F0,0QQ0\n")

    def test_deferred_receives_validate_and_simulate_posted(self):
        self.assertEqual(pipeforge.COMM_SEMANTICS, ("rendezvous", "posted"))
        with pipeforge.Schedule.parse_pytorch_csv(self.DEFERRED_RECEIVES) as schedule:
            self.assertEqual(schedule.to_pytorch_csv(with_comms=True), self.DEFERRED_RECEIVES)
            with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "deadlock"):
                schedule.validate()
            with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "deadlock"):
                schedule.validate(comm="rendezvous")
            schedule.validate(comm="posted")
            with self.assertRaisesRegex(ValueError, "deadlock"):
                schedule.simulate()
            # 0BW0 waits for 1SEND_B0 (4.5) + 0.5; 0BW1 for 1SEND_B1 (7.5) + 0.5 and ends at 10.
            self.assertEqual(schedule.simulate(t_comm=0.5, comm="posted").makespan, 10.0)
            with pipeforge.Schedule.parse(schedule.to_text()) as parsed:  # parse takes posted-only ones too
                parsed.validate("posted")
            with self.assertRaisesRegex(ValueError, "'buffered'"):
                schedule.validate(comm="buffered")
            with self.assertRaisesRegex(ValueError, "'eager'"):
                schedule.simulate(comm="eager")
            with self.assertRaises(TypeError):
                schedule.validate(comm=None)

    def test_v_min_takes_mem_limit_and_costs(self):
        def peak(schedule):
            return max(r.peak_activation_bytes for r in schedule.simulate().ranks)

        with pipeforge.Schedule.generate("v-min", stages=6, micro_batches=12) as own, \
                pipeforge.Schedule.generate("v-min", stages=6, micro_batches=12, mem_limit=1) as capped, \
                pipeforge.Schedule.generate("v-min", stages=6, micro_batches=12, t_comm=2.0) as slow:
            self.assertLessEqual(peak(own), 2 * 3)  # (6+4)//3 micro-batches, two chunks each
            self.assertLessEqual(peak(capped), 2 * 1)
            self.assertGreater(peak(own), 2 * 1)
            self.assertNotEqual(slow.to_text(), own.to_text())
        with self.assertRaisesRegex(ValueError, "chunks must be 2"):
            pipeforge.Schedule.generate("v-half", stages=4, micro_batches=8, chunks=3)

    def test_lowered_schedule_simulates_to_the_same_makespan(self):
        for name in ("1f1b", "zb-h1", "zb-v"):
            with pipeforge.Schedule.generate(name, stages=4, micro_batches=8) as schedule:
                with schedule.lower() as lowered:
                    lowered.validate()
                    self.assertIn("SEND_F", lowered.to_text())
                    self.assertNotIn("SEND_F", schedule.to_text())
                    for t_comm in (0.0, 0.25):
                        self.assertAlmostEqual(lowered.simulate(t_comm=t_comm).makespan,
                                               schedule.simulate(t_comm=t_comm).makespan, places=12, msg=name)

    def test_per_stage_costs(self):
        with pipeforge.Schedule.generate("gpipe", stages=2, micro_batches=2) as schedule:
            sim = schedule.simulate(stage_t_f=[1.0, 3.0])
            self.assertEqual(sim.ranks[1].busy, 2 * (3.0 + 1.0 + 1.0))
            self.assertEqual(sim.ranks[0].busy, 2 * (1.0 + 1.0 + 1.0))
            sim = schedule.simulate(stage_t_f=np.array([1, 3]), stage_m_b=(2, 5), t_w=0)
            self.assertEqual(sim.ranks[1].busy, 2 * (3.0 + 1.0))
            self.assertEqual([r.peak_activation_bytes for r in sim.ranks], [4.0, 10.0])
            with self.assertRaisesRegex(ValueError, "stage_t_b has 3"):
                schedule.simulate(stage_t_f=[1, 1], stage_t_b=[1, 1, 1])
            with self.assertRaisesRegex(ValueError, "2 stages"):
                schedule.simulate(stage_t_w=[1, 1, 1])

    def test_chrome_trace_is_json_and_results_outlive_close(self):
        schedule = pipeforge.Schedule.generate("zb-h1", stages=4, micro_batches=8)
        sim = schedule.simulate(t_comm=0.5)
        schedule.close()  # a simulation does not need its schedule
        trace = json.loads(sim.to_chrome_trace())
        events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["cat"] in ("F", "B", "W")]
        self.assertEqual(len(events), 4 * 8 * 3)  # F, B and W of every (micro-batch, stage)
        self.assertEqual({e["tid"] for e in events}, {0, 1, 2, 3})  # a track per rank
        self.assertAlmostEqual(max(e["ts"] + e["dur"] for e in events), sim.makespan, places=6)
        self.assertLess(sim.span_bubble_rate, 1.0)
        sim.close()
        self.assertEqual(len(sim.ranks), 4)  # read when it was made
        with self.assertRaises(pipeforge.FailedPreconditionError):
            sim.to_chrome_trace()

    def test_selective_at_the_minimum_budget_lowers_the_peak(self):
        costs = dict(m_b=100, m_in=10, transfer_bandwidth=200)
        with pipeforge.Schedule.generate("1f1b", stages=4, micro_batches=8) as schedule:
            self.assertEqual(schedule.simulate(**costs).ranks[0].peak_activation_bytes, 400.0)
            budget = schedule.min_activation_budget(**costs)
            self.assertIsInstance(budget, float)
            self.assertGreater(budget, 0.0)
            self.assertLess(budget, 400.0)
            with schedule.apply_activation_policy("selective", budget_bytes=budget, **costs) as applied:
                self.assertIsInstance(applied, pipeforge.Schedule)
                applied.validate()
                self.assertIn("OFFLOAD", applied.to_text())
                self.assertNotIn("OFFLOAD", schedule.to_text())  # a new schedule; the original is unchanged
                rank0 = applied.simulate(**costs).ranks[0]
                self.assertLess(rank0.peak_activation_bytes, 400.0)
                self.assertLessEqual(rank0.peak_activation_bytes, budget)
                self.assertGreater(rank0.offloaded_bytes, 0.0)
                self.assertEqual(rank0.recomputes, 0)
            with self.assertRaises(ValueError) as caught:
                schedule.apply_activation_policy("selective", budget_bytes=budget / 2, **costs)
            self.assertIsInstance(caught.exception, pipeforge.InvalidArgumentError)
            self.assertIn("smallest budget that works", str(caught.exception))

    def test_every_activation_policy_applies_and_simulates(self):
        costs = dict(m_b=100, m_in=10)
        with pipeforge.Schedule.generate("1f1b", stages=4, micro_batches=8) as schedule:
            self.assertEqual(set(pipeforge.ACTIVATION_POLICIES),
                             {"none", "recompute", "offload-host", "offload-file", "selective", "balance"})
            budget = schedule.min_activation_budget(**costs)
            for policy in pipeforge.ACTIVATION_POLICIES:
                with self.subTest(policy=policy), schedule.apply_activation_policy(policy, budget, **costs) as applied:
                    rank0 = applied.simulate(**costs).ranks[0]
                    if policy == "none":
                        self.assertEqual(applied.to_text(), schedule.to_text())
                        self.assertEqual(rank0.peak_activation_bytes, 400.0)
                    else:
                        self.assertLess(rank0.peak_activation_bytes, 400.0)
                    self.assertEqual(rank0.recomputes, 8 if policy == "recompute" else 0)
                    if policy in ("none", "recompute"):
                        self.assertEqual(rank0.offloaded_bytes, 0.0)
                    else:
                        self.assertGreater(rank0.offloaded_bytes, 0.0)

    def test_activation_costs_m_in_stage_m_in_and_transfer_bandwidth(self):
        with pipeforge.Schedule.generate("1f1b", stages=4, micro_batches=8) as schedule:
            with schedule.apply_activation_policy("recompute", m_b=100, m_in=10) as recomputed:
                scalar = recomputed.simulate(m_b=100, m_in=10).ranks[0].peak_activation_bytes
                per_stage = recomputed.simulate(m_b=100, stage_m_in=[10, 10, 10, 10]).ranks[0].peak_activation_bytes
                self.assertEqual(per_stage, scalar)
                # m_in is what a recomputed micro-batch keeps: more of it, a higher peak.
                self.assertGreater(recomputed.simulate(m_b=100, m_in=50).ranks[0].peak_activation_bytes, scalar)
                self.assertGreater(recomputed.simulate(m_b=100, stage_m_in=[50, 10, 10, 10]).ranks[0]
                                   .peak_activation_bytes, scalar)
            with schedule.apply_activation_policy("offload-host", m_b=100) as offloaded:
                free = offloaded.simulate(m_b=100).makespan
                slow = offloaded.simulate(m_b=100, transfer_bandwidth=1).makespan  # 100 time units a copy
                self.assertGreater(slow, free)
            with self.assertRaisesRegex(ValueError, "4 stages"):
                schedule.min_activation_budget(m_b=100, stage_m_in=[1, 2, 3])
            with self.assertRaisesRegex(ValueError, "stage_m_b has 4 entries but stage_m_in has 3"):
                schedule.simulate(stage_m_b=[1, 1, 1, 1], stage_m_in=[1, 1, 1])
            with self.assertRaisesRegex(ValueError, "transfer_bandwidth"):
                schedule.apply_activation_policy("offload-host", transfer_bandwidth=-1)
            with self.assertRaises(TypeError):
                schedule.min_activation_budget(m_c=1)  # not a cost
            with self.assertRaises(TypeError):
                schedule.apply_activation_policy(None)

    def test_unknown_activation_policy_is_named(self):
        with pipeforge.Schedule.generate("1f1b", stages=2, micro_batches=4) as schedule:
            with self.assertRaises(ValueError) as caught:
                schedule.apply_activation_policy("swap")
            self.assertIsInstance(caught.exception, pipeforge.InvalidArgumentError)
            self.assertIn("unknown activation policy 'swap'", str(caught.exception))
            schedule.close()
            with self.assertRaises(pipeforge.FailedPreconditionError):
                schedule.apply_activation_policy("none")
            with self.assertRaises(pipeforge.FailedPreconditionError):
                schedule.min_activation_budget()

    def test_every_known_schedule_generates(self):
        for name in pipeforge.SCHEDULE_NAMES:
            chunks = 2 if name in ("interleaved-1f1b", "interleaved-zb", "bfs") else 1
            with pipeforge.Schedule.generate(name, stages=4, micro_batches=8, chunks=chunks) as schedule:
                sim = schedule.simulate()
                self.assertGreaterEqual(sim.makespan, sim.ideal, name)


class PipelineTest(unittest.TestCase):
    """Pipelined training through the binding: bitwise equal to the C API's pipelined run and to the
    sequential reference; the last step's measurements; errors."""

    PIPELINES = (("1f1b", 2, 1), ("zb-v", 2, 1), ("interleaved-1f1b", 2, 2))

    @classmethod
    def setUpClass(cls):
        cls.sequential = reference()

    def test_pipelined_steps_match_the_c_api_bitwise(self):
        for name, stages, chunks in self.PIPELINES:
            with self.subTest(schedule=name):
                ref = reference(name, stages, chunks)
                self.assertEqual(ref["ranks"], stages)
                self.assertTrue(ref["bubble_rate_ok"])
                # The runtime keeps a pipelined run bitwise equal to the sequential one.
                self.assertEqual(ref["losses"], self.sequential["losses"])
                self.assertEqual(ref["checksum"], self.sequential["checksum"])
                with reference_trainer(schedule=name, stages=stages, chunks=chunks) as trainer:
                    self.assertEqual(trainer.num_ranks, stages)
                    results = [trainer.step(inputs, targets) for inputs, targets in BATCHES]
                    self.assertEqual([(bits(r.loss), bits(r.grad_norm)) for r in results], ref["losses"])
                    self.assertEqual(trainer.checksum(), ref["checksum"])

    def test_pipelined_data_loader_matches_bitwise(self):
        with reference_trainer(schedule="1f1b", stages=2) as trainer:
            trainer.set_data_loader(micro_batch)
            results = [trainer.step_from_loader() for _ in range(STEPS)]
            self.assertEqual([(bits(r.loss), bits(r.grad_norm)) for r in results], self.sequential["losses"])
            self.assertEqual(trainer.checksum(), self.sequential["checksum"])

    def test_rank_stats_bubble_rate_and_timelines_after_a_step(self):
        with reference_trainer(schedule="1f1b", stages=2, recv_timeout_seconds=30) as trainer:
            with self.assertRaisesRegex(pipeforge.FailedPreconditionError, "no step"):
                trainer.rank_stats
            trainer.step(*BATCHES[0])
            stats = trainer.rank_stats
            self.assertEqual(len(stats), 2)
            for r in stats:
                self.assertIsInstance(r, pipeforge.RankStats)
                self.assertGreater(r.busy, 0.0)
                self.assertGreaterEqual(r.idle, 0.0)
                self.assertGreaterEqual(r.finish, r.first_start)
                self.assertGreaterEqual(r.peak_activations, 1)
                self.assertGreater(r.peak_activation_bytes, 0.0)
            self.assertGreaterEqual(trainer.bubble_rate, 0.0)
            self.assertLess(trainer.bubble_rate, 1.0)
            trace = json.loads(trainer.timeline_to_chrome_trace())
            self.assertIn("traceEvents", trace)
            self.assertIn("<svg", trainer.timeline_to_svg())

    def test_schedule_text_and_explicit_partition(self):
        # The reference MLP's 5 top-level layers (fc0 act0 fc1 act1 head) split 2 + 3, GPipe by hand.
        text = "0F0 0F1 0BW0 0BW1\n1F0 1F1 1BW0 1BW1\n"
        with reference_trainer(schedule_text=text, layers_per_stage=[2, 3]) as trainer:
            self.assertEqual(trainer.num_ranks, 2)
            results = [trainer.step(*batch) for batch in BATCHES]
            self.assertEqual([(bits(r.loss), bits(r.grad_norm)) for r in results], self.sequential["losses"])
            self.assertEqual(trainer.checksum(), self.sequential["checksum"])
            self.assertEqual([r.peak_activations for r in trainer.rank_stats], [2, 2])  # GPipe

    def test_activation_policies_keep_results_bitwise_and_report_what_moved(self):
        # 4 ranks x 4 micro-batches: 1F1B's rank 0 holds 4 micro-batches, rank 3 one, so that every
        # policy has something to move (balance pairs rank 0 with rank 3).
        def trainer(**pipeline):
            return pipeforge.Trainer(reference_model(), micro_batches=4, seed=42, optimizer="adamw", lr=0.01,
                                     clip_norm=1.0, **pipeline)

        with trainer() as sequential:
            expected = [(bits(r.loss), bits(r.grad_norm)) for r in (sequential.step(*b) for b in BATCHES)]
            checksum = sequential.checksum()
        with tempfile.TemporaryDirectory() as folder:
            offload_dir = os.path.join(folder, "offload")  # created by the runtime
            cases = (("none", {}), ("recompute", {}), ("offload-host", {}),
                     ("offload-file", {"offload_dir": offload_dir}), ("balance", {}),
                     ("selective", {"activation_budget_bytes": 1e12}))  # nothing needs to move
            for policy, extra in cases:
                with self.subTest(policy=policy), \
                        trainer(schedule="1f1b", stages=4, layers_per_stage=[2, 1, 1, 1],  # the even split
                                activation_policy=policy, **extra) as pipelined:
                    results = [pipelined.step(*batch) for batch in BATCHES]
                    self.assertEqual([(bits(r.loss), bits(r.grad_norm)) for r in results], expected)
                    self.assertEqual(pipelined.checksum(), checksum)
                    rank0 = pipelined.rank_stats[0]
                    self.assertIsInstance(rank0.offloaded_bytes, float)
                    self.assertIsInstance(rank0.recomputes, int)
                    if policy in ("offload-host", "offload-file", "balance"):
                        self.assertGreater(rank0.offloaded_bytes, 0.0)
                    else:
                        self.assertEqual(rank0.offloaded_bytes, 0.0)
                    if policy == "recompute":
                        self.assertGreater(rank0.recomputes, 0)
                    else:
                        self.assertEqual(rank0.recomputes, 0)
            self.assertTrue(os.path.isdir(offload_dir))  # offload_dir reached the runtime

    def test_config_entries_reach_the_runtime(self):
        # Options as key/value entries (C API 0.11): keys the runtime checks, values in any Python
        # form that has a text form; they win over the keyword options.
        with reference_trainer(schedule="1f1b", stages=2, config={"layers_per_stage": [1, 4]}) as trainer:
            self.assertEqual(trainer.partition, [1, 4])
        with reference_trainer(schedule="1f1b", stages=4, config={"partition": "even", "record_timeline": True}) \
                as trainer:
            self.assertEqual(trainer.partition, [2, 1, 1, 1])
        with reference_trainer(schedule="gpipe", stages=2, config={"schedule": "1f1b"}) as trainer:
            trainer.step(*BATCHES[0])
            self.assertEqual(trainer.rank_stats[0].peak_activations, 2)  # 1f1b's, not gpipe's 4
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError,
                                    "config_entries\\[0\\].*unknown config key 'partiton'.*did you mean 'partition'"):
            reference_trainer(schedule="1f1b", stages=2, config={"partiton": "even"})
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "'ranks'.*'two'"):
            reference_trainer(schedule="1f1b", config={"ranks": "two"})
        with self.assertRaises(TypeError):
            reference_trainer(config=["partition", "even"])
        with self.assertRaises(TypeError):
            reference_trainer(config={"partition": object()})

    def test_activation_policy_errors(self):
        with self.assertRaises(ValueError) as caught:
            reference_trainer(schedule="1f1b", stages=2, activation_policy="offload-gpu")
        self.assertIsInstance(caught.exception, pipeforge.InvalidArgumentError)
        self.assertIn("offload-gpu", str(caught.exception))
        self.assertIn("offload-host", str(caught.exception))  # lists the known ones
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "activation_budget_bytes"):
            reference_trainer(schedule="1f1b", stages=2, activation_policy="selective")  # no budget
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "no schedule"):
            reference_trainer(activation_policy="recompute")
        with self.assertRaises(TypeError):
            reference_trainer(schedule="1f1b", stages=2, activation_policy=1)
        with self.assertRaises(ValueError):
            reference_trainer(schedule="1f1b", stages=2, activation_policy="")

    def test_devices_cpu_matches_the_default(self):
        # The sequential trainer and a 2-rank pipeline on devices "cpu" (a str, or a list joined with
        # ",": one entry = every rank, or one per rank) keep the default run's checksum bit for bit.
        cases = (({}, "cpu"), ({}, ["cpu"]), ({"schedule": "1f1b", "stages": 2}, "cpu"),
                 ({"schedule": "1f1b", "stages": 2}, ["cpu", "cpu"]),
                 ({"schedule": "1f1b", "stages": 2}, ("cpu", "cpu")))
        for pipeline, devices in cases:
            with self.subTest(pipeline=pipeline, devices=devices), \
                    reference_trainer(devices=devices, **pipeline) as trainer:
                results = [trainer.step(*batch) for batch in BATCHES]
                self.assertEqual([(bits(r.loss), bits(r.grad_norm)) for r in results], self.sequential["losses"])
                self.assertEqual(trainer.checksum(), self.sequential["checksum"])

    def test_devices_cuda_trains_or_says_it_is_not_available(self):
        for pipeline in ({}, {"schedule": "1f1b", "stages": 2}):
            with self.subTest(pipeline=pipeline):
                try:
                    trainer = reference_trainer(devices="cuda:0", **pipeline)
                except pipeforge.InvalidArgumentError as e:  # no GPU visible to this process
                    self.assertIn("cuda:0 is not available", str(e))
                    continue
                with trainer:  # a GPU: it trains, close to the CPU's losses
                    results = [trainer.step(*batch) for batch in BATCHES]
                    expected = [struct.unpack("<d", struct.pack("<Q", loss))[0]
                                for loss, _ in self.sequential["losses"]]
                    for result, loss in zip(results, expected):
                        self.assertAlmostEqual(result.loss, loss, delta=1e-4 * abs(loss) + 1e-6)

    def test_devices_errors(self):
        with self.assertRaises(ValueError) as caught:
            reference_trainer(devices="gpu0")
        self.assertIsInstance(caught.exception, pipeforge.InvalidArgumentError)
        self.assertIn("gpu0", str(caught.exception))
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "gpu0"):
            reference_trainer(schedule="1f1b", stages=2, devices=["cpu", "gpu0"])
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "one device"):
            reference_trainer(devices=["cpu", "cpu"])  # the sequential trainer runs on one device
        with self.assertRaises(TypeError):
            reference_trainer(devices=0)
        with self.assertRaises(TypeError):
            reference_trainer(devices=["cpu", 1])
        with self.assertRaises(ValueError):
            reference_trainer(devices="")

    def test_python_signatures_types_messages_and_reprs(self):
        # Issue 43 item 11: the options are real keyword parameters (help() and IDEs show them), a
        # wrong type is a TypeError naming the argument (lr="0.1" leaked SWIG's), a runtime error
        # names the option as Python spells it (not "pf_trainer_create: options->..."), reprs say
        # what the object is.
        import inspect
        parameters = inspect.signature(pipeforge.Trainer.__init__).parameters
        for name in ("micro_batches", "lr", "schedule", "stages", "chunks", "clip_norm", "config"):
            self.assertIn(name, parameters)
            self.assertEqual(parameters[name].kind, inspect.Parameter.KEYWORD_ONLY)
        self.assertIn("float", str(parameters["lr"].annotation))
        with self.assertRaisesRegex(TypeError, "^lr must be a number, not str$"):
            pipeforge.Trainer(reference_model(), lr="0.1")
        with self.assertRaisesRegex(TypeError, "^micro_batches must be an int, not float$"):
            pipeforge.Trainer(reference_model(), micro_batches=2.0)
        with self.assertRaisesRegex(TypeError, "^optimizer must be a str"):
            pipeforge.Trainer(reference_model(), optimizer=1)
        with self.assertRaisesRegex(TypeError, "unexpected keyword argument 'learning_rate'"):
            reference_trainer(learning_rate=0.1)
        with self.assertRaises(pipeforge.InvalidArgumentError) as caught:
            reference_trainer(schedule="1f1b", stages=2, seq_slices=-1)
        self.assertFalse(str(caught.exception).startswith("pf_"), str(caught.exception))
        self.assertNotIn("options->", str(caught.exception))
        self.assertIn("seq_slices", str(caught.exception))
        self.assertTrue(caught.exception.native_message.startswith("pf_trainer_create: "))
        model = reference_model()
        self.assertRegex(repr(model), r"^<pipeforge.Model \d+ parameters>$")
        with reference_trainer(schedule="1f1b", stages=2) as trainer:
            self.assertEqual(repr(trainer), "<pipeforge.Trainer schedule='1f1b', ranks=2, step 0>")
        self.assertEqual(repr(trainer), "<pipeforge.Trainer (closed)>")
        with reference_trainer() as trainer:
            self.assertEqual(repr(trainer), "<pipeforge.Trainer sequential, step 0>")

    def test_errors(self):
        with self.assertRaises(ValueError) as caught:
            reference_trainer(schedule="2f2b", stages=2)
        self.assertIsInstance(caught.exception, pipeforge.InvalidArgumentError)
        self.assertIn("2f2b", str(caught.exception))
        with self.assertRaisesRegex(ValueError, "both set"):
            reference_trainer(schedule="1f1b", schedule_text="0F0 0BW0", stages=2)
        with self.assertRaisesRegex(ValueError, "layers"):
            reference_trainer(schedule="1f1b", stages=2, layers_per_stage=[6, 6])
        with self.assertRaisesRegex(ValueError, "stage"):
            reference_trainer(schedule="1f1b", stages=16)  # more stages than layers
        with self.assertRaisesRegex(ValueError, "int32"):
            reference_trainer(schedule="1f1b", stages=2, layers_per_stage=[2, 1 << 40])
        with self.assertRaises(TypeError):
            reference_trainer(schedule="1f1b", stages=2.5)
        with self.assertRaises(TypeError):
            reference_trainer(schedule=1)
        # Pipeline ranks without a schedule are refused, as the command line refuses them (they
        # trained sequentially, ignoring stages=2).
        with self.assertRaisesRegex(ValueError, "2 needs a schedule"):
            reference_trainer(stages=2)
        with self.assertRaisesRegex(ValueError, "2 needs a schedule"):
            reference_trainer(chunks=2)
        with reference_trainer() as sequential:
            self.assertEqual(sequential.num_ranks, 1)
            sequential.step(*BATCHES[0])
            with self.assertRaisesRegex(pipeforge.FailedPreconditionError, "not pipelined"):
                sequential.rank_stats
            with self.assertRaisesRegex(pipeforge.FailedPreconditionError, "not pipelined"):
                sequential.bubble_rate
            with self.assertRaisesRegex(pipeforge.FailedPreconditionError, "not pipelined"):
                sequential.timeline_to_chrome_trace()
            with self.assertRaisesRegex(pipeforge.FailedPreconditionError, "not pipelined"):
                sequential.timeline_to_svg()


class ProcessOptionsTest(unittest.TestCase):
    """The 0.3 trainer options in one process (tests/bindings/python/mpirun_test.py runs them under
    mpirun): processes, data_parallel, gradient_reduction, ranks; process() and RankStats.local."""

    @classmethod
    def setUpClass(cls):
        cls.sequential = reference()

    def test_ranks_is_stages_under_its_own_name(self):
        with reference_trainer(schedule="1f1b", ranks=2) as trainer:
            self.assertEqual(trainer.num_ranks, 2)
            results = [trainer.step(inputs, targets) for inputs, targets in BATCHES]
            self.assertEqual([(bits(r.loss), bits(r.grad_norm)) for r in results], self.sequential["losses"])
            self.assertEqual(trainer.checksum(), self.sequential["checksum"])
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, r"^ranks is 2.*stages is 3"):
            reference_trainer(schedule="1f1b", ranks=2, stages=3)
        with self.assertRaises(TypeError):
            reference_trainer(schedule="1f1b", ranks="2")

    def test_threads_are_process_zero_of_one_and_run_every_rank(self):
        for processes in (None, "auto", "threads"):
            with self.subTest(processes=processes), \
                    reference_trainer(schedule="1f1b", stages=2, processes=processes) as trainer:
                self.assertEqual(trainer.process(), pipeforge.ProcessInfo(rank=0, size=1))
                trainer.step(*BATCHES[0])
                self.assertEqual([r.local for r in trainer.rank_stats], [True, True])
        with reference_trainer() as sequential:
            rank, size = sequential.process()
            self.assertEqual((rank, size), (0, 1))
        simulation = pipeforge.Schedule.generate("1f1b", stages=2, micro_batches=2).simulate()
        self.assertEqual([r.local for r in simulation.ranks], [False, False])  # nothing ran

    def test_one_process_per_rank_without_mpirun_is_refused(self):
        with self.assertRaisesRegex(pipeforge.FailedPreconditionError, "not launched by mpirun.*mpirun -np 2"):
            reference_trainer(schedule="1f1b", stages=2, processes="mpi")
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "no schedule"):
            reference_trainer(processes="mpi")
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "processes is 'mpich'"):
            reference_trainer(processes="mpich")
        with self.assertRaises(TypeError):
            reference_trainer(processes=2)

    def test_data_parallel_options(self):
        with self.assertRaisesRegex(pipeforge.FailedPreconditionError, "data_parallel is 2.*mpirun -np 4"):
            reference_trainer(schedule="1f1b", stages=2, data_parallel=2)
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "mpirun -np 4"):
            reference_trainer(schedule="1f1b", stages=2, data_parallel=2, processes="threads")
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "gradient_reduction is 'mean'"):
            reference_trainer(gradient_reduction="mean")
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "data_parallel is 0"):
            reference_trainer(data_parallel=0)
        # Without a schedule: D replicas' arithmetic in one trainer, on D x micro_batches micro-batches.
        with reference_trainer(data_parallel=2, gradient_reduction="deterministic") as trainer:
            trainer.set_data_loader(lambda position: micro_batch(position % (STEPS * MICRO_BATCHES)))
            result = trainer.step_from_loader()
            self.assertEqual(result.samples, 2 * ROWS)
            self.assertEqual(trainer.metrics().data_position, 2 * MICRO_BATCHES)


class NoFlushScheduleTest(unittest.TestCase):
    """What the tests of schedules that never flush share; subclasses define trainer(schedule, **options)."""

    def steps_then_drain(self, trainer):
        """Two steps (each loss finite), then drain(): the checksums before and after the drain."""
        for inputs, targets in BATCHES[:2]:
            self.assertTrue(np.isfinite(trainer.step(inputs, targets).loss))
        in_flight = trainer.checksum()
        trainer.drain()
        return in_flight, trainer.checksum()

    def train_and_drain(self, schedule, **options):
        with self.trainer(schedule, **options) as trainer:
            return self.steps_then_drain(trainer)[1]


class AsyncScheduleTest(NoFlushScheduleTest):
    """Asynchronous schedules (C API 0.4): their options reach the runtime, drain() finishes what a
    step left in flight."""

    @staticmethod
    def trainer(schedule, ranks=2, **options):
        return pipeforge.Trainer(reference_model(), micro_batches=MICRO_BATCHES, seed=42, optimizer="sgd", lr=0.05,
                                 momentum=0.9, schedule=schedule, ranks=ranks, **options)

    def test_pipedream_trains_two_steps_and_drains(self):
        with self.trainer("pipedream") as trainer:
            in_flight, drained = self.steps_then_drain(trainer)
            self.assertNotEqual(drained, in_flight)
            trainer.drain()  # nothing left: a no-op
            self.assertEqual(trainer.checksum(), drained)
        self.assertEqual(self.train_and_drain("pipedream"), drained)
        self.assertNotEqual(self.train_and_drain("1f1b"), drained)
        with reference_trainer() as sequential:
            sequential.step(*BATCHES[0])
            before = sequential.checksum()
            sequential.drain()
            self.assertEqual(sequential.checksum(), before)

    def test_method_options(self):
        # 3 ranks: stage 0's updates lag by 2, so the annealing and the correction both matter.
        pipemare = self.train_and_drain("pipemare", ranks=3)
        # 0 is the runtime's 0 here (no annealing, no average), not the C API's "default".
        self.assertNotEqual(self.train_and_drain("pipemare", ranks=3, pipemare_anneal_updates=0), pipemare)
        self.assertNotEqual(self.train_and_drain("pipemare", ranks=3, pipemare_decay=0.0), pipemare)
        self.assertEqual(self.train_and_drain("pipemare", ranks=3, pipemare_anneal_updates=100, pipemare_decay=0.9),
                         pipemare)
        # The even split: stage 0's BW then runs two linear layers, whose input gradient the
        # version's weight prediction changes (stage 0 of the parameter split is one linear layer,
        # whose weight gradient does not depend on the weights).
        self.assertNotEqual(self.train_and_drain("spectrain", spectrain_version=2, layers_per_stage=[3, 2]),
                            self.train_and_drain("spectrain", layers_per_stage=[3, 2]))
        self.train_and_drain("pipedream", vertical_sync=True)
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "vertical_sync.*spectrain"):
            self.trainer("spectrain", vertical_sync=True)
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "pipemare_decay.*pipedream"):
            self.trainer("pipedream", pipemare_decay=0.5)
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "pipemare_decay is 1.5"):
            self.trainer("pipemare", pipemare_decay=1.5)
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "pipemare_anneal_updates is -1"):
            self.trainer("pipemare", pipemare_anneal_updates=-1)
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "spectrain_version"):
            self.trainer("spectrain", spectrain_version=3)
        with self.assertRaises(TypeError):
            self.trainer("pipedream", vertical_sync=1)
        with self.assertRaises(TypeError):
            self.trainer("spectrain", spectrain_version=1.5)


class LocalLearningTest(NoFlushScheduleTest):
    """Local learning (C API 0.4): schedule="ppll" / "local-updates" with local_head=, drain()."""

    @staticmethod
    def trainer(schedule, **options):
        return pipeforge.Trainer(reference_model(), micro_batches=MICRO_BATCHES, seed=42, optimizer="adamw",
                                 lr=0.01, schedule=schedule, ranks=2, **options)

    def test_ppll_trains_two_steps_and_drains(self):
        with self.trainer("ppll") as trainer:
            in_flight, drained = self.steps_then_drain(trainer)
            self.assertNotEqual(drained, in_flight)
        self.assertEqual(self.train_and_drain("ppll", local_head="auto"), drained)
        self.assertNotEqual(self.train_and_drain("ppll", local_head="mlp"), drained)
        self.assertNotEqual(self.train_and_drain("local-updates"), drained)
        self.assertNotEqual(self.train_and_drain("1f1b"), drained)

    def test_bad_local_head_is_refused(self):
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "local_head.*1f1b"):
            self.trainer("1f1b", local_head="mlp")
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "local_head.*'conv'"):
            self.trainer("ppll", local_head="conv")
        with self.assertRaises(ValueError):
            self.trainer("ppll", local_head="")
        with self.assertRaises(TypeError):
            self.trainer("ppll", local_head=1)


class AdaptTest(unittest.TestCase):
    """Fail-slow adaptation (C API 0.9): 1f1b on 2 ranks with rank 1 at 4x moves layers off rank 1
    and trains bitwise like the sequential trainer."""

    def test_moves_layers_off_the_slow_rank_bitwise(self):
        losses, sums = [], []
        for options in ({}, dict(schedule="1f1b", ranks=2, adapt=True, slow_rank=1, slow_factor=4.0)):
            # 7 top-level layers, wide enough that their times are not noise (with AVX-512 GEMMs too).
            model = pipeforge.Model.mlp(input_dim=FEATURES, hidden=[512, 512, 512], classes=CLASSES)
            with pipeforge.Trainer(model, micro_batches=4, seed=5, lr=0.01, **options) as trainer:
                losses.append([bits(trainer.step(*batch(s)).loss) for s in range(6)])
                sums.append(trainer.checksum())
                moves = trainer.adaptations
        self.assertEqual(losses[1], losses[0])
        self.assertEqual(sums[1], sums[0])
        self.assertTrue(moves, "rank 1 at 4x never triggered a re-partition")
        # Patience is 3 steps: never before step 3; a noisy early step may delay it.
        self.assertGreaterEqual(moves[0]["step"], 3)
        self.assertLess(moves[0]["to"][1], moves[0]["from"][1])


class FillJobTest(unittest.TestCase):
    """A packed MLP sweep in a pipeline's bubbles (C API 0.14): config={"fill": "sweep:FILE"}, the
    main job's losses unchanged, fill_report ranking the sweep's models."""

    def test_a_sweep_fills_the_bubbles_without_changing_the_run(self):
        with tempfile.TemporaryDirectory() as tmp:
            spec = os.path.join(tmp, "grid.json")
            with open(spec, "w") as f:
                json.dump({"hidden": [4, 8], "activations": ["relu", "gelu"], "samples": 200, "features": 6,
                           "classes": 3}, f)
            losses, reports = [], []
            for config in ({}, {"fill": "sweep:" + spec}):
                model = pipeforge.Model.mlp(input_dim=FEATURES, hidden=[32, 32, 32], classes=CLASSES)
                with pipeforge.Trainer(model, micro_batches=4, seed=5, lr=0.01, schedule="1f1b", ranks=2,
                                       config=config) as trainer:
                    losses.append([bits(trainer.step(*batch(s)).loss) for s in range(4)])
                    reports.append(trainer.fill_report)
        self.assertEqual(losses[1], losses[0])
        self.assertIsNone(reports[0])
        report = reports[1]
        self.assertEqual(report["kind"], "sweep")
        self.assertEqual(report["model_count"], 4)
        self.assertGreater(report["steps_taken"], 0, "no bubble was filled")
        self.assertEqual(len(report["models"]), 4)
        self.assertEqual({m["hidden"] for m in report["models"]}, {4, 8})


class NeuronGroupsTest(unittest.TestCase):
    """Local learning with neuron groups (0.15) through config={"neuron_groups": G}: deterministic,
    another network than ppll's depth stages alone, refused naming the key when a width does not
    split."""

    def run_steps(self, config):
        model = pipeforge.Model.mlp(input_dim=FEATURES, hidden=[32, 32, 32], classes=CLASSES)
        with pipeforge.Trainer(model, micro_batches=4, seed=5, lr=0.01, schedule="ppll", ranks=2,
                               config=config) as trainer:
            losses = [bits(trainer.step(*batch(s)).loss) for s in range(4)]
            trainer.drain()
            return losses

    def test_width_groups_train_deterministically(self):
        groups = {"neuron_groups": 2, "group_diversity": 0.5}
        first, again, depth_only = self.run_steps(groups), self.run_steps(groups), self.run_steps({})
        self.assertEqual(first, again)
        self.assertNotEqual(first[1:], depth_only[1:])
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "neuron_groups 3: layer 0 'fc0' has 32 outputs"):
            self.run_steps({"neuron_groups": 3})


class OverlapStepsTest(unittest.TestCase):
    """Overlapping steps (0.16) through config={"overlap_steps": True}: run() with evaluations and
    clipping (the ranks update before the norm validates it) ends bitwise where the barrier ends;
    a schedule that never flushes is refused naming the key."""

    TEXT = dict(rows=2, seq_len=16, seed=3, held_out_fraction=0.1)

    def run_loop(self, config, schedule="zb-v", clip_norm=0.5):
        info = pipeforge.BuiltinData("char_text", **self.TEXT).info()
        model = pipeforge.Model.gpt(vocab=info["vocab_size"], seq_len=info["seq_len"], d_model=16, heads=2, layers=2)
        with pipeforge.Trainer(model, micro_batches=2, seed=7, lr=0.01, clip_norm=clip_norm, schedule=schedule,
                               ranks=2, config=config) as trainer:
            trainer.set_data_loader(pipeforge.BuiltinData("char_text", **self.TEXT))
            trainer.set_eval_loader(pipeforge.BuiltinData("char_text", held_out=True, **self.TEXT))
            result = trainer.run(6, eval_every=3)
            return result, {n: trainer.get_parameter(n).tobytes() for n in model.parameter_names()}

    def test_run_overlapped_equals_the_barrier(self):
        barrier, barrier_params = self.run_loop({})
        overlapped, overlapped_params = self.run_loop({"overlap_steps": True})
        self.assertEqual((overlapped.step, overlapped.steps_run, overlapped.evaluations), (6, 6, 2))
        self.assertEqual(bits(overlapped.loss), bits(barrier.loss))
        self.assertEqual(bits(overlapped.eval_loss), bits(barrier.eval_loss))
        self.assertEqual(overlapped_params, barrier_params)

    def test_refused_naming_the_key(self):
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "overlap_steps applies to synchronous schedules"):
            self.run_loop({"overlap_steps": True}, schedule="pipedream", clip_norm=0.0)


class TrainingLoopTest(unittest.TestCase):
    """The training loop (C API 0.5): learning-rate schedules, evaluation, built-in data, run() with
    checkpoints and a metrics log, resumed from its folder bitwise, the partitions."""

    TEXT = dict(rows=2, seq_len=16, seed=3, held_out_fraction=0.1)

    def text_trainer(self, **options):
        info = pipeforge.BuiltinData("char_text", **self.TEXT).info()
        self.assertGreater(info["vocab_size"], 40)
        model = pipeforge.Model.gpt(vocab=info["vocab_size"], seq_len=info["seq_len"], d_model=16, heads=2, layers=2)
        trainer = pipeforge.Trainer(model, micro_batches=2, seed=7, lr=0.01, schedule="1f1b", ranks=2,
                                    lr_schedule="cosine", warmup_steps=2, decay_steps=6, min_lr=1e-4, **options)
        trainer.set_data_loader(pipeforge.BuiltinData("char_text", **self.TEXT))
        trainer.set_eval_loader(pipeforge.BuiltinData("char_text", held_out=True, **self.TEXT))
        return trainer

    def test_run_resumed_from_its_checkpoint_folder_equals_one_run(self):
        with tempfile.TemporaryDirectory() as tmp:
            loop = dict(eval_every=3, checkpoint_every=3, keep_checkpoints=2)
            with self.text_trainer() as one:
                result = one.run(7, checkpoint_dir=os.path.join(tmp, "a"), metrics_log=os.path.join(tmp, "a.jsonl"),
                                 **loop)
                self.assertEqual((result.step, result.steps_run, result.evaluations, result.checkpoints), (7, 7, 3, 3))
                self.assertFalse(result.diverged)
                self.assertEqual(result.last_checkpoint, os.path.join(tmp, "a", "step-00000007.pfckpt"))
                self.assertGreater(result.eval_accuracy, 0.0)
                want = one.checksum()
                # Evaluation trains nothing and sees the same held-out micro-batches every time.
                first, again = one.evaluate(2), one.evaluate(2)
                self.assertEqual(first, again)
                self.assertEqual(first.loss, result.eval_loss)
                self.assertEqual(one.checksum(), want)
                # Embedding + a block | a block, LayerNorm, head: the split balancing parameters (the default).
                self.assertEqual(one.partition, [2, 3])
            with self.text_trainer() as half:
                half.run(3, checkpoint_dir=os.path.join(tmp, "b"), metrics_log=os.path.join(tmp, "b.jsonl"), **loop)
            with self.text_trainer() as rest:
                rest.load_checkpoint(os.path.join(tmp, "b"))
                self.assertEqual(rest.metrics().step, 3)
                rest.run(4, checkpoint_dir=os.path.join(tmp, "b"), metrics_log=os.path.join(tmp, "b.jsonl"), **loop)
                self.assertEqual(rest.checksum(), want)

            def lines(path):
                with open(path) as f:
                    rows = [json.loads(line) for line in f]
                for row in rows:
                    for timing in ("seconds", "tokens_per_s", "bubble_rate"):
                        del row[timing]
                return rows

            self.assertEqual(lines(os.path.join(tmp, "b.jsonl")), lines(os.path.join(tmp, "a.jsonl")))
            self.assertEqual([row["step"] for row in lines(os.path.join(tmp, "a.jsonl"))], list(range(1, 8)))

    def test_on_step_watches_and_stops_the_run_with_its_checkpoint(self):
        # Issue 43 item 3: run() could not be watched or stopped. A true return ends the run after
        # that step, its checkpoint written; the rest, resumed from it, ends where one run ends.
        with tempfile.TemporaryDirectory() as tmp:
            seen = []

            def watch(info):
                seen.append(info)
                return info.step == 3

            with self.text_trainer() as stopped:
                result = stopped.run(7, checkpoint_every=100, checkpoint_dir=os.path.join(tmp, "s"), on_step=watch)
            self.assertTrue(result.stopped)
            self.assertEqual((result.step, result.steps_run), (3, 3))
            self.assertEqual([i.step for i in seen], [1, 2, 3])
            self.assertTrue(all(isinstance(i, pipeforge.StepInfo) and i.loss > 0 and i.lr > 0 for i in seen))
            self.assertEqual(result.last_checkpoint, os.path.join(tmp, "s", "step-00000003.pfckpt"))
            with self.text_trainer() as whole:
                self.assertFalse(whole.run(7).stopped)
                want = whole.checksum()
            with self.text_trainer() as rest:
                rest.load_checkpoint(os.path.join(tmp, "s"))
                rest.run(4)
                self.assertEqual(rest.checksum(), want)
            with self.text_trainer() as trainer, self.assertRaises(TypeError):
                trainer.run(2, on_step=3)

    def test_ctrl_c_and_exceptions_in_on_step_stop_after_the_step_then_raise(self):
        # Ctrl-C arrives as KeyboardInterrupt while Python runs (here: raised in the callback, as
        # signal.raise_signal(SIGINT) would): the run ends after that step, checkpointed, then it
        # is raised again. Any other exception from on_step likewise.
        with tempfile.TemporaryDirectory() as tmp:
            def interrupt(info):
                if info.step == 2:
                    signal.raise_signal(signal.SIGINT)

            with self.text_trainer() as trainer:
                with self.assertRaises(KeyboardInterrupt):
                    trainer.run(7, checkpoint_every=100, checkpoint_dir=tmp, on_step=interrupt)
                self.assertEqual(trainer.metrics().step, 2)
            self.assertTrue(os.path.exists(os.path.join(tmp, "step-00000002.pfckpt")))

            def broken(info):
                raise RuntimeError("the watcher broke")

            with self.text_trainer() as trainer:
                with self.assertRaisesRegex(RuntimeError, "the watcher broke"):
                    trainer.run(5, on_step=broken)
                self.assertEqual(trainer.metrics().step, 1)

    def test_a_diverged_run_raises(self):
        model = pipeforge.Model.mlp(input_dim=FEATURES, hidden=[8], classes=CLASSES)
        with pipeforge.Trainer(model, micro_batches=1, optimizer="sgd", lr=1e30) as trainer:
            trainer.set_data_loader(micro_batch)
            with self.assertRaises(pipeforge.DivergedError) as caught:
                trainer.run(50)
            self.assertIsInstance(caught.exception, ArithmeticError)
            self.assertTrue(caught.exception.result.diverged)
            self.assertIn("diverged at step", str(caught.exception))
            # The loss or a parameter after the update: the reason is in the result and the message.
            self.assertRegex(caught.exception.result.divergence, r"^(the loss is |parameter ')")
            self.assertIn(caught.exception.result.divergence, str(caught.exception))

    def test_step_results_carry_the_scheduled_rate(self):
        with self.text_trainer() as trainer:
            rates = [trainer.step_from_loader().lr for _ in range(4)]
        self.assertAlmostEqual(rates[0], 0.005, places=7)
        self.assertAlmostEqual(rates[1], 0.01, places=7)
        self.assertAlmostEqual(rates[3], 1e-4 + (0.01 - 1e-4) * (1 + np.cos(np.pi / 6)) / 2, places=7)

    def test_evaluation_through_the_pipeline_equals_the_sequential_trainers(self):
        results = []
        for pipeline in ({}, {"schedule": "zb-v", "ranks": 2}):
            with reference_trainer(**pipeline) as trainer:
                trainer.set_data_loader(micro_batch)
                trainer.run(2)
                trainer.set_eval_loader(lambda position: micro_batch(4 + position))
                results.append(trainer.evaluate(2))
        self.assertEqual(results[0], results[1])
        self.assertEqual(results[0].samples, ROWS)

    def test_partition_by_parameters(self):
        # Linear 8->64 (576 values), relu, Linear 64->8 (520), relu, Linear 8->8 (72), relu,
        # Linear 8->4 (36): two stages of at most 628 values put the first Linear alone (the
        # even split, 4 + 3, would put 1096 on the first).
        model = pipeforge.Model.mlp(input_dim=FEATURES, hidden=[64, 8, 8], classes=CLASSES)
        counts = model.partition_by_parameters(2)
        self.assertEqual(counts, [1, 6])
        with pipeforge.Trainer(model, schedule="1f1b", ranks=2, layers_per_stage=counts) as trainer:
            self.assertEqual(trainer.partition, counts)
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "num_stages is 8"):
            model.partition_by_parameters(8)
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "stages is 0"):
            model.partition_by_parameters(0)

    def test_balanced_partition_and_errors(self):
        model = pipeforge.Model.mlp(input_dim=FEATURES, hidden=[16, 16, 16], classes=CLASSES)
        counts = model.partition_balanced(*micro_batch(0), stages=3)
        self.assertEqual(sum(counts), 7)
        with pipeforge.Trainer(model, schedule="gpipe", ranks=3, layers_per_stage=counts) as trainer:
            self.assertEqual(trainer.partition, counts)
        with self.assertRaises(TypeError):
            pipeforge.BuiltinData("synthetic", colour="red")
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "data kind"):
            pipeforge.BuiltinData("images").info()
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "cosine"):
            pipeforge.Trainer(reference_model(), lr_schedule="cosin")
        with reference_trainer() as trainer:
            with self.assertRaisesRegex(pipeforge.FailedPreconditionError, "eval loader"):
                trainer.evaluate(1)
            trainer.set_eval_loader(lambda position: (_ for _ in ()).throw(KeyError("held-out")))
            with self.assertRaisesRegex(pipeforge.CallbackError, "KeyError") as caught:
                trainer.evaluate(1)
            self.assertIsInstance(caught.exception.__cause__, KeyError)


class HfFolderTest(unittest.TestCase):
    """Hugging Face Transformers folders and token files (C API 0.17): a Llama trained on a token
    file, exported, rebuilt with Model.from_hf and loaded with load_hf_weights, bitwise; refusals
    named and changing nothing."""

    LLAMA = {"preset": "llama", "vocab": 20, "seq_len": 8, "d_model": 16, "heads": 4, "kv_heads": 2, "layers": 2,
             "mlp_hidden": 24}

    @staticmethod
    def write_tokens(folder, tokens):
        path = os.path.join(folder, "train.bin")  # nanoGPT's format: uint16 tokens, nothing else
        np.asarray(tokens, dtype="<u2").tofile(path)
        return path

    def test_export_from_hf_and_load_hf_weights_round_trip(self):
        with tempfile.TemporaryDirectory() as folder:
            tokens = self.write_tokens(folder, np.arange(200) % 20)
            data = pipeforge.BuiltinData("token_file", path=tokens, vocab=20, rows=2, seq_len=8, seed=1)
            self.assertEqual(data.info(), {"vocab_size": 20, "seq_len": 8})
            model = pipeforge.Model.from_json(self.LLAMA)
            hf = os.path.join(folder, "hf")
            with pipeforge.Trainer(model, micro_batches=2, seed=7, lr=0.01) as trained:
                trained.set_data_loader(data)
                for _ in range(2):
                    self.assertTrue(np.isfinite(trained.step_from_loader().loss))
                trained.export_hf(hf)
                expected = {n: trained.get_parameter(n).tobytes() for n in model.parameter_names()}
                expected_checksum = trained.checksum()
            with open(os.path.join(hf, "config.json")) as f:
                self.assertEqual(json.load(f)["model_type"], "llama")
            restored = pipeforge.Model.from_hf(pathlib.Path(hf))
            self.assertEqual(restored.parameter_names(), model.parameter_names())
            with pipeforge.Trainer(restored, seed=99, schedule="1f1b", ranks=2) as loaded:
                self.assertNotEqual(loaded.checksum(), expected_checksum)
                loaded.load_hf_weights(pathlib.Path(hf))
                self.assertEqual({n: loaded.get_parameter(n).tobytes() for n in expected}, expected)
                self.assertEqual(loaded.checksum(), expected_checksum)

    def test_refusals_are_named_and_change_nothing(self):
        with tempfile.TemporaryDirectory() as folder:
            tokens = self.write_tokens(folder, np.full(64, 30))
            with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "vocab is 0"):
                pipeforge.BuiltinData("token_file", path=tokens).info()
            small = dict(self.LLAMA, layers=1)
            with pipeforge.Trainer(pipeforge.Model.from_json(small)) as one_block:
                one_block.export_hf(os.path.join(folder, "small"))
                with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "unknown names 'hf-bert'"):
                    one_block.export_hf(os.path.join(folder, "bert"), names="hf-bert")
            with pipeforge.Trainer(pipeforge.Model.from_json(self.LLAMA), micro_batches=1) as trainer:
                before = trainer.checksum()
                with self.assertRaisesRegex(pipeforge.InvalidArgumentError, r"model\.layers\.1\..* is missing"):
                    trainer.load_hf_weights(os.path.join(folder, "small"))
                self.assertEqual(trainer.checksum(), before)
                trainer.set_data_loader(pipeforge.BuiltinData("token_file", path=tokens, vocab=20, rows=2, seq_len=8))
                with self.assertRaisesRegex(pipeforge.CallbackError, "is 30, outside the model's vocabulary of 20"):
                    trainer.step_from_loader()
                self.assertEqual(trainer.checksum(), before)
            with self.assertRaises(pipeforge.NotFoundError):
                pipeforge.Model.from_hf(os.path.join(folder, "missing"))


class Cifar10Test(unittest.TestCase):
    """CIFAR-10 images (C API 0.18): BuiltinData("cifar10") of a cifar-10-batches-bin folder trains an
    MLP of input width 3072 and evaluates on test_batch.bin, each row the pixels / 255; damaged
    files refused naming them."""

    @staticmethod
    def write_records(path, ids):
        """Records of a label byte (id % 10) and 3072 pixel bytes ((id + k) % 256)."""
        records = np.zeros((len(ids), 3073), dtype=np.uint8)
        for row, i in enumerate(ids):
            records[row, 0] = i % 10
            records[row, 1:] = (i + np.arange(3072)) % 256
        records.tofile(path)
        return path

    def test_a_folder_trains_an_mlp_and_damage_is_refused(self):
        with tempfile.TemporaryDirectory() as folder:
            for n in range(1, 6):
                self.write_records(os.path.join(folder, f"data_batch_{n}.bin"), [10 * n, 10 * n + 1])
            self.write_records(os.path.join(folder, "test_batch.bin"), [100, 101, 102])
            data = pipeforge.BuiltinData("cifar10", path=pathlib.Path(folder), rows=2, seed=1)
            self.assertEqual(data.info(), {"features": 3072, "classes": 10})
            model = pipeforge.Model.mlp(input_dim=3072, hidden=[8], classes=10)
            with pipeforge.Trainer(model, micro_batches=2, seed=7, lr=0.01) as trainer:
                trainer.set_data_loader(data)
                trainer.set_eval_loader(pipeforge.BuiltinData("cifar10", path=folder, rows=2, held_out=True))
                self.assertTrue(np.isfinite(trainer.step_from_loader().loss))
                evaluation = trainer.evaluate(2)  # test_batch.bin: 2 images, then the remainder
                self.assertEqual(evaluation.samples, 3)
                self.assertTrue(np.isfinite(evaluation.loss))

            cut = os.path.join(folder, "cut.bin")
            with open(os.path.join(folder, "data_batch_1.bin"), "rb") as f:
                pathlib.Path(cut).write_bytes(f.read()[:3073 + 5])
            with self.assertRaisesRegex(pipeforge.DataLossError, "cut.bin' holds 3078 bytes"):
                pipeforge.BuiltinData("cifar10", path=cut).info()
            bad = self.write_records(os.path.join(folder, "bad.bin"), [1, 2])
            with open(bad, "r+b") as f:
                f.seek(3073)
                f.write(bytes([10]))  # record 1's label
            with pipeforge.Trainer(pipeforge.Model.mlp(input_dim=3072, hidden=[8], classes=10),
                                   micro_batches=1) as trainer:
                before = trainer.checksum()
                trainer.set_data_loader(pipeforge.BuiltinData("cifar10", path=bad, rows=2))
                with self.assertRaisesRegex(pipeforge.CallbackError, "bad.bin': record 1 .* has label 10"):
                    trainer.step_from_loader()
                self.assertEqual(trainer.checksum(), before)
            os.remove(os.path.join(folder, "test_batch.bin"))
            with self.assertRaisesRegex(pipeforge.NotFoundError, "test_batch.bin"):
                pipeforge.BuiltinData("cifar10", path=folder).info()


class SeqSlicesTest(unittest.TestCase):
    """Sequence-sliced 1F1B (C API 0.7): schedule="seq1f1b" with seq_slices= on a tiny GPT."""

    TEXT = dict(rows=2, seq_len=16, seed=3)

    def trainer(self, schedule, **options):
        info = pipeforge.BuiltinData("char_text", **self.TEXT).info()
        model = pipeforge.Model.gpt(vocab=info["vocab_size"], seq_len=info["seq_len"], d_model=16, heads=2, layers=2)
        trainer = pipeforge.Trainer(model, micro_batches=2, seed=7, lr=0.01, schedule=schedule, ranks=2, **options)
        trainer.set_data_loader(pipeforge.BuiltinData("char_text", **self.TEXT))
        return trainer

    def run_steps(self, schedule, **options):
        """Three steps' losses and rank 0's peak activations (units held at once)."""
        with self.trainer(schedule, **options) as trainer:
            losses = [trainer.step_from_loader().loss for _ in range(3)]
            return losses, trainer.rank_stats[0].peak_activations

    def test_two_slices_equal_1f1b_within_tolerance(self):
        whole, whole_peak = self.run_steps("1f1b")
        sliced, sliced_peak = self.run_steps("seq1f1b", seq_slices=2)
        for step, (a, b) in enumerate(zip(sliced, whole)):
            self.assertLess(abs(a - b) / abs(b), 1e-5, f"step {step}: {a} vs {b}")
        # Rank 0 holds p + S - 1 = 3 half micro-batches instead of p = 2 micro-batches.
        self.assertEqual((whole_peak, sliced_peak), (2, 3))
        # One slice is 1f1b, bitwise.
        self.assertEqual(self.run_steps("seq1f1b", seq_slices=1), (whole, whole_peak))

    def test_errors_name_seq_slices(self):
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "seq_slices 3 must divide the model's seq_len 16"):
            self.trainer("seq1f1b", seq_slices=3)
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "1f1b does not slice sequences"):
            self.trainer("1f1b", seq_slices=2)
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "seq_slices is -1"):
            self.trainer("seq1f1b", seq_slices=-1)
        with self.assertRaises(TypeError):
            self.trainer("seq1f1b", seq_slices=1.5)


class PlanTest(unittest.TestCase):
    """The planner (C API 0.8): ranked candidates, and the choice trains bitwise equal to the
    sequential trainer with the same micro-batches; bad options named."""

    CLUSTER = {"devices_per_node": 2, "device": {"kind": "cpu", "memory_gib": 1},
               "intra_node": {"bandwidth_gb_per_s": 10, "latency_us": 5}}

    def plan(self, **options):
        options.setdefault("cluster", self.CLUSTER)
        options.setdefault("repeats", 1)
        options.setdefault("calibration_steps", 1)
        return pipeforge.Plan(reference_model(), *BATCHES[0], seed=42, optimizer="adamw", lr=0.01, clip_norm=1.0,
                              **options)

    def test_candidates_are_ranked_and_the_choice_trains_bitwise(self):
        with self.plan(schedules=["1f1b", "zb-h1", "gpipe"]) as plan:
            steps = [c["step_seconds"] for c in plan.candidates]
            self.assertGreater(len(steps), 3)
            self.assertEqual(steps, sorted(steps))
            self.assertEqual(len(plan.to_json()["candidates"]), len(steps))
            self.assertIn("Pareto front", plan.to_svg())
            index = next(i for i, c in enumerate(plan.candidates)
                         if c["data_parallel"] == 1 and c["schedule"] != "sequential")
            options = plan.trainer_options(index)
        self.assertEqual(options["schedule"], plan.candidates[index]["schedule"])
        common = dict(seed=42, optimizer="adamw", lr=0.01, clip_norm=1.0)
        with pipeforge.Trainer(reference_model(), **options, **common) as pipelined, \
                pipeforge.Trainer(reference_model(), micro_batches=options["micro_batches"], **common) as sequential:
            for inputs, targets in BATCHES:
                a, b = pipelined.step(inputs, targets), sequential.step(inputs, targets)
                self.assertEqual(bits(a.loss), bits(b.loss))
            self.assertEqual(pipelined.checksum(), sequential.checksum())

    def test_bad_options_are_named(self):
        bad = dict(self.CLUSTER, device={"kind": "tpu", "memory_gib": 1})
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "device.kind: unknown device kind 'tpu'"):
            self.plan(cluster=bad)
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "schedules: 'pipedream'"):
            self.plan(schedules=["pipedream"])
        with self.assertRaises(TypeError):
            self.plan(schedules="1f1b")
        with self.assertRaises(TypeError):
            self.plan(colour="red")
        with self.plan(memory_limit_bytes=10) as plan:  # nothing fits: no candidates, and what would
            self.assertEqual(plan.candidates, [])
            self.assertGreater(plan.to_json()["smallest_memory_that_works_bytes"], 10)


class GilTest(unittest.TestCase):
    def test_step_releases_the_gil(self):
        # A step of a wide MLP takes about 0.1 s. While steps run on a worker thread, this thread
        # keeps counting only if they release the GIL; otherwise the longest gap between two counts
        # is about a whole step. (Loose on purpose: only a gap of most of a step fails.)
        model = pipeforge.Model.mlp(input_dim=256, hidden=[1024, 1024], classes=16)
        rng = np.random.default_rng(0)
        inputs = rng.standard_normal((512, 256), dtype=np.float32)
        targets = rng.integers(0, 16, 512).astype(np.int32)
        with pipeforge.Trainer(model, blas_threads=1) as trainer:
            trainer.step(inputs, targets)  # warm-up
            durations = []
            done = threading.Event()

            def train():
                for _ in range(3):
                    start = time.perf_counter()
                    trainer.step(inputs, targets)
                    durations.append(time.perf_counter() - start)
                done.set()

            worker = threading.Thread(target=train)
            longest_gap = 0.0
            worker.start()
            last = time.perf_counter()
            while not done.is_set():
                now = time.perf_counter()
                longest_gap = max(longest_gap, now - last)
                last = now
            worker.join()
        shortest_step = min(durations)
        self.assertGreater(shortest_step, 0.02, "the step is too short to tell")
        self.assertLess(longest_gap, 0.75 * shortest_step,
                        f"this thread stalled {longest_gap:.3f} s while steps of {shortest_step:.3f} s ran")


class LinearModelTest(unittest.TestCase):
    """pipeforge.train_linear: ridge on dense arrays, CSR and a libsvm file reaches the normal
    equations' solution (numpy's, written here); a classifier's two labels map to ±1 and back."""

    def setUp(self):
        rng = np.random.default_rng(4)
        self.X = rng.standard_normal((200, 5)).astype(np.float32)
        self.X[self.X < -0.8] = 0.0
        self.y = self.X.astype(np.float64) @ np.arange(1.0, 6.0) + 0.1 * rng.standard_normal(200)
        n, lam = self.X.shape[0], 0.05
        A = self.X.T.astype(np.float64) @ self.X / n + lam * np.eye(5)
        self.want = np.linalg.solve(A, self.X.T.astype(np.float64) @ self.y / n)
        self.lam = lam

    class _Csr:
        """The attributes train_linear reads of a scipy.sparse matrix (scipy is not needed here)."""

        def __init__(self, dense):
            self.shape = dense.shape
            rows, cols = np.nonzero(dense)
            self.indices, self.data = cols.astype(np.int32), dense[rows, cols]
            self.indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=dense.shape[0]))])

        def tocsr(self):
            return self

        def sort_indices(self):
            pass

    def test_ridge_reaches_the_normal_equations_from_arrays_csr_and_a_file(self):
        dense = pipeforge.train_linear(X=self.X, y=self.y, loss="squared", lambda_=self.lam, tol=1e-12, threads=2)
        sparse = pipeforge.train_linear(X=self._Csr(self.X), y=self.y, loss="squared", lambda_=self.lam, tol=1e-12,
                                        solver="sequential")
        with tempfile.TemporaryDirectory() as work:
            path = os.path.join(work, "ridge.svm")
            with open(path, "w") as f:
                for row, target in zip(self.X, self.y):
                    f.write(repr(float(target)) + "".join(f" {j + 1}:{float(v)!r}" for j, v in enumerate(row) if v) + "\n")
            from_file = pipeforge.train_linear(path, loss="squared", lambda_=self.lam, tol=1e-12, solver="async")
        for model in (dense, sparse, from_file):
            self.assertTrue(model.converged, model)
            np.testing.assert_allclose(model.weights, self.want, rtol=1e-6, atol=1e-7)
            self.assertIsNone(model.labels)
            self.assertLessEqual(model.duality_gap, 1e-12 * model.objective + 1e-15)
        np.testing.assert_allclose(dense.predict(self.X), self.X @ dense.weights, rtol=1e-12)
        self.assertIn("LinearModel(loss='squared'", repr(dense))

    def test_the_elastic_net_meets_its_optimality_conditions(self):
        # At the optimum of (1/n) Σ ½(y - xᵀw)² + (λ/2)‖w‖² + μ‖w‖₁ the smooth part's gradient g
        # has g_j = -μ sign(w_j) where w_j != 0 and |g_j| <= μ where w_j = 0 (checked in numpy).
        mu = 1.2
        model = pipeforge.train_linear(X=self.X, y=self.y, loss="squared", lambda_=self.lam, l1=mu, tol=1e-13)
        self.assertTrue(model.converged, model)
        self.assertEqual(model.l1, mu)
        self.assertIn("l1=1.2", repr(model))
        X, w, n = self.X.astype(np.float64), model.weights, self.X.shape[0]
        g = X.T @ (X @ w - self.y) / n + self.lam * w
        zero = w == 0
        self.assertGreaterEqual(int(zero.sum()), 1, w)
        self.assertLess(int(zero.sum()), w.size, w)
        np.testing.assert_allclose(g[~zero], -mu * np.sign(w[~zero]), atol=1e-5)
        self.assertTrue(np.all(np.abs(g[zero]) <= mu + 1e-6), g)
        objective = 0.5 * np.mean((X @ w - self.y) ** 2) + 0.5 * self.lam * w @ w + mu * np.abs(w).sum()
        self.assertAlmostEqual(model.objective, objective, places=9)
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "l1 must be >= 0"):
            pipeforge.train_linear(X=self.X, y=self.y, loss="squared", l1=-1.0)

    def test_a_classifier_maps_its_two_labels(self):
        labels = np.where(self.y > 0, 7, 3)
        model = pipeforge.train_linear(X=self.X, y=labels, loss="logistic", lambda_=1e-3, tol=1e-9)
        self.assertEqual(model.labels, (3.0, 7.0))
        self.assertGreater(model.accuracy, 0.9)
        self.assertEqual(set(np.unique(model.predict(self.X))), {3, 7})
        self.assertAlmostEqual(float(np.mean(model.predict(self.X) == labels)), model.accuracy, places=12)

    def test_bad_arguments_are_named(self):
        with self.assertRaisesRegex(TypeError, "lambda_ must be a number"):
            pipeforge.train_linear(X=self.X, y=self.y, lambda_="0.1")
        with self.assertRaisesRegex(ValueError, "loss must be one of logistic, squared, hinge"):
            pipeforge.train_linear(X=self.X, y=self.y, loss="log")
        with self.assertRaisesRegex(pipeforge.InvalidArgumentError, "lambda must be > 0"):
            pipeforge.train_linear(X=self.X, y=self.y, loss="squared", lambda_=0.0)
        with self.assertRaisesRegex(ValueError, "exactly two label values"):
            pipeforge.train_linear(X=self.X, y=self.y, loss="hinge")
        with self.assertRaises(pipeforge.NotFoundError):
            pipeforge.train_linear("/nonexistent/data.svm")


if __name__ == "__main__":
    REFERENCE_BINARY = os.path.abspath(sys.argv[1])
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)
