"""The exceptions of the mlatune package.

Every failure of the C library arrives as a status code with a message
(cache/c_api.h); each status becomes one exception class, so that callers can
catch "bad input" apart from "this machine cannot do it"."""

from __future__ import annotations

# Statuses of cache/c_api.h.
OK = 0
INVALID_ARGUMENT = 1
ENVIRONMENT = 2
CUDA_ERROR = 3
BUFFER_TOO_SMALL = 4
INTERNAL = 5

STATUS_NAMES = {OK: "OK", INVALID_ARGUMENT: "INVALID_ARGUMENT", ENVIRONMENT: "ENVIRONMENT",
                CUDA_ERROR: "CUDA_ERROR", BUFFER_TOO_SMALL: "BUFFER_TOO_SMALL", INTERNAL: "INTERNAL"}


class MlatuneError(Exception):
    """A failed call of libmlatune_c.so: `function` is the C function, `status`
    its status code, and the message is mlatune_last_error()'s text."""

    def __init__(self, function: str, status: int, message: str):
        super().__init__(f"{function}: {message}" if message else f"{function}: {STATUS_NAMES.get(status, status)}")
        self.function = function
        self.status = status
        self.message = message


class MlatuneInputError(MlatuneError, ValueError):
    """MLATUNE_INVALID_ARGUMENT: a bad shape, buffer, database path or space file."""


class MlatuneEnvironmentError(MlatuneError):
    """MLATUNE_ENVIRONMENT: no GPU, an unreadable database, a binary that cannot
    be compiled or loaded."""


class MlatuneCudaError(MlatuneError):
    """MLATUNE_CUDA_ERROR: a CUDA runtime call of the launch failed."""


class LibraryNotFoundError(MlatuneError, OSError):
    """libmlatune_c.so could not be loaded from any of the places searched;
    `tried` lists each place with why it failed."""

    def __init__(self, tried: list[tuple[str, str]]):
        lines = "\n".join(f"  {place}: {why}" for place, why in tried)
        message = ("cannot load libmlatune_c.so; tried, in order:\n" + lines +
                   "\nBuild it (cmake --build build --target mlatune_c), or set MLATUNE_LIBRARY to its path.")
        MlatuneError.__init__(self, "load", ENVIRONMENT, message)
        self.tried = tried

    def __str__(self) -> str:
        return self.message


def error_for_status(function: str, status: int, message: str) -> MlatuneError:
    """The exception for a non-OK status of `function`."""
    kind = {INVALID_ARGUMENT: MlatuneInputError, ENVIRONMENT: MlatuneEnvironmentError,
            CUDA_ERROR: MlatuneCudaError}.get(status, MlatuneError)
    return kind(function, status, message)
