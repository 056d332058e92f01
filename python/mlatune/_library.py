"""Finding and loading libmlatune_c.so, and declaring its C functions.

The search order (the first that loads wins):
  1. $MLATUNE_LIBRARY, when set: that file only, so that a wrong value is an
     error rather than a silent fall-through to another build;
  2. the path recorded in mlatune/_paths.py when CMake configured a build
     tree (the libmlatune_c.so of that build) or installed the package (the
     library of the same prefix, relative to the package);
  3. the system loader (LD_LIBRARY_PATH, ldconfig's cache).
A failure lists every place tried and why it failed."""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Optional

from ._errors import LibraryNotFoundError

LIBRARY_NAME = "libmlatune_c.so"

_lock = threading.Lock()
_loaded: Optional[tuple[ctypes.CDLL, str]] = None


def recorded_paths():
    """The generated mlatune/_paths.py module, or None where no build or
    install wrote one (a plain copy of the sources)."""
    try:
        from . import _paths  # written by CMake; absent from the repository
    except ImportError:
        return None
    return _paths


def candidates() -> list[tuple[str, str]]:
    """(where it comes from, path or name to dlopen), in search order."""
    override = os.environ.get("MLATUNE_LIBRARY")
    if override:
        return [("$MLATUNE_LIBRARY", override)]
    found = []
    paths = recorded_paths()
    if paths is not None and getattr(paths, "LIBRARY", None):
        found.append((f"recorded by {paths.RECORDED_BY}", paths.LIBRARY))
    found.append(("system loader", LIBRARY_NAME))
    return found


def _open(path: str) -> ctypes.CDLL:
    """dlopen with a reason that says more than "cannot open" for a path."""
    if os.sep in path and not os.path.exists(path):
        raise OSError("no such file")
    return ctypes.CDLL(path)


def load() -> tuple[ctypes.CDLL, str]:
    """The loaded library (declared) and the path it was loaded from; loaded
    once per process.  Raises LibraryNotFoundError listing what was tried."""
    global _loaded
    with _lock:
        if _loaded is None:
            tried = []
            for where, path in candidates():
                try:
                    library = _open(path)
                    declare(library)
                except (OSError, AttributeError) as e:
                    tried.append((f"{where} ({path})", str(e) or type(e).__name__))
                    continue
                _loaded = (library, path)
                break
            else:
                raise LibraryNotFoundError(tried)
        return _loaded


def prototypes() -> dict:
    """{function name: (result type, argument types)} of the C ABI of
    cache/c_api.h and cache/mla_c_api.h; ctypes then converts and checks every
    argument."""
    c = ctypes
    handle, size_p, int_p = c.c_void_p, c.POINTER(c.c_size_t), c.POINTER(c.c_int)
    text_p, shape_p = c.POINTER(c.c_char_p), c.POINTER(c.c_int64)
    return {
        "mlatune_open": (c.c_int, [c.c_char_p, c.c_char_p, c.POINTER(handle)]),
        "mlatune_close": (None, [handle]),
        "mlatune_last_error": (c.c_char_p, [handle]),
        "mlatune_compile_count": (c.c_int, [handle, c.POINTER(c.c_ulonglong)]),
        "mlatune_first_use_ns": (c.c_int, [handle, c.POINTER(c.c_ulonglong)]),
        "mlatune_kernel_name": (c.c_int, [handle, text_p]),
        "mlatune_shape_variable_count": (c.c_int, [handle, size_p]),
        "mlatune_shape_variable_name": (c.c_int, [handle, c.c_size_t, text_p]),
        "mlatune_buffer_count": (c.c_int, [handle, size_p]),
        "mlatune_buffer_info": (c.c_int, [handle, c.c_size_t, text_p, int_p, int_p, size_p]),
        "mlatune_buffer_elements": (c.c_int, [handle, c.c_size_t, shape_p, c.c_size_t, c.POINTER(c.c_uint64)]),
        "mlatune_launch": (c.c_int, [handle, c.POINTER(c.c_void_p), c.c_size_t, shape_p, c.c_size_t,
                                     c.c_void_p]),
        "mlatune_launch_checked": (c.c_int, [handle, c.POINTER(c.c_void_p), size_p, c.c_size_t, shape_p,
                                             c.c_size_t, c.c_void_p]),
        "mlatune_choice_for": (c.c_int, [handle, shape_p, c.c_size_t, c.c_char_p, c.c_size_t]),
        "mlatune_set_compile_mode": (c.c_int, [handle, c.c_int]),
        "mlatune_wait_compiles": (c.c_int, [handle]),
        "mlatune_preloaded": (c.c_int, [handle, c.POINTER(c.c_ulonglong), c.POINTER(c.c_ulonglong)]),
        "mlatune_runs_stand_in": (c.c_int, [handle, shape_p, c.c_size_t, int_p]),
        "mlatune_race_state": (c.c_int, [handle, shape_p, c.c_size_t, int_p]),
        "mlatune_fused_mla_attention": (c.c_int, [handle] + [c.c_void_p] * 5 + [c.c_int] * 5 + [c.c_void_p]),
        "mlatune_choice": (c.c_int, [handle] + [c.c_int] * 5 + [c.c_char_p, c.c_size_t]),
    }


def declare(library: ctypes.CDLL) -> None:
    """Declares every function of prototypes() on `library`; AttributeError
    names a function the library lacks (one built from older sources)."""
    for name, (result, arguments) in prototypes().items():
        function = getattr(library, name)
        function.restype = result
        function.argtypes = arguments


def library_path() -> str:
    """Where the library was loaded from (loading it if needed)."""
    return load()[1]


def last_error(library: ctypes.CDLL) -> str:
    text = library.mlatune_last_error(None)
    return text.decode("utf-8", "replace") if text else ""
