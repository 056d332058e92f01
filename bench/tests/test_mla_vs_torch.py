#!/usr/bin/env python3
"""bench/mla_vs_torch.py's Triton-facing parts that need no GPU: the target table, ratios
against Triton and SDPA, the random-shapes outputs with the Triton column, --dry-run, the
options, and the autotuning loop on stand-ins for the kernel, the tensors and the timer."""

import contextlib
import csv
import io
import math
import re
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mla_vs_torch as bench  # noqa: E402
import triton_peer as tp  # noqa: E402

SHAPES = {s.label: s for s in bench.DEFAULT_SHAPES}


def rows_at(label, mlatune_us, triton_us, sdpa_us):
    shape = SHAPES[label]
    rows = []
    for name, us in (("mlatune", mlatune_us), (bench.TRITON, triton_us), ("sdpa_materialized", sdpa_us)):
        if us is None:
            rows.append(bench.Row(shape, name, "failed", note="Triton unavailable: ModuleNotFoundError: no triton"))
        else:
            rows.append(bench.timed_row(shape, name, [us] * 5, 1e-6))
    bench.fill_ratios(rows)
    return rows


class TargetTableTest(unittest.TestCase):
    def setUp(self):
        self.rows = rows_at("S0", 4.0, 18.0, 22.0) + rows_at("S2", 300.0, 240.0, 420.0) \
            + rows_at("odd", 40.0, 80.0, 60.0)

    def test_columns_and_cells(self):
        lines = bench.format_target_table(self.rows).splitlines()
        self.assertEqual(len(lines), 2 + 3)
        header = [cell.strip() for cell in lines[0].strip("|").split("|")]
        self.assertEqual(header[:6], ["shape (B,T,H,D,R)", "mlatune µs", "Triton tf32x3 µs", "SDPA materialized µs",
                                      "target µs", "met"])
        self.assertTrue(all(line.count("|") == lines[0].count("|") for line in lines))
        self.assertEqual([c.strip() for c in lines[2].strip("|").split("|")][:8],
                         ["S0 2,32,4,16,24", "4.0", "18.0", "22.0", "≤ 5", "yes", "4.50", "5.50"])
        self.assertIn("| ≤ 150 | no | 0.80 | 1.40 |", lines[3])
        self.assertIn("| odd 2,333,8,64,100 | 40.0 | 80.0 | 60.0 | — | — | 2.00 | 1.50 |", lines[4])

    def test_targets_are_issue_15s(self):
        self.assertEqual(bench.TARGETS_US, {"S0": 5.0, "S1": 12.0, "S2": 150.0, "S3": 500.0, "S4": 800.0})

    def test_ratio_summary_against_both_peers(self):
        triton, sdpa = bench.ratio_summary_lines(self.rows)
        # Triton / mlatune: 4.5, 0.8, 2.0 -> geomean (7.2)^(1/3).
        self.assertIn(f"Triton tf32x3 / mlatune over 3 shapes: geomean {7.2 ** (1 / 3):.2f}, worst 0.80 at S2", triton)
        self.assertTrue(triton.endswith("mlatune behind at S2"), triton)
        self.assertIn("SDPA materialized / mlatune over 3 shapes", sdpa)
        self.assertTrue(sdpa.endswith("mlatune behind at none"), sdpa)

    def test_missing_triton_reads_na_and_says_why(self):
        rows = rows_at("S1", 20.0, None, 40.0)
        line = bench.format_target_table(rows).splitlines()[2]
        self.assertIn("| 20.0 | n/a | 40.0 | ≤ 12 | no | n/a | 2.00 |", line)
        triton = bench.ratio_summary_lines(rows)[0]
        self.assertEqual(triton, "Triton tf32x3 / mlatune: n/a (Triton unavailable: ModuleNotFoundError: no triton)")

    def test_report_opens_with_the_target_table_and_autotuning(self):
        report = bench.format_report(self.rows, {}, "events", "test GPU", {"S2": "autotuned over 105 configs"})
        self.assertLess(report.index("## Against the targets"), report.index("## S0 (B=2"))
        self.assertIn("| S0 2,32,4,16,24 | 4.0 | 18.0 |", report)
        self.assertIn("- Triton tf32x3 / mlatune over 3 shapes", report)
        self.assertIn("## Triton tf32x3 autotuning (before timing, not in the times)\n\n- S2: autotuned over 105", report)
        self.assertIn("| triton_tf32x3 | 240.0 |", report)  # the per-shape tables have its row

    def test_triton_is_in_every_failed_shape_and_the_plot_order(self):
        self.assertEqual(bench.IMPLEMENTATIONS[:3], ("mlatune", bench.TRITON, "sdpa_materialized"))


