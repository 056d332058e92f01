"""The mlatune package without torch and without a GPU (run by ctest as
python_package_test): library discovery and its errors, the argument checks,
the parsing of the dispatcher's choice, and the no-GPU failure of a real
dispatcher.  MLATUNE_TEST_LIBRARY is the built libmlatune_c.so and
MLATUNE_TEST_SOURCE_DIR the repository (ctest sets both)."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR = os.environ.get("MLATUNE_TEST_SOURCE_DIR",
                            os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PACKAGE_ROOT = os.path.join(SOURCE_DIR, "python")
sys.path.insert(0, PACKAGE_ROOT)

import mlatune  # noqa: E402
from mlatune import _checks, _errors, _library, dispatcher  # noqa: E402

BUILT_LIBRARY = os.environ.get("MLATUNE_TEST_LIBRARY", "")

# A program run in a fresh interpreter: torch cannot be imported there, so
# that what it checks holds on a machine without torch.
WITHOUT_TORCH = """
import sys
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked by this test")
sys.meta_path.insert(0, NoTorch())
"""


def run_python(program: str, env_changes: dict, path: str = PACKAGE_ROOT) -> subprocess.CompletedProcess:
    """Runs `program` in a fresh python3 with `path` first on sys.path."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLATUNE_LIBRARY", "MLATUNE_DB", "PYTHONPATH")}
    env["PYTHONPATH"] = path
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run([sys.executable, "-c", WITHOUT_TORCH + program], env=env, capture_output=True,
                          text=True, timeout=120)


class FakeDevice:
    def __init__(self, kind="cuda", index=0):
        self.type, self.index = kind, index

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"


class Tensor:
    """Enough of a torch.Tensor for the checks (is_tensor recognises it by its
    module and name, as it does torch's own class)."""
    __module__ = "torch.stub"

    def __init__(self, shape, dtype="float32", device=None, contiguous=True, address=1 << 20, itemsize=4):
        self.shape = tuple(shape)
        self.dtype = f"torch.{dtype}"
        self.device = device or FakeDevice()
        self._contiguous, self._address, self._itemsize = contiguous, address, itemsize

    def dim(self):
        return len(self.shape)

    def is_contiguous(self):
        return self._contiguous

    def stride(self):
        return tuple(reversed(self.shape))

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def element_size(self):
        return self._itemsize

    def data_ptr(self):
        return self._address


def mla_tensors(B=2, T=5, H=3, D=8, R=6):
    """q, kv_latent, w_up_k, w_up_v, out at separate addresses."""
    shapes = [(B, T, H, D), (B, T, R), (R, H, D), (R, H, D), (B, T, H, D)]
    return [Tensor(s, address=(i + 1) << 30) for i, s in enumerate(shapes)]


class ImportTest(unittest.TestCase):
    def test_import_needs_no_torch(self):
        result = run_python("import mlatune, sys\nprint(sorted(mlatune.__all__))\n"
                            "assert 'torch' not in sys.modules\nprint('ok')", {})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("Dispatcher", result.stdout)

    def test_torch_op_without_torch_is_an_import_error(self):
        result = run_python("import mlatune\ntry:\n    mlatune.fused_mla_attention\n"
                            "except ImportError as e:\n    print('ImportError', e)\n", {})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("ImportError torch is blocked", result.stdout)


