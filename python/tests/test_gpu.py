"""The mlatune package on a GPU with PyTorch (python/README.md gives the
command): fused MLA attention against a float64 reference at several shapes,
including odd ones, with out=, under torch.compile(fullgraph=True), inside a
CUDA graph, and on a non-default stream; the dispatcher's choice with its
reason, before and after tuning; a second family (RMSNorm) through the
generic launch.  Every test skips without CUDA PyTorch.

The database is a fresh empty file (untuned shapes get the default or the
nearest valid config, compiled once), except where a test tunes one."""

import math
import os
import subprocess
import sys
import tempfile
import unittest

# The package of this tree, unless MLATUNE_TEST_INSTALLED is set: then the
# one pip installed (a fresh clone's check, python/README.md).
if not os.environ.get("MLATUNE_TEST_INSTALLED"):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

try:
    import torch
    HAVE_CUDA = torch.cuda.is_available()
    WHY = "no CUDA GPU visible to PyTorch"
except ImportError as e:
    torch, HAVE_CUDA, WHY = None, False, f"PyTorch is not installed ({e})"

import mlatune  # noqa: E402
from mlatune import _library  # noqa: E402
print(f"# testing the mlatune package at {os.path.dirname(mlatune.__file__)}", file=sys.stderr)

MLA_TOLERANCE = 1e-5    # search_spaces/fused_mla_attention.yaml: tolerance.relative_l2
RMS_TOLERANCE = 1e-6    # search_spaces/rms_norm.yaml
RMS_EPS = 1e-6          # the eps argument of search_spaces/rms_norm.yaml
# (B, T, H, D, R): a tiny one, a decode step, R not a multiple of 4, D not a
# power of two, T not a multiple of any tile.
SHAPES = [(2, 32, 4, 16, 24), (1, 1, 8, 24, 22), (3, 100, 4, 48, 50), (2, 333, 8, 32, 64), (1, 7, 2, 20, 36)]

_tmp = None


def setUpModule():
    global _tmp
    if not HAVE_CUDA:
        raise unittest.SkipTest(WHY)
    torch.backends.cuda.matmul.allow_tf32 = False
    _tmp = tempfile.TemporaryDirectory()
    mlatune.set_default_dispatcher(mlatune.Dispatcher(db=empty_database("default.db")))


def tearDownModule():
    if _tmp is not None:
        mlatune.set_default_dispatcher(None)
        _tmp.cleanup()


def empty_database(name: str) -> str:
    path = os.path.join(_tmp.name, name)
    open(path, "w").close()
    return path


def mla_inputs(shape, seed=0):
    B, T, H, D, R = shape
    g = torch.Generator(device="cuda").manual_seed(seed)
    draw = lambda *size: torch.randn(*size, generator=g, device="cuda", dtype=torch.float32)  # noqa: E731
    return draw(B, T, H, D), draw(B, T, R), draw(R, H, D), draw(R, H, D)


def mla_reference(q, kv_latent, w_up_k, w_up_v):
    """Causal MLA attention in float64 (the definition of docs/DESIGN)."""
    q, kv, wk, wv = (t.double() for t in (q, kv_latent, w_up_k, w_up_v))
    T, D = q.shape[1], q.shape[3]
    k = torch.einsum("btr,rhd->bthd", kv, wk)
    v = torch.einsum("btr,rhd->bthd", kv, wv)
    scores = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(D)
    future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=q.device), diagonal=1)
    p = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    return torch.einsum("bhts,bshd->bthd", p, v)


def relative_l2(out, reference) -> float:
    return ((out.double() - reference).norm() / reference.norm()).item()