class RandomShapesTest(unittest.TestCase):
    def results(self):
        a, b = bench.Shape("a", 1, 2, 3, 8, 16), bench.Shape("b", 2, 2, 3, 8, 16)
        return [bench.RandomResult(a, "nearest X (why)", 0.5, 0, bench.timed_row(a, "mlatune", [10.0] * 5, 1e-7),
                                   bench.timed_row(a, "sdpa_materialized", [40.0] * 5, 2e-7),
                                   triton=bench.timed_row(a, bench.TRITON, [5.0] * 5, 4e-6, note="BLOCK_M=16")),
                bench.RandomResult(b, "default Y (why)", 3.0, 1, bench.timed_row(b, "mlatune", [20.0] * 5, 3e-6),
                                   bench.timed_row(b, "sdpa_materialized", [10.0] * 5, 1e-7),
                                   triton=bench.timed_row(b, bench.TRITON, [30.0] * 5, 1e-7))]

    def test_summary_has_both_peers(self):
        summary = bench.random_summary(self.results())
        self.assertIn("SDPA/mlatune geomean 1.414", summary)
        self.assertIn("Triton/mlatune geomean 0.866, worst 0.500 at 1,2,3,8,16; below 1.0: 1 of 2", summary)
        self.assertIn("max rel-L2 4.00e-06", summary)  # Triton's error counts too

    def test_summary_without_triton_says_why(self):
        results = self.results()
        for r in results:
            r.triton = bench.Row(r.shape, bench.TRITON, "failed", note="skipped (--skip-triton)")
        self.assertIn("Triton/mlatune n/a (skipped (--skip-triton))", bench.random_summary(results))

    def test_csv_and_report_carry_triton(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "random.csv"
            bench.write_random_csv(self.results(), path)
            with path.open(newline="") as f:
                read = list(csv.DictReader(f))
        self.assertEqual(read[0]["triton_us"], "5")
        self.assertEqual(read[0]["ratio_triton_over_mlatune"], "0.5000")
        self.assertEqual(read[1]["triton_rel_l2"], "1.000e-07")
        self.assertIn("triton_tf32x3: BLOCK_M=16", read[0]["note"])
        report = bench.format_random_report(self.results(), "events", "test GPU")
        self.assertIn("| mlatune µs | Triton tf32x3 µs | SDPA µs | Triton / mlatune | SDPA / mlatune |", report)
        self.assertIn("| 1,2,3,8,16 | nearest X (why) | 10.0 | 5.0 | 40.0 | 0.50 | 4.00 |", report)
        self.assertIn("- 1,2,3,8,16: BLOCK_M=16", report)
        self.assertEqual([row["race_launches"] for row in read], ["0", "0"])
        self.assertEqual([row["first_call_phases"] for row in read], ["", ""])

    def test_phase_text_names_the_phases_that_took_time_and_the_rest(self):
        before = [0] * len(bench.Mlatune.FIRST_USE_PHASES)
        after = list(before)
        names = bench.Mlatune.FIRST_USE_PHASES
        after[names.index("choose")] = 300_000
        after[names.index("load")] = 1_500_000
        after[names.index("first_launch")] = 2_000_000
        after[names.index("workspace")] = 1_000_000  # inside first_launch: not subtracted twice
        after[names.index("lock_wait")] = 250_000
        self.assertEqual(bench.phase_text(before, after, 5.0),
                         "choose 0.300, load 1.500, first_launch 2.000, workspace 1.000, lock_wait 0.250, rest 0.950")
        self.assertEqual(bench.phase_text(after, after, 0.5), "rest 0.500")

    def test_phase_names_are_the_c_headers(self):
        header = (bench.REPO_ROOT / "cache" / "c_api.h").read_text()
        phases = sorted((int(i), name.lower()) for name, i in re.findall(r"MLATUNE_PHASE_(\w+) = (\d+)", header))
        self.assertEqual(tuple(name for _, name in phases if name != "count"), bench.Mlatune.FIRST_USE_PHASES)

    def test_summary_counts_races_and_those_another_config_won(self):
        results = self.results()
        results[0].race_launches, results[1].race_launches = 13, 10
        results[0].choice += ("; race settled among 4 configs (3 launches each): running fallback Z at 9.00 us "
                              "median, 1.20x faster than the selector's choice (the others, us: nearest 10.80)")
        summary = bench.random_summary(results)
        self.assertIn("races 2 (median 13 launches), 1 won by another config than the selector's choice", summary)
        self.assertNotIn("races", bench.random_summary(self.results()))


class FakeRacingMlatune:
    """Answers race_state as the dispatcher would: racing until `launches` calls have run."""

    def __init__(self, launches):
        self.needed, self.calls, self.synchronized = launches, 0, 0

    def race_state(self, shape):
        if self.needed is None:
            return 0
        return 1 if self.calls < self.needed else 2


class FakeStream:
    def __init__(self, owner):
        self.owner = owner

    def synchronize(self):
        self.owner.synchronized += 1


class SettleRaceTest(unittest.TestCase):
    def test_launches_each_waited_for_until_the_race_settles(self):
        fake = FakeRacingMlatune(13)
        launches = bench.settle_race(fake, SHAPES["S0"], lambda: setattr(fake, "calls", fake.calls + 1),
                                     FakeStream(fake))
        self.assertEqual((launches, fake.calls, fake.synchronized), (13, 13, 13))

    def test_no_race_no_launch_and_a_race_that_never_settles_is_cut(self):
        fake = FakeRacingMlatune(None)
        self.assertEqual(bench.settle_race(fake, SHAPES["S0"], lambda: None, FakeStream(fake)), 0)
        stuck = FakeRacingMlatune(10 ** 9)
        self.assertEqual(bench.settle_race(stuck, SHAPES["S0"], lambda: setattr(stuck, "calls", stuck.calls + 1),
                                           FakeStream(stuck)), bench.RACE_LAUNCH_LIMIT)


def run_main(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = bench.main(argv)
    return code, out.getvalue()


class OptionsTest(unittest.TestCase):
    def test_dry_run_prints_the_plan_of_the_target_shapes(self):
        code, text = run_main(["--dry-run", "--shapes", "S0;S1;S2;S3;S4;odd"])
        self.assertEqual(code, 0)
        self.assertIn("Triton peer search: full:", text)
        self.assertIn("S0 (T=32, D=16): 36 of 108 full-grid configs", text)
        self.assertIn("odd (T=333, D=64)", text)
        self.assertRegex(text, r"\n  \d+ distinct binaries to compile")

    def test_random_dry_run_uses_the_reduced_grid_unless_told(self):
        argv = ["--random-shapes", "3", "--seed", "2", "--dry-run", "--db", "/nonexistent/x.db"]
        _, text = run_main(argv)
        self.assertIn("Triton peer search: reduced:", text)
        _, text = run_main(argv + ["--triton-search", "full"])
        self.assertIn("Triton peer search: full:", text)

    def test_triton_options(self):
        args = bench.parse_arguments(["--triton-workers", "0", "--triton-tune-reps", "7", "--skip-triton"])
        self.assertEqual((args.triton_workers, args.triton_tune_reps, args.skip_triton), (0, 7, True))
        self.assertFalse(bench.parse_arguments([]).skip_triton)  # Triton is measured unless left out
        self.assertGreaterEqual(bench.parse_arguments([]).triton_workers, 1)
        with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit):
            bench.parse_arguments(["--triton-workers", "-1"])
        with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit):
            bench.parse_arguments(["--triton-search", "huge"])