@unittest.skipUnless(BUILT_LIBRARY, "MLATUNE_TEST_LIBRARY (the built libmlatune_c.so) is not set")
class DiscoveryTest(unittest.TestCase):
    PRINT_PATH = "import mlatune\nprint(mlatune.library_path())"
    PRINT_ERROR = ("import mlatune\ntry:\n    mlatune.library_path()\n"
                   "except mlatune.LibraryNotFoundError as e:\n    print(type(e).__name__)\n    print(e)\n")

    def test_recorded_build_library_is_found(self):
        self.assertIsNotNone(_library.recorded_paths(), "CMake did not write python/mlatune/_paths.py")
        result = run_python(self.PRINT_PATH, {})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.strip(), BUILT_LIBRARY)

    def test_environment_variable_wins(self):
        with tempfile.TemporaryDirectory() as tmp:
            copy = os.path.join(tmp, "libmlatune_c.so")
            shutil.copy(BUILT_LIBRARY, copy)
            result = run_python(self.PRINT_PATH, {"MLATUNE_LIBRARY": copy, "LD_LIBRARY_PATH":
                                                  os.path.join(os.path.dirname(BUILT_LIBRARY), "lib")})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.strip(), copy)

    def test_a_wrong_environment_variable_is_not_skipped(self):
        result = run_python(self.PRINT_ERROR, {"MLATUNE_LIBRARY": "/nonexistent/libmlatune_c.so"})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("LibraryNotFoundError", result.stdout)
        self.assertIn("$MLATUNE_LIBRARY (/nonexistent/libmlatune_c.so): no such file", result.stdout)
        self.assertNotIn("recorded by", result.stdout)  # no silent fall-through to the build

    def test_a_file_that_is_no_library(self):
        with tempfile.NamedTemporaryFile("w", suffix=".so") as text:
            text.write("not a shared object\n")
            text.flush()
            result = run_python(self.PRINT_ERROR, {"MLATUNE_LIBRARY": text.name})
        self.assertIn("LibraryNotFoundError", result.stdout)
        self.assertRegex(result.stdout, re.escape(text.name) + r"\): .*(invalid ELF|too short)")

    def test_without_a_record_every_place_tried_is_listed(self):
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copytree(os.path.join(PACKAGE_ROOT, "mlatune"), os.path.join(tmp, "mlatune"),
                            ignore=shutil.ignore_patterns("_paths.py", "__pycache__"))
            result = run_python(self.PRINT_ERROR, {"LD_LIBRARY_PATH": None}, path=tmp)
            self.assertIn("LibraryNotFoundError", result.stdout)
            self.assertIn("system loader (libmlatune_c.so)", result.stdout)
            self.assertIn("MLATUNE_LIBRARY", result.stdout)  # the way out is named
            # The system loader is the last resort, and works.
            found = run_python(self.PRINT_PATH, {"LD_LIBRARY_PATH": os.path.dirname(BUILT_LIBRARY)}, path=tmp)
        self.assertEqual(found.returncode, 0, found.stderr)
        self.assertEqual(found.stdout.strip(), "libmlatune_c.so")

    def test_every_exported_function_is_declared(self):
        with open(os.path.join(SOURCE_DIR, "cmake", "mlatune_c.version")) as f:
            exported = set(re.findall(r"^\s*(mlatune_\w+);", f.read(), re.M))
        self.assertEqual(set(_library.prototypes()), exported)
        self.assertEqual(mlatune.library_path(), BUILT_LIBRARY)  # declare() found every one

    def test_first_use_phases_are_the_c_headers(self):
        with open(os.path.join(SOURCE_DIR, "cache", "c_api.h")) as f:
            phases = sorted((int(i), name.lower()) for name, i in re.findall(r"MLATUNE_PHASE_(\w+) = (\d+)", f.read()))
        self.assertEqual(tuple(name for _, name in phases if name != "count"), dispatcher.Dispatcher.FIRST_USE_PHASES)

    def test_open_without_a_gpu_is_an_environment_error(self):
        with tempfile.TemporaryDirectory() as tmp:
            database = os.path.join(tmp, "empty.db")
            open(database, "w").close()
            try:
                d = mlatune.Dispatcher(db=database, space="rms_norm")
            except mlatune.MlatuneEnvironmentError as e:
                self.assertEqual(e.function, "mlatune_open")
                self.assertEqual(e.status, _errors.ENVIRONMENT)
                self.assertTrue(e.message.startswith("no GPU: "), e.message)
                self.assertTrue(str(e).startswith("mlatune_open: no GPU: "), str(e))
                return
            d.close()
            self.skipTest("a GPU is present; this checks the failure without one")

    def test_database_from_the_environment(self):
        result = run_python("import mlatune\ntry:\n    mlatune.Dispatcher()\n"
                            "except mlatune.MlatuneError as e:\n    print(type(e).__name__, e)\n",
                            {"MLATUNE_DB": "/nonexistent/x.db"})
        self.assertEqual(result.returncode, 0, result.stderr)
        # Without a GPU the probe fails first; with one, the missing database.
        self.assertRegex(result.stdout, r"MlatuneEnvironmentError mlatune_open: no GPU: |"
                                        r"MlatuneInputError mlatune_open: .*/nonexistent/x\.db")


