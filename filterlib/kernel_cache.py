"""Where the numba kernels' compiled code is cached, so that a process does not compile them again.

Installed from a checkout or a wheel, numba caches next to the sources (`__pycache__`). Shipped to Spark executors
in spark-submit's `--py-files` zip, the sources sit inside a zip that each application fetches to a new
directory, and numba's own locator for zipped modules keys its cache directory by the zip's path: every
application on every executor compiled every kernel again (about 30 s of CPU a worker for job 1's kernels).
`install` puts a locator first that keys the cache by the module's path inside the zip, under `cache_dir()`,
while numba still checks each entry against a hash of the module's source (and the machine it was compiled for),
so changed code is compiled again and never loaded stale.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import PurePosixPath


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
