"""A PEP 517 build backend for the mlatune package, in the tree, using only
the standard library: `pip install --no-build-isolation ./python` then needs
neither network access nor setuptools and wheel, which Ubuntu 24.04 and
Debian 12 do not always have for the Python that has torch.

The wheel holds mlatune/*.py as they are in the tree, including the
_paths.py that CMake wrote (the record of the build's libmlatune_c.so)."""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "mlatune"
SUMMARY = "Runtime dispatch of mlatune's autotuned CUDA kernels from Python; fused MLA attention as a PyTorch op"


def _version() -> str:
    with open(os.path.join(ROOT, NAME, "__init__.py"), encoding="utf-8") as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


def _metadata(version: str) -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\nSummary: {SUMMARY}\n"
            "Requires-Python: >=3.9\nProvides-Extra: torch\nRequires-Dist: torch>=2.4; extra == \"torch\"\n"
            f"Description-Content-Type: text/markdown\n\n{readme}")


def _package_files() -> list:
    """Paths of the package's files relative to ROOT, sorted (no caches)."""
    files = []
    for folder, dirs, names in os.walk(os.path.join(ROOT, NAME)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        files += [os.path.relpath(os.path.join(folder, n), ROOT) for n in sorted(names) if n.endswith(".py")]
    return files


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    dist_info = f"{NAME}-{version}.dist-info"
    entries = []
    for relative in _package_files():
        with open(os.path.join(ROOT, relative), "rb") as f:
            entries.append((relative.replace(os.sep, "/"), f.read()))
    entries.append((f"{dist_info}/METADATA", _metadata(version).encode()))
    entries.append((f"{dist_info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: mlatune_build\n"
                                          b"Root-Is-Purelib: true\nTag: py3-none-any\n"))
    record = "\n".join(_record_line(path, data) for path, data in entries) + f"\n{dist_info}/RECORD,,\n"
    entries.append((f"{dist_info}/RECORD", record.encode()))
    name = f"{NAME}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as wheel:
        for path, data in entries:
            wheel.writestr(path, data)
    return name


def build_sdist(sdist_directory, config_settings=None):
    version = _version()
    base = f"{NAME}-{version}"
    name = f"{base}.tar.gz"
    files = _package_files() + ["pyproject.toml", "README.md", os.path.join("build_backend", "mlatune_build.py")]
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as sdist:
        for relative in files:
            if not relative.endswith("_paths.py"):  # a build's record does not travel in a source archive
                sdist.add(os.path.join(ROOT, relative), arcname=f"{base}/{relative}")
        info = _metadata(version).encode()
        member = tarfile.TarInfo(f"{base}/PKG-INFO")
        member.size = len(info)
        sdist.addfile(member, io.BytesIO(info))
    return name
