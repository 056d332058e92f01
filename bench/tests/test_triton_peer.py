#!/usr/bin/env python3
"""bench/triton_peer.py: the Triton peer's grid, pruning, shared binaries and autotuning
record.  Pure Python: no Triton, torch or GPU."""

import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import triton_peer as tp  # noqa: E402
from triton_peer import TritonConfig  # noqa: E402


class SearchSpaceTest(unittest.TestCase):
    def test_full_grid_is_issue_15s(self):
        configs = tp.FULL_SEARCH.configs()
        self.assertEqual(len(configs), 4 * 3 * 3 * 3)
        self.assertEqual({c.block_m for c in configs}, {16, 32, 64, 128})
        self.assertEqual({c.block_n for c in configs}, {16, 32, 64})
        self.assertEqual({c.num_warps for c in configs}, {2, 4, 8})
        self.assertEqual({c.num_stages for c in configs}, {1, 2, 3})
        self.assertEqual(len(set(configs)), len(configs))

    def test_reduced_grid_is_a_subset(self):
        self.assertLess(set(tp.REDUCED_SEARCH.configs()), set(tp.FULL_SEARCH.configs()))

    def test_default_search_depends_on_the_mode(self):
        self.assertIs(tp.search_for(None, random_shapes=False), tp.FULL_SEARCH)
        self.assertIs(tp.search_for(None, random_shapes=True), tp.REDUCED_SEARCH)
        self.assertIs(tp.search_for("full", random_shapes=True), tp.FULL_SEARCH)

    def test_describe_lists_every_value(self):
        text = tp.FULL_SEARCH.describe()
        self.assertIn("BLOCK_M {16, 32, 64, 128}", text)
        self.assertIn("num_stages {1, 2, 3}", text)
        self.assertTrue(text.endswith("= 108 configs"), text)


class PruningTest(unittest.TestCase):
    def test_nothing_pruned_at_a_mid_shape(self):
        plan = tp.plan_shape(256, 32, tp.FULL_SEARCH)  # S1
        self.assertEqual(len(plan.candidates), 108)
        self.assertEqual(plan.pruned, [])

    def test_tiles_beyond_the_smallest_covering_one_are_pruned(self):
        plan = tp.plan_shape(32, 16, tp.FULL_SEARCH)  # S0
        self.assertEqual(len(plan.candidates), 2 * 2 * 9)
        self.assertTrue(all(c.block_m <= 32 and c.block_n <= 32 for c in plan.candidates))
        self.assertEqual(plan.pruned_counts(), {"tile over T": 72})
        # T = 33 needs the 64-row tile: it stays, 128 goes.
        plan = tp.plan_shape(33, 16, tp.FULL_SEARCH)
        self.assertEqual({c.block_m for c in plan.candidates}, {16, 32, 64})
        self.assertEqual({c.block_n for c in plan.candidates}, {16, 32, 64})

    def test_short_sequences_keep_the_smallest_tiles_of_the_space(self):
        # The reduced grid has no 16-key tile: T = 7 keeps BLOCK_N = 32, never nothing.
        plan = tp.plan_shape(7, 242, tp.REDUCED_SEARCH)
        self.assertEqual({(c.block_m, c.block_n) for c in plan.candidates}, {(16, 32)})
        self.assertEqual(len(plan.candidates), 4)

    def test_shared_memory_prunes_only_what_cannot_fit(self):
        config = TritonConfig(16, 64, 4, 3)
        # K and V: 2 tiles x 64 keys x 256 floats x 4 bytes, 2 stages in flight.
        self.assertEqual(tp.shared_memory_lower_bound(config, 256), 262_144)
        reason = tp.prune_reason(config, 4096, 256, tp.FULL_SEARCH, tp.H200_SHARED_MEMORY_PER_BLOCK)
        self.assertEqual(reason.reason, "shared memory")
        self.assertIn("262144 B > 232448 B", reason.detail)
        # One stage keeps one copy, like two stages.
        self.assertEqual(tp.shared_memory_lower_bound(TritonConfig(16, 64, 4, 1), 256),
                         tp.shared_memory_lower_bound(TritonConfig(16, 64, 4, 2), 256))
        self.assertIsNone(tp.prune_reason(TritonConfig(16, 64, 4, 2), 4096, 256, tp.FULL_SEARCH,
                                          tp.H200_SHARED_MEMORY_PER_BLOCK))
        # A device with more shared memory keeps it.
        self.assertIsNone(tp.prune_reason(config, 4096, 256, tp.FULL_SEARCH, 300_000))

    def test_registers_prune_an_accumulator_that_cannot_stay_in_registers(self):
        # 128 x 64 accumulator + 128 x 64 scores over 64 threads: 256 > 255.
        self.assertEqual(tp.registers_lower_bound(TritonConfig(128, 64, 2, 1), 64), 256)
        reason = tp.prune_reason(TritonConfig(128, 64, 2, 1), 1024, 64, tp.FULL_SEARCH,
                                 tp.H200_SHARED_MEMORY_PER_BLOCK)
        self.assertEqual(reason.reason, "registers")
        self.assertIsNone(tp.prune_reason(TritonConfig(128, 64, 4, 1), 1024, 64, tp.FULL_SEARCH,
                                          tp.H200_SHARED_MEMORY_PER_BLOCK))

    def test_every_plan_keeps_a_config(self):
        for space in (tp.FULL_SEARCH, tp.REDUCED_SEARCH):
            for seq_len in (1, 2, 15, 16, 17, 100, 4096):
                for head_dim in (8, 16, 100, 128, 129, 256):
                    with self.subTest(space=space.name, T=seq_len, D=head_dim):
                        self.assertTrue(tp.plan_shape(seq_len, head_dim, space).candidates)

    def test_plan_description(self):
        plan = tp.plan_shape(4096, 128, tp.FULL_SEARCH)  # S4
        text = plan.describe()
        self.assertTrue(text.startswith(f"{len(plan.candidates)} of 108 full-grid configs (D padded to 128"), text)
        self.assertEqual(len(plan.candidates) + len(plan.pruned), 108)


