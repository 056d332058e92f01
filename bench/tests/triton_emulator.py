"""A pure-Python stand-in for the part of Triton that bench/triton_flash_attention.py uses.

It runs the kernel's own Python body, program by program, on small float64 lists, so that
its indexing, masks and online softmax can be checked where neither Triton nor a GPU is
installed (CI).  It also holds the kernel to Triton's rules that the body can break
without any GPU: tl.arange spans a power of two, tl.dot operands are at least 16 in every
dimension and ask for tf32x3, and no load or store touches memory outside its buffer
where its mask is true.  It says nothing about what Triton's compiler accepts; the GPU run
does.
"""

import importlib
import itertools
import math
import sys
import types


class Tile:
    """A row-major block of values, 0-, 1- or 2-dimensional, with numpy's broadcasting."""

    def __init__(self, shape, data):
        self.shape = tuple(shape)
        self.data = list(data)
        assert len(self.data) == math.prod(self.shape), (shape, len(self.data))

    def value(self, index):
        """The element at `index` of a broadcast shape (as long as or longer than ours)."""
        index = index[len(index) - len(self.shape):]
        flat = 0
        for i, n in zip(index, self.shape):
            flat = flat * n + (i if n > 1 else 0)
        return self.data[flat]

    def __getitem__(self, key):
        assert len(self.shape) == 1 and key in ((slice(None), None), (None, slice(None))), key
        return Tile((self.shape[0], 1) if key[1] is None else (1, self.shape[0]), self.data)

    def rows(self):
        n = self.shape[1]
        return [self.data[r * n:(r + 1) * n] for r in range(self.shape[0])]

    def __add__(self, other): return elementwise(lambda a, b: a + b, self, other)
    def __radd__(self, other): return elementwise(lambda a, b: a + b, other, self)
    def __sub__(self, other): return elementwise(lambda a, b: a - b, self, other)
    def __rsub__(self, other): return elementwise(lambda a, b: a - b, other, self)
    def __mul__(self, other): return elementwise(lambda a, b: a * b, self, other)
    def __rmul__(self, other): return elementwise(lambda a, b: a * b, other, self)
    def __truediv__(self, other): return elementwise(lambda a, b: a / b, self, other)
    def __floordiv__(self, other): return elementwise(lambda a, b: a // b, self, other)
    def __mod__(self, other): return elementwise(lambda a, b: a % b, self, other)
    def __lt__(self, other): return elementwise(lambda a, b: a < b, self, other)
    def __le__(self, other): return elementwise(lambda a, b: a <= b, self, other)
    def __gt__(self, other): return elementwise(lambda a, b: a > b, self, other)
    def __ge__(self, other): return elementwise(lambda a, b: a >= b, self, other)
    def __and__(self, other): return elementwise(lambda a, b: a and b, self, other)


def shape_of(x):
    return x.shape if isinstance(x, Tile) else ()


def broadcast_shape(shapes):
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    result = []
    for dims in zip(*padded):
        sizes = {d for d in dims if d != 1}
        assert len(sizes) <= 1, f"shapes {shapes} do not broadcast"
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


def elementwise(fn, *operands):
    shapes = [shape_of(x) for x in operands]
    if all(s == () for s in shapes):
        return fn(*operands)
    shape = broadcast_shape(shapes)
    data = [fn(*(x.value(index) if isinstance(x, Tile) else x for x in operands))
            for index in itertools.product(*map(range, shape))]
    return Tile(shape, data)


class Buffer:
    """A tensor's memory: a flat list of values."""

    def __init__(self, values):
        self.values = list(values)


class Pointer:
    """A buffer and an offset (an integer, or a Tile of them)."""

    def __init__(self, buffer, offset=0):
        self.buffer = buffer
        self.offset = offset

    def __add__(self, other):
        return Pointer(self.buffer, elementwise(lambda a, b: a + b, self.offset, other))

    __radd__ = __add__

    def addresses(self, mask):
        """(flat address, mask) per element, the mask broadcast to the pointers' shape."""
        shape = shape_of(self.offset)
        mask = True if mask is None else mask
        assert broadcast_shape([shape, shape_of(mask)]) == shape, "the mask is larger than the pointers"
        for index in itertools.product(*map(range, shape)):
            address = self.offset.value(index) if shape else self.offset
            enabled = mask.value(index) if isinstance(mask, Tile) else mask
            if enabled:
                assert 0 <= address < len(self.buffer.values), f"access at {address} outside 0..{len(self.buffer.values)}"
            yield address, enabled


class FakeTensor:
    """What launch() reads of a torch tensor: shape, contiguity, element count, memory."""

    def __init__(self, shape, values):
        self.shape = tuple(shape)
        self.buffer = Buffer(values)
        assert len(self.buffer.values) == math.prod(self.shape)

    def is_contiguous(self):
        return True

    def numel(self):
        return math.prod(self.shape)


class Language(types.ModuleType):
    """triton.language, as far as the kernel uses it."""

    float32 = "fp32"

    class constexpr:  # noqa: N801 - Triton's name; only used as an annotation
        pass

    def __init__(self):
        super().__init__("triton.language")
        self.program = (0, 0)
        self.dots = 0
        self.math = types.SimpleNamespace(exp2=lambda x: elementwise(lambda a: 2.0 ** a, x))

    def program_id(self, axis):
        return self.program[axis]

    @staticmethod
    def cdiv(a, b):
        return -(-a // b)

    @staticmethod
    def arange(start, end):
        assert end > start and (end - start) & (end - start - 1) == 0, f"tl.arange({start}, {end}): not a power of two"
        return Tile((end - start,), range(start, end))

    @staticmethod
    def full(shape, value, dtype):
        return Tile(shape, [value] * math.prod(shape))

    def zeros(self, shape, dtype):
        return self.full(shape, 0.0, dtype)

    @staticmethod
    def load(pointer, mask=None, other=None):
        values = pointer.buffer.values
        data = [values[a] if enabled else other for a, enabled in pointer.addresses(mask)]
        assert None not in data, "a masked load without `other`"
        return Tile(shape_of(pointer.offset), data)

    @staticmethod
    def store(pointer, value, mask=None):
        shape = shape_of(pointer.offset)
        for index, (address, enabled) in zip(itertools.product(*map(range, shape)), pointer.addresses(mask)):
            if enabled:
                pointer.buffer.values[address] = value.value(index) if isinstance(value, Tile) else value

    def dot(self, a, b, input_precision=None):
        assert input_precision == "tf32x3", f"tl.dot with input_precision={input_precision!r}"
        (m, k), (k2, n) = a.shape, b.shape
        assert k == k2 and min(m, n, k) >= 16, f"tl.dot of {a.shape} by {b.shape}"
        self.dots += 1
        columns = list(zip(*b.rows()))
        return Tile((m, n), [sum(x * y for x, y in zip(row, col)) for row in a.rows() for col in columns])

    @staticmethod
    def trans(x):
        return Tile(x.shape[::-1], [v for col in zip(*x.rows()) for v in col])

    @staticmethod
    def where(condition, a, b):
        return elementwise(lambda c, x, y: x if c else y, condition, a, b)

    @staticmethod
    def maximum(a, b):
        return elementwise(max, a, b)

    @staticmethod
    def minimum(a, b):
        return elementwise(min, a, b)

    @staticmethod
    def _reduce(fn, x, axis):
        assert len(x.shape) == 2 and axis in (0, 1)
        lines = x.rows() if axis == 1 else [list(c) for c in zip(*x.rows())]
        return Tile((len(lines),), [fn(line) for line in lines])

    def max(self, x, axis):
        return self._reduce(max, x, axis)

    def sum(self, x, axis):
        return self._reduce(sum, x, axis)


class Kernel:
    """What @triton.jit makes: callable from another kernel, launched as kernel[grid](...)."""

    def __init__(self, fn, language, do_not_specialize=()):
        self.fn = fn
        self.language = language
        self.do_not_specialize = tuple(do_not_specialize)
        self.warmups = []

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def __getitem__(self, grid):
        def run(*args, num_warps, num_stages, **constexprs):
            arguments = [Pointer(a.buffer) if isinstance(a, FakeTensor) else a for a in args]
            for program in itertools.product(*map(range, grid)):
                self.language.program = program
                self.fn(*arguments, **constexprs)
        return run

    def warmup(self, *args, grid, **options):
        self.warmups.append((args, options))


def load_kernel_module():
    """bench/triton_flash_attention.py imported against the stand-in (a fresh copy each
    call); the real Triton, if any, is left in place for everything else."""
    language = Language()
    fake = types.ModuleType("triton")
    fake.language = language

    def jit(fn=None, **options):
        if fn is None:
            return lambda f: Kernel(f, language, options.get("do_not_specialize", ()))
        return Kernel(fn, language)

    fake.jit = jit
    saved = {name: sys.modules.get(name) for name in ("triton", "triton.language", "triton_flash_attention")}
    sys.modules.update({"triton": fake, "triton.language": language})
    sys.modules.pop("triton_flash_attention", None)
    try:
        return importlib.import_module("triton_flash_attention")
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