class ResolveTest(unittest.TestCase):
    def test_database(self):
        saved = os.environ.pop("MLATUNE_DB", None)
        try:
            self.assertEqual(dispatcher.resolve_database("a.db"), "a.db")
            self.assertEqual(dispatcher.resolve_database(None), "mlatune.db")
            os.environ["MLATUNE_DB"] = "/tmp/env.db"
            self.assertEqual(dispatcher.resolve_database(None), "/tmp/env.db")
            self.assertEqual(dispatcher.resolve_database("given.db"), "given.db")
        finally:
            os.environ.pop("MLATUNE_DB", None)
            if saved is not None:
                os.environ["MLATUNE_DB"] = saved

    @unittest.skipIf(_library.recorded_paths() is None, "no _paths.py: CMake did not configure a build")
    def test_shipped_spaces_by_name(self):
        spaces = os.path.join(SOURCE_DIR, "search_spaces")
        self.assertEqual(dispatcher.resolve_space(None), os.path.join(spaces, "fused_mla_attention.yaml"))
        self.assertEqual(dispatcher.resolve_space("rms_norm"), os.path.join(spaces, "rms_norm.yaml"))
        self.assertEqual(dispatcher.resolve_space("rms_norm.yaml"), os.path.join(spaces, "rms_norm.yaml"))

    def test_paths_and_unknown_names(self):
        with tempfile.NamedTemporaryFile(suffix=".yaml") as f:
            self.assertEqual(dispatcher.resolve_space(f.name), f.name)
        self.assertEqual(dispatcher.resolve_space("no_such_family"), "no_such_family.yaml")  # the library says
        self.assertEqual(dispatcher.resolve_space("dir/x.yaml"), "dir/x.yaml")

    def test_device(self):
        for ok in (None, 0, "cuda", "cuda:0", FakeDevice("cuda", 0), FakeDevice("cuda", None)):
            dispatcher.check_device(ok)
        for bad in (1, "cuda:1", "cpu", FakeDevice("cuda", 2), FakeDevice("cpu", None)):
            with self.assertRaisesRegex(ValueError, "CUDA_VISIBLE_DEVICES"):
                dispatcher.check_device(bad)
        with self.assertRaises(TypeError):
            dispatcher.check_device(1.5)


class ChoiceTest(unittest.TestCase):
    def test_hit_with_parentheses_in_the_explanation(self):
        text = "hit ALGORITHM=absorbed,KEY_TILE=16 (hit: tuned at this shape on NVIDIA H200 (12.30 us))"
        choice = dispatcher.parse_choice(text)
        self.assertEqual(choice.reason, "hit")
        self.assertEqual(choice.config, "ALGORITHM=absorbed,KEY_TILE=16")
        self.assertEqual(choice.parameters, {"ALGORITHM": "absorbed", "KEY_TILE": "16"})
        self.assertEqual(choice.explanation, "hit: tuned at this shape on NVIDIA H200 (12.30 us)")
        self.assertEqual(choice.text, text)

    def test_none(self):
        choice = dispatcher.parse_choice("none - (none: no config of k can run B=1)")
        self.assertEqual((choice.reason, choice.config, choice.parameters), ("none", None, {}))
        self.assertEqual(choice.explanation, "none: no config of k can run B=1")


