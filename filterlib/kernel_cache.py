"""Where the numba kernels' compiled code is cached, so that a process does not compile them again, and one
process at a time compiling a kernel.

Every kernel module takes `njit` from here: the cache directory is set before numba reads its configuration, and
a kernel's compile holds a lock (a file under the cache directory) that other processes wait on, then load what
it saved instead of compiling the same code at once. A Spark executor's Python workers (one per core), or two test
workers, each compiled job 1's kernels on a fresh host (about 30 s of CPU each): now one does, the others wait.

Installed from a checkout or a wheel, the kernels are cached under `cache_dir()`. Shipped to Spark executors
in spark-submit's `--py-files` zip, the sources sit inside a zip that each application fetches to a new
directory, and numba's own locator for zipped modules keys its cache directory by the zip's path: every
application on every executor compiled every kernel again (about 30 s of CPU a worker for job 1's kernels).
`install` puts a locator first that keys the cache by the module's path inside the zip, under `cache_dir()`,
while numba still checks each entry against a hash of the module's source (and the machine it was compiled for),
so changed code is compiled again and never loaded stale.
"""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
import threading
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any


def cache_dir() -> str:
    """~/.cache/filterlib-numba-<uid>, or a per-user temp dir where home is read-only (as on many Spark
    executors)."""
    for base in (os.path.join(os.path.expanduser("~"), ".cache"), tempfile.gettempdir()):
        path = os.path.join(base, f"filterlib-numba-{os.getuid()}")
        try:
            os.makedirs(path, exist_ok=True)
        except OSError:
            continue
        if os.access(path, os.W_OK):
            return path
    return tempfile.mkdtemp(prefix="filterlib-numba-")


def install() -> None:
    """Make numba cache the kernels of modules imported from a zip by their path inside it (idempotent)."""
    from numba.core.caching import CacheImpl, ZipCacheLocator

    if any(getattr(c, "_filterlib", False) for c in CacheImpl._locator_classes):
        return

    class ZippedModuleLocator(ZipCacheLocator):
        """numba's zip locator, its directory named for the module's path inside the zip, not the zip's."""

        _filterlib = True

        def __init__(self, py_func, py_file):  # noqa: ANN001 (numba's signature)
            super().__init__(py_func, py_file)
            self._cache_path = os.path.join(cache_dir(), "zipped",
                                            *PurePosixPath(self._internal_path).parent.parts)

        @classmethod
        def from_function(cls, py_func, py_file):  # noqa: ANN001, ANN206
            if ".zip" not in py_file:
                return None
            self = cls(py_func, py_file)
            try:
                self.ensure_cache_path()
            except OSError:
                return None
            return self

    CacheImpl._locator_classes.insert(0, ZippedModuleLocator)


_configured = False
_held = threading.local()


def njit(*args: Any, **kwargs: Any) -> Callable:
    """numba.njit, after `configure` (the kernel modules' only way to numba's decorator)."""
    configure()
    import numba

    return numba.njit(*args, **kwargs)


def configure() -> None:
    """Once a process: NUMBA_CACHE_DIR set to `cache_dir()` unless given, and every cached kernel compiled under
    its lock (`_compile_locked`)."""
    global _configured
    if _configured:
        return
    os.environ.setdefault("NUMBA_CACHE_DIR", cache_dir())
    from numba.core import config
    from numba.core.dispatcher import Dispatcher

    if not config.CACHE_DIR:  # numba was imported before: its configuration is read already
        config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]
    if not getattr(Dispatcher.compile, "_filterlib", False):
        Dispatcher.compile = _compile_locked(Dispatcher.compile)
    _configured = True


def _compile_locked(compile_: Callable) -> Callable:
    """Dispatcher.compile holding a file lock named for the kernel while it compiles or loads a cached kernel's
    new signature: a process that waited finds the code the other one saved. A kernel's compile takes its callees'
    locks inside its own (the call graph has no cycles, so no two processes wait on each other); a lock this thread
    holds already is not taken again."""
    from numba.core.caching import NullCache

    def compile(self, sig):  # noqa: ANN001, ANN202 (numba's signature)
        if isinstance(self._cache, NullCache):
            return compile_(self, sig)
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{self.py_func.__module__}.{self.py_func.__qualname__}")
        held = getattr(_held, "names", None)
        if held is None:
            held = _held.names = set()
        if name in held:
            return compile_(self, sig)
        directory = os.path.join(os.environ.get("NUMBA_CACHE_DIR") or cache_dir(), "locks")
        try:
            os.makedirs(directory, exist_ok=True)
            fd = os.open(os.path.join(directory, f"{name}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:  # no lock to be had: compile as numba does
            return compile_(self, sig)
        held.add(name)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return compile_(self, sig)
        finally:
            held.discard(name)
            os.close(fd)  # releases the lock

    compile._filterlib = True
    return compile