@unittest.skipUnless(HAVE_CUDA, WHY)
class FusedMlaTest(unittest.TestCase):
    def assertMatches(self, out, reference, what):
        self.assertFalse(torch.isnan(out).any().item(), f"{what}: NaN in the output")
        error = relative_l2(out, reference)
        self.assertLessEqual(error, MLA_TOLERANCE, f"{what}: relative L2 error {error:.3g}")
        return error

    def test_matches_float64_at_several_shapes(self):
        for shape in SHAPES:
            with self.subTest(shape=shape):
                inputs = mla_inputs(shape)
                before = [t.clone() for t in inputs]
                out = mlatune.fused_mla_attention(*inputs)
                torch.cuda.synchronize()
                self.assertEqual(out.shape, inputs[0].shape)
                error = self.assertMatches(out, mla_reference(*inputs), f"shape {shape}")
                for t, b in zip(inputs, before):
                    self.assertTrue(torch.equal(t, b), "an input changed")
                choice = mlatune.default_dispatcher().choice(shape)
                print(f"  B,T,H,D,R={shape}: rel-L2 {error:.2e}; {choice.reason} {choice.config}", flush=True)

    def test_out_argument(self):
        inputs = mla_inputs(SHAPES[3], seed=1)
        out = torch.full_like(inputs[0], float("nan"))
        self.assertIs(mlatune.fused_mla_attention(*inputs, out=out), out)
        torch.cuda.synchronize()
        self.assertMatches(out, mla_reference(*inputs), "out=")

    def test_argument_errors(self):
        q, kv, wk, wv = mla_inputs(SHAPES[0])
        cases = [((q.cpu(), kv, wk, wv), {}, ValueError, "q must be on a CUDA device"),
                 ((q.double(), kv, wk, wv), {}, TypeError, "q must be float32, got float64"),
                 ((q.transpose(1, 2), kv, wk, wv), {}, ValueError, "q must be contiguous"),
                 ((q, kv[:, :-1].contiguous(), wk, wv), {}, ValueError, "kv_latent .* must be \\[B,T,R\\]"),
                 ((q, kv, wk, wv), {"out": q}, ValueError, "out overlaps q"),
                 ((q, kv, wk, wv), {"out": q[:1].clone()}, ValueError, "out .* must have the shape of q")]
        for arguments, keywords, kind, message in cases:
            with self.subTest(message=message), self.assertRaisesRegex(kind, message):
                mlatune.fused_mla_attention(*arguments, **keywords)

    def test_runs_on_the_current_stream(self):
        # On a side stream (PyTorch creates it non-blocking: it does not wait
        # for the legacy default stream, nor that stream for it): the GPU
        # spins, then the real q is copied over NaNs, then the op runs.  Only
        # a launch ordered on that stream reads the real q.
        inputs = mla_inputs(SHAPES[2], seed=2)
        reference = mla_reference(*inputs)
        late_q = torch.full_like(inputs[0], float("nan"))
        mlatune.fused_mla_attention(*inputs)  # the binary for this shape is loaded before the timing matters
        torch.cuda.synchronize()
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            torch.cuda._sleep(500_000_000)  # about 0.25 s of GPU time on the side stream
            late_q.copy_(inputs[0])
            out = mlatune.fused_mla_attention(late_q, *inputs[1:])
            done = torch.cuda.Event()
            done.record(side)
        self.assertFalse(done.query(), "the op waited for the GPU (or ran on no stream at all)")
        done.synchronize()
        self.assertMatches(out, reference, "side stream")

    def test_torch_compile_fullgraph(self):
        import torch._dynamo

        def model(q, kv, wk, wv):
            return mlatune.fused_mla_attention(q * 2.0, kv, wk, wv) * 0.5

        def model_out(q, kv, wk, wv, out):
            mlatune.fused_mla_attention(q, kv, wk, wv, out=out)
            return out + 1.0

        torch._dynamo.reset()
        for shape in (SHAPES[0], SHAPES[3]):
            inputs = mla_inputs(shape, seed=3)
            if hasattr(torch._dynamo, "explain"):  # fullgraph=True below fails on a break anyway
                explanation = torch._dynamo.explain(model)(*inputs)
                self.assertEqual(explanation.graph_break_count, 0, str(explanation))
                self.assertEqual(explanation.graph_count, 1, str(explanation))
            q2 = inputs[0] * 2.0
            reference = mla_reference(q2, *inputs[1:]) * 0.5
            out = torch.compile(model, fullgraph=True)(*inputs)
            torch.cuda.synchronize()
            self.assertMatches(out, reference, f"torch.compile at {shape}")
            into = torch.empty_like(inputs[0])
            result = torch.compile(model_out, fullgraph=True)(*inputs, into)
            torch.cuda.synchronize()
            self.assertMatches(into, mla_reference(*inputs), f"torch.compile with out= at {shape}")
            self.assertMatches(result - 1.0, mla_reference(*inputs), f"torch.compile result at {shape}")
        print("  torch.compile(fullgraph=True): 0 graph breaks, 1 graph", flush=True)

    def test_cuda_graph_capture_and_replay(self):
        shape = SHAPES[3]
        static = list(mla_inputs(shape, seed=4))
        # Warm up on a side stream (PyTorch's recipe): the dispatcher loads the
        # binary for this shape before the capture.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                mlatune.fused_mla_attention(*static)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = mlatune.fused_mla_attention(*static)
        # New inputs in the captured buffers: only a replayed launch sees them.
        for target, fresh in zip(static, mla_inputs(shape, seed=5)):
            target.copy_(fresh)
        static_out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        self.assertMatches(static_out, mla_reference(*static), "CUDA graph replay")