class ShapeTest(unittest.TestCase):
    VARIABLES = ("ROWS", "COLS")

    def test_forms(self):
        self.assertEqual(dispatcher.shape_values({"COLS": 7, "ROWS": 3}, self.VARIABLES), [3, 7])
        self.assertEqual(dispatcher.shape_values((3, 7), self.VARIABLES), [3, 7])

    def test_errors(self):
        cases = [({"ROWS": 3}, ValueError, "missing COLS"),
                 ({"ROWS": 3, "COLS": 4, "X": 1}, ValueError, "unknown X"),
                 ((3,), ValueError, "has 1 values; expected 2 \\(ROWS, COLS\\)"),
                 ((3, 0), ValueError, "COLS must be positive, got 0"),
                 ((3, True), TypeError, "COLS must be an int"),
                 ((3, 2.0), TypeError, "COLS must be an int"),
                 ("3,4", TypeError, "mapping"),
                 (None, TypeError, "mapping")]
        for shape, kind, message in cases:
            with self.subTest(shape=shape), self.assertRaisesRegex(kind, message):
                dispatcher.shape_values(shape, self.VARIABLES)


class BufferTest(unittest.TestCase):
    INFOS = (dispatcher.Buffer("x", "float32", "input", 4), dispatcher.Buffer("out", "float32", "output", 4))

    def test_tensors_give_sizes(self):
        pointers, sizes, any_tensor = dispatcher.buffer_pointers(
            [Tensor((2, 3), address=4096), Tensor((2, 3), address=8192)], self.INFOS)
        self.assertEqual((pointers, sizes, any_tensor), ([4096, 8192], [24, 24], True))

    def test_pointers_and_pairs(self):
        self.assertEqual(dispatcher.buffer_pointers([4096, (8192, 100)], self.INFOS), ([4096, 8192], None, False))
        self.assertEqual(dispatcher.buffer_pointers([(4096, 8), (8192, 100)], self.INFOS),
                         ([4096, 8192], [8, 100], False))

    def test_errors(self):
        cases = [([Tensor((2,), dtype="float64"), 1], TypeError, "x must be float32, got float64"),
                 ([Tensor((2,), device=FakeDevice("cpu", None)), 1], ValueError, "x must be on a CUDA device"),
                 ([Tensor((2,), device=FakeDevice("cuda", 1)), 1], ValueError, "cuda:1.*CUDA_VISIBLE_DEVICES"),
                 ([Tensor((2, 3), contiguous=False), 1], ValueError, "x must be contiguous"),
                 ([1], ValueError, "1 buffers given; the family takes 2: x \\(float32 input\\)"),
                 ([0, 1], ValueError, "buffer x is a null pointer"),
                 (["x", 1], TypeError, "buffer x: expected a CUDA tensor"),
                 (Tensor((2,)), TypeError, "sequence")]
        for buffers, kind, message in cases:
            with self.subTest(message=message), self.assertRaisesRegex(kind, message):
                dispatcher.buffer_pointers(buffers, self.INFOS)

    def test_stream(self):
        class Stream:
            cuda_stream = 1234
        self.assertEqual(dispatcher.stream_handle(None, False), 0)
        self.assertEqual(dispatcher.stream_handle(77, False), 77)
        self.assertEqual(dispatcher.stream_handle(Stream(), True), 1234)
        with self.assertRaises(TypeError):
            dispatcher.stream_handle("default", False)


