#!/usr/bin/env python3
"""bench/triton_flash_attention.py's kernel body run by the pure-Python stand-in of Triton
(triton_emulator.py) against a float64 causal attention: odd T, padded and unpadded D,
query tiles smaller and larger than key tiles, one row (decode).  No Triton, torch or GPU."""

import math
import random
import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import triton_emulator  # noqa: E402
from triton_peer import TritonConfig, padded_head_dim  # noqa: E402


def causal_attention(q, k, v, shape):
    """float64 reference on flat [B, T, H, D] lists."""
    B, T, H, D = shape

    def at(x, b, t, h):
        start = ((b * T + t) * H + h) * D
        return x[start:start + D]

    out = [math.nan] * len(q)
    for b, h, t in ((b, h, t) for b in range(B) for h in range(H) for t in range(T)):
        logits = [sum(x * y for x, y in zip(at(q, b, t, h), at(k, b, s, h))) / math.sqrt(D) for s in range(t + 1)]
        top = max(logits)
        weights = [math.exp(x - top) for x in logits]
        total = sum(weights)
        start = ((b * T + t) * H + h) * D
        for d in range(D):
            out[start + d] = sum(w * at(v, b, s, h)[d] for s, w in enumerate(weights)) / total
    return out


class EmulatedKernelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.module = triton_emulator.load_kernel_module()

    def run_case(self, shape, config):
        rng = random.Random(hash((shape, config)) & 0xFFFF)
        count = math.prod(shape)
        q, k, v = ([rng.gauss(0.0, 1.0) for _ in range(count)] for _ in range(3))
        tensors = [triton_emulator.FakeTensor(shape, values) for values in (q, k, v, [math.nan] * count)]
        self.module.launch(*tensors, config)
        got = tensors[3].buffer.values
        want = causal_attention(q, k, v, shape)
        worst = max(abs(a - b) for a, b in zip(got, want))  # NaN (an unwritten output) fails too
        self.assertLess(worst, 1e-12, f"{shape} {config.text()}: max |error| {worst}")

    def test_odd_length_and_padded_head_size(self):
        # T = 37: a partial last block; D = 20 padded to 32: masked along D.
        for block_m, block_n in ((16, 16), (16, 32), (32, 16), (64, 64)):
            with self.subTest(block_m=block_m, block_n=block_n):
                self.run_case((2, 37, 2, 20), TritonConfig(block_m, block_n, 4, 2))

    def test_unpadded_head_size_and_several_heads(self):
        self.run_case((1, 33, 3, 16), TritonConfig(16, 16, 2, 1))

    def test_single_row(self):
        # Decode: one query, one key, in a 16-row tile.
        self.run_case((3, 1, 2, 24), TritonConfig(16, 16, 4, 3))

    def test_every_tile_is_a_power_of_two_for_any_head_size(self):
        for head_dim in (1, 8, 16, 17, 64, 100, 128, 256):
            d_pad = padded_head_dim(head_dim)
            self.assertGreaterEqual(d_pad, max(16, head_dim))
            self.assertEqual(d_pad & (d_pad - 1), 0)
            self.assertLess(d_pad, 2 * max(16, head_dim))

    def test_launch_rejects_a_mismatched_tensor(self):
        q = triton_emulator.FakeTensor((1, 4, 1, 16), [0.0] * 64)
        k = triton_emulator.FakeTensor((1, 4, 2, 8), [0.0] * 64)
        with self.assertRaisesRegex(ValueError, "k has shape"):
            self.module.launch(q, k, q, q, TritonConfig(16, 16, 4, 1))

    def test_precompile_does_not_specialize_on_t_and_h(self):
        # The compiler pool's binaries serve every T and H with the same D.
        kernel = self.module.causal_attention_kernel
        self.assertEqual(set(kernel.do_not_specialize), {"T", "H"})


if __name__ == "__main__":
    unittest.main()