@unittest.skipUnless(HAVE_CUDA, WHY)
class DispatcherTest(unittest.TestCase):
    def test_choice_on_an_empty_database(self):
        with mlatune.Dispatcher(db=empty_database("choice.db")) as d:
            self.assertEqual(d.kernel_name, "fused_mla_attention")
            self.assertEqual(d.shape_variables, ("B", "T", "H", "D", "R"))
            self.assertEqual([b.name for b in d.buffers], ["q", "kv_latent", "w_up_k", "w_up_v", "out"])
            choice = d.choice({"B": 2, "T": 333, "H": 8, "D": 32, "R": 64})
            # Nothing is tuned: the space's first fallback valid at the shape.
            self.assertEqual(choice.reason, "fallback", choice.text)
            self.assertTrue(choice.config and choice.explanation, choice.text)
            print(f"  empty database: {choice.text}", flush=True)

    def test_choice_after_tuning_is_a_hit(self):
        # $MLATUNE_PROGRAM, else the build's (where the build folder was
        # moved to this machine, _paths.py names the old place).
        paths = _library.recorded_paths()
        program = os.environ.get("MLATUNE_PROGRAM") or (getattr(paths, "PROGRAM", None) if paths else None)
        if not program or not os.path.exists(program):
            self.skipTest("no mlatune program: set MLATUNE_PROGRAM=build/mlatune")
        database = os.path.join(_tmp.name, "tuned.db")
        shape = (1, 64, 2, 16, 24)
        tune = subprocess.run([program, "tune", mlatune.dispatcher.resolve_space(None), "--shape",
                               "B=1,T=64,H=2,D=16,R=24", "--max-evals", "6", "--db", database, "-q"],
                              capture_output=True, text=True, timeout=600)
        self.assertEqual(tune.returncode, 0, tune.stdout + tune.stderr)
        with mlatune.Dispatcher(db=database) as d:
            choice = d.choice(shape)
            self.assertEqual(choice.reason, "hit", choice.text)
            print(f"  after mlatune tune: {choice.text}", flush=True)
            mlatune.set_default_dispatcher(d)
            try:
                inputs = mla_inputs(shape, seed=6)
                out = mlatune.fused_mla_attention(*inputs)
                torch.cuda.synchronize()
            finally:
                mlatune.set_default_dispatcher(mlatune.Dispatcher(db=empty_database("default2.db")))
            error = relative_l2(out, mla_reference(*inputs))
            self.assertLessEqual(error, MLA_TOLERANCE)

    def test_generic_launch_of_another_family(self):
        with mlatune.Dispatcher(db=empty_database("rms.db"), space="rms_norm") as d:
            self.assertEqual(d.shape_variables, ("ROWS", "COLS"))
            rows, cols = 5, 4095
            g = torch.Generator(device="cuda").manual_seed(7)
            x = torch.randn(rows, cols, generator=g, device="cuda")
            w = torch.randn(cols, generator=g, device="cuda")
            out = torch.full_like(x, float("nan"))
            d.launch({"ROWS": rows, "COLS": cols}, [x, w, out])
            torch.cuda.synchronize()
            x64, w64 = x.double(), w.double()
            reference = x64 * (x64.pow(2).mean(-1, keepdim=True) + RMS_EPS).rsqrt() * w64
            error = relative_l2(out, reference)
            self.assertLessEqual(error, RMS_TOLERANCE)
            print(f"  rms_norm through Dispatcher.launch: rel-L2 {error:.2e}; {d.choice((rows, cols)).text}",
                  flush=True)
            with self.assertRaisesRegex(mlatune.MlatuneInputError, "buffer out"):
                d.launch((rows, cols), [x, w, out[:-1]])


if __name__ == "__main__":
    unittest.main(verbosity=2)
