"""A run that fails part-way, in one sentence: which dump, what failed (store object and byte range, table), what
state the warehouse is in and what to do. jobs.cli.run_main prints it and exits with the code it gives.

Exit codes (beside 2, bad input before any work, and 1, Spark did not start):
- EXIT_BUSY (3): another run holds the dump, or another writer committed to a table this run was writing (a
  Delta conflict): nothing of this run reached that table; run again once the other one is done;
- EXIT_FAULT (4): the store could not be read (an object store erroring or stalling past the retries, a file gone
  since the listing) or the warehouse could not be written (full, read-only, permission denied).

Each Delta table is replaced in one commit, so a failed run leaves every table whole: a table this run had not
committed keeps its previous version; one it committed holds this run's rows for the dump.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

EXIT_BUSY = 3
EXIT_FAULT = 4


class TableWriteError(Exception):
    """Writing (committing) one table of one dump failed; the cause is chained."""

    def __init__(self, table: str, path: str, dump_id: str):
        super().__init__(f"cannot write table {table} of dump {dump_id!r} ({path})")
        self.table, self.path, self.dump_id = table, path, dump_id


class LayoutOutdated(ValueError):
    """A table was written before the tables were partitioned by dump: `python -m jobs.upgrade` lays it out anew
    (the message names the table and the command; nothing was written)."""


_STORE = re.compile(r"(?:StoreAccessError|StoreFormatError): (.+)")
_CONFLICT = re.compile(r"\b(Concurrent\w*Exception|ProtocolChangedException|MetadataChangedException|"
                       r"DeltaConcurrentModificationException)\b")
_DISK = [("No space left on device", "the warehouse's file system is full (No space left on device)", "free space"),
         ("Disk quota exceeded", "the warehouse's disk quota is exceeded", "free space"),
         ("Read-only file system", "the warehouse is on a read-only file system", "make it writable"),
         ("Permission denied", "permission denied writing the warehouse", "fix the permissions"),
         ("AccessDenied", "access denied writing the warehouse", "fix the credentials or policy")]
_WHOLE = "every table is whole (one this run had not committed keeps its previous version)"


@contextmanager
def task_writes(table: str, path: str, dump_id: str) -> Iterator[None]:
    """Around a Spark action whose tasks write a table's files themselves (`jobs.delta_files.write_part`): a
    failure of the file system they write to (full, read-only, denied) becomes TableWriteError naming the table, as
    a failed commit does; anything else passes unchanged."""
    try:
        yield
    except Exception as e:
        joined = " ".join(_texts(e))
        if any(key in joined for key, _, _ in _DISK) and not any(_STORE.search(t) for t in _texts(e)):
            raise TableWriteError(table, path, dump_id) from e
        raise


def _texts(e: BaseException | None) -> list[str]:
    """The exception, its Python causes and every Java cause's toString(), outermost first."""
    out: list[str] = []
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        out.append(str(e))
        java: Any = getattr(e, "java_exception", None) or getattr(e, "_origin", None)
        depth = 0
        while java is not None and depth < 20:
            try:
                out.append(str(java.toString()))
                nxt = java.getCause()
            except Exception:
                break
            java = None if nxt is None or nxt.equals(java) else nxt
            depth += 1
        e = e.__cause__ or e.__context__
    return out


def _short(text: str, limit: int = 400) -> str:
    text = " ".join(text.split()).rstrip(".")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe(e: BaseException, dump_id: str | None) -> tuple[str, int] | None:
    """(sentence, exit code) for a run's failure the user can act on; None for anything else (a bug: re-raise)."""
    texts = _texts(e)
    dump = f"dump {dump_id!r}" if dump_id else "the dump"
    table = next((x for x in _chain(e) if isinstance(x, TableWriteError)), None)
    layout = next((x for x in _chain(e) if isinstance(x, LayoutOutdated)), None)
    if layout is not None:
        return f"{dump}: {layout}", 2
    for t in texts:
        m = _STORE.search(t)
        if m:
            return (f"{dump}: cannot read the store: {_short(m.group(1))}; {_WHOLE}: run again once the store "
                    f"reads", EXIT_FAULT)
    for t in texts:
        m = _CONFLICT.search(t)
        if m:
            what = f"table {table.table} ({table.path})" if table else "a table"
            return (f"{dump}: another writer committed to {what} while this run was writing it ({m.group(1)}): "
                    f"this run's commit was refused and the table holds the other writer's version; run again "
                    f"when no other run writes this dump", EXIT_BUSY)
    if table is not None:
        joined = " ".join(texts)
        why, fix = next(((say, fix) for key, say, fix in _DISK if key in joined), (None, "fix the cause"))
        if why is None:
            why = java_reason(table.__cause__ or table)
        return (f"{dump}: cannot write table {table.table} ({table.path}): {why}; {_WHOLE}: {fix}, then run "
                f"again", EXIT_FAULT)
    return None


def _chain(e: BaseException | None) -> list[BaseException]:
    out: list[BaseException] = []
    while e is not None and e not in out:
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


_QUALIFIED = re.compile(r"\b(?:[a-z_][a-z0-9_]*\.)+([A-Z][A-Za-z0-9_$]*)")


def java_reason(e: BaseException) -> str:
    """A JVM exception in one short line: simple class names, whitespace collapsed, the causes' repeated
    "Class: message" segments (the AWS SDK nests the same one several times) kept once."""
    java = getattr(e, "java_exception", None)
    text = " ".join((str(java.toString()) if java is not None else str(e)).split()) or type(e).__name__
    text = _QUALIFIED.sub(r"\1", text)
    seen: list[str] = []
    for part in text.split(": "):
        if part not in seen:
            seen.append(part)
    line = ": ".join(seen)
    return line if len(line) <= 300 else line[:297] + "..."