class MlaCheckTest(unittest.TestCase):
    def test_shape(self):
        q, kv, wk, wv, out = mla_tensors(B=2, T=5, H=3, D=8, R=6)
        self.assertEqual(_checks.check_mla_arguments(q, kv, wk, wv), (2, 5, 3, 8, 6))
        self.assertEqual(_checks.check_mla_arguments(q, kv, wk, wv, out), (2, 5, 3, 8, 6))

    def test_errors(self):
        q, kv, wk, wv, out = mla_tensors()
        cases = [
            ((Tensor((2, 5, 3, 8), dtype="float16"), kv, wk, wv, None), TypeError, "q must be float32, got float16"),
            (("q", kv, wk, wv, None), TypeError, "q must be a torch.Tensor, got str"),
            ((q, Tensor((2, 5, 6), device=FakeDevice("cpu", None)), wk, wv, None), ValueError,
             "kv_latent must be on a CUDA device, got cpu"),
            ((q, kv, Tensor((6, 3, 8), contiguous=False), wv, None), ValueError, "w_up_k must be contiguous"),
            ((Tensor((2, 5, 24)), kv, wk, wv, None), ValueError, "q must have 4 dimensions \\[B,T,H,D\\]"),
            ((q, Tensor((2, 4, 6)), wk, wv, None), ValueError, "kv_latent \\(2, 4, 6\\) must be \\[B,T,R\\] with B=2, T=5"),
            ((q, kv, wk, Tensor((6, 3, 9)), None), ValueError, "w_up_v \\(6, 3, 9\\) must be \\[R,H,D\\] = \\[6,3,8\\]"),
            ((q, kv, wk, wv, Tensor((2, 5, 3, 7))), ValueError, "out \\(2, 5, 3, 7\\) must have the shape of q"),
            ((q, Tensor((2, 5, 0)), Tensor((0, 3, 8)), Tensor((0, 3, 8)), None), ValueError, "R must be positive"),
            ((q, kv, wk, wv, Tensor((2, 5, 3, 8), address=q.data_ptr() + 64)), ValueError, "out overlaps q"),
        ]
        for arguments, kind, message in cases:
            with self.subTest(message=message), self.assertRaisesRegex(kind, message):
                _checks.check_mla_arguments(*arguments)

    def test_fake_tensors_skip_the_overlap_check(self):
        q, kv, wk, wv, _ = mla_tensors()
        aliased = Tensor(q.shape, address=q.data_ptr())
        self.assertEqual(_checks.check_mla_arguments(q, kv, wk, wv, aliased, check_memory=False), (2, 5, 3, 8, 6))

    def test_sizes_beyond_int32(self):
        q, kv, wk, wv, _ = mla_tensors()
        huge = Tensor((1, 2**31, 1, 1))
        with self.assertRaisesRegex(ValueError, "T=2147483648 is larger than the kernels' int32"):
            _checks.check_mla_arguments(huge, Tensor((1, 2**31, 6)), Tensor((6, 1, 1)), Tensor((6, 1, 1)))

    def test_empty_output_is_accepted(self):
        q, kv, wk, wv = Tensor((0, 5, 3, 8)), Tensor((0, 5, 6)), Tensor((6, 3, 8)), Tensor((6, 3, 8))
        self.assertEqual(_checks.check_mla_arguments(q, kv, wk, wv), (0, 5, 3, 8, 6))


class ErrorTest(unittest.TestCase):
    def test_status_classes(self):
        self.assertIsInstance(_errors.error_for_status("f", _errors.INVALID_ARGUMENT, "m"), ValueError)
        self.assertIsInstance(_errors.error_for_status("f", _errors.ENVIRONMENT, "m"), mlatune.MlatuneEnvironmentError)
        self.assertIsInstance(_errors.error_for_status("f", _errors.CUDA_ERROR, "m"), mlatune.MlatuneCudaError)
        error = _errors.error_for_status("f", _errors.INTERNAL, "")
        self.assertEqual(type(error), mlatune.MlatuneError)
        self.assertEqual(str(error), "f: INTERNAL")


@unittest.skipUnless(BUILT_LIBRARY, "MLATUNE_TEST_LIBRARY is not set")
class PipInstallTest(unittest.TestCase):
    """`pip install --no-build-isolation` of python/ without network (and
    without setuptools): the installed copy carries _paths.py and so finds
    this build's library."""

    def test_install_finds_the_build(self):
        # pip is all it needs: the build backend is in the tree.
        probe = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, text=True)
        if probe.returncode != 0:
            self.skipTest("pip is missing; PYTHONPATH=python works without it")
        with tempfile.TemporaryDirectory() as tmp:
            source, target = os.path.join(tmp, "src"), os.path.join(tmp, "site")
            shutil.copytree(PACKAGE_ROOT, source, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
            install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                                      "--no-deps", "--quiet", "--target", target, source],
                                     capture_output=True, text=True, timeout=300)
            self.assertEqual(install.returncode, 0, install.stdout + install.stderr)
            self.assertTrue(os.path.isfile(os.path.join(target, "mlatune", "_paths.py")))
            result = run_python(DiscoveryTest.PRINT_PATH, {}, path=target)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.strip(), BUILT_LIBRARY)


if __name__ == "__main__":
    unittest.main()