class FakeTensor:
    """Just enough of a tensor for autotune_triton: an output whose 'error' the kernel sets."""

    def __init__(self, shape=(1, 1, 1, 1)):
        self.shape = shape
        self.error = math.nan

    def new_empty(self, shape):
        return FakeTensor(shape)

    def fill_(self, value):
        self.error = value


class AutotuneTest(unittest.TestCase):
    def test_fastest_accurate_config_wins(self):
        shape = bench.Shape("t", 1, 256, 1, 32, 16)
        plan = tp.plan_shape(shape.T, shape.D, tp.FULL_SEARCH)
        rejected, inaccurate, fastest, slow = plan.candidates[:4]
        launched = []

        def launch(q, k, v, out, config):
            launched.append(config)
            if config == rejected:
                raise RuntimeError("out of resource: shared memory, Required: 300000")
            out.error = 1e-3 if config == inaccurate else 1e-7

        speed = {fastest: 3.0, slow: 9.0}
        peer = bench.TritonPeer(tp.FULL_SEARCH, module=mock.Mock(launch=launch), tune_reps=5, isolate=False)
        timer = bench.Timer(stream=None, flush=None, busy_cycles=1, reps=50, budget_s=30.0)
        timed_reps = []

        def time_calls(self, fn):
            timed_reps.append(self.reps)
            fn()
            return [speed.get(launched[-1], 50.0)] * self.reps

        with mock.patch.object(bench.Timer, "time", time_calls), \
                mock.patch.object(bench, "relative_l2", lambda out, reference: out.error), \
                mock.patch.object(bench, "_context_alive", lambda torch: True), \
                mock.patch.dict(sys.modules, {"torch": mock.Mock()}):
            record = bench.autotune_triton(peer, shape, FakeTensor(), None, None, None, timer)
        self.assertEqual(record.best, fastest)
        self.assertEqual(set(record.rejected), {rejected})
        self.assertIn("out of resource", record.rejected[rejected])
        self.assertEqual(record.inaccurate, {inaccurate: 1e-3})
        self.assertEqual(len(record.times_us), len(plan.candidates) - 2)
        self.assertEqual(set(timed_reps), {5})  # --triton-tune-reps, not the benchmark's reps

    def test_a_fault_stops_the_process_and_names_the_config(self):
        shape = bench.Shape("t", 1, 256, 1, 32, 16)
        plan = tp.plan_shape(shape.T, shape.D, tp.FULL_SEARCH)
        fine, faulting = plan.candidates[:2]
        state = {"alive": True}

        def launch(q, k, v, out, config):
            if config == faulting or not state["alive"]:
                state["alive"] = False
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
            out.error = 1e-7

        reports = []
        peer = bench.TritonPeer(tp.FULL_SEARCH, module=mock.Mock(launch=launch), tune_reps=5, isolate=False)
        timer = bench.Timer(stream=None, flush=None, busy_cycles=1, reps=5, budget_s=30.0)
        with mock.patch.object(bench.Timer, "time", lambda self, fn: [4.0] * self.reps), \
                mock.patch.object(bench, "relative_l2", lambda out, reference: out.error):
            bench.tune_configs(peer, plan.candidates, FakeTensor(), None, None, None, timer,
                               lambda *m: reports.append(m), lambda: state["alive"])
        self.assertEqual(reports, [("start", fine, None), ("timed", fine, 4.0), ("start", faulting, None),
                                   ("faulted", faulting, "RuntimeError: CUDA error: an illegal memory access was "
                                                         "encountered")])

    def test_unavailable_triton_is_a_row_with_its_reason(self):
        peer = bench.TritonPeer(tp.FULL_SEARCH, unavailable="Triton unavailable: ModuleNotFoundError: x")
        row = bench.triton_row(peer, SHAPES["S1"], None, None, None, 5, {})
        self.assertFalse(row.ok)
        self.assertEqual((row.implementation, row.note), (bench.TRITON, "Triton unavailable: ModuleNotFoundError: x"))
        self.assertIn("| triton_tf32x3 | n/a |", bench.format_table([row]))


class NoHeavyImportsTest(unittest.TestCase):
    def test_nothing_imported_torch_or_triton(self):
        for name in ("torch", "triton", "numpy", "matplotlib", "triton_flash_attention"):
            self.assertNotIn(name, sys.modules)


if __name__ == "__main__":
    unittest.main()