class CompileJobsTest(unittest.TestCase):
    def test_shapes_with_the_same_head_size_share_binaries(self):
        s2, s3, odd = (tp.plan_shape(t, 64, tp.FULL_SEARCH) for t in (1024, 2048, 333))
        self.assertEqual(set(tp.compile_jobs([s2, s3, odd])), set(tp.compile_jobs([s2])))
        s4 = tp.plan_shape(4096, 128, tp.FULL_SEARCH)
        self.assertEqual(len(tp.compile_jobs([s2, s4])), len(s2.candidates) + len(s4.candidates))

    def test_costliest_first(self):
        jobs = tp.compile_jobs([tp.plan_shape(256, 32, tp.FULL_SEARCH)])
        costs = [job.estimated_cost() for job in jobs]
        self.assertEqual(costs, sorted(costs, reverse=True))
        self.assertEqual(jobs[0].config.block_m, 128)

    def test_format_plan_counts_distinct_binaries(self):
        text = tp.format_plan([("S2", 1024, 64), ("S3", 2048, 64), ("S0", 32, 16)], tp.FULL_SEARCH)
        self.assertIn("S0 (T=32, D=16): 36 of 108", text)
        self.assertTrue(text.splitlines()[-1].startswith(f"  {105 + 36} distinct binaries"), text)


class TuneRecordTest(unittest.TestCase):
    def test_best_is_the_fastest_timed_config(self):
        plan = tp.plan_shape(256, 32, tp.FULL_SEARCH)
        a, b, c, d, e = plan.candidates[:5]
        record = tp.TuneRecord(plan, times_us={a: 30.0, b: 20.0}, rejected={c: "OutOfResources: shared memory"},
                               inaccurate={d: 2e-3}, faulted={e: "RuntimeError: CUDA error: an illegal memory access"},
                               tuning_s=1.75)
        self.assertEqual(record.best, b)
        summary = record.summary()
        self.assertIn("2 timed", summary)
        self.assertIn("1 rejected by Triton (OutOfResources: shared memory)", summary)
        self.assertIn("1 over the rel-L2 bound", summary)
        self.assertIn(f"1 faulted ({e.text()}: RuntimeError: CUDA error: an illegal memory access)", summary)
        self.assertIn("; 1.8 s;", summary)
        self.assertIn(f"best {b.text()} (20.0 µs, kernel alone)", summary)

    def test_nothing_timed(self):
        record = tp.TuneRecord(tp.plan_shape(1, 16, tp.FULL_SEARCH))
        self.assertIsNone(record.best)
        self.assertIn("no config ran", record.summary())

    def test_first_line_of_an_error(self):
        self.assertEqual(tp.first_line(RuntimeError("out of resource: shared memory\nRequired: 1")),
                         "RuntimeError: out of resource: shared memory")
        self.assertEqual(tp.first_line(ValueError()), "ValueError")


if __name__ == "__main__":
    unittest.main()
