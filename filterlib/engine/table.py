"""The decision-table backend: a selector's answer depends only on the values of the properties it names, so
it is evaluated once per distinct tuple of those values, by the row interpreter itself, and mapped back to the
rows by code. Exact by construction; fast while the distinct tuples stay few beside the rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from filterlib.engine.columns import Column
from filterlib.engine.results import ERROR, FALSE, NULL, TRUE
from filterlib.errors import FilterEvaluationError

_DENSE_LIMIT = 1 << 22


def distinct_tuples(columns: Sequence[Column], n: int) -> tuple[np.ndarray, np.ndarray]:
    """(inverse, tuples): each row's index into `tuples`, the (D, P) code tuples (-1 = missing) that occur."""
    if not columns:
        return np.zeros(n, dtype=np.int64), np.zeros((1 if n else 0, 0), dtype=np.int32)
    sizes = [c.cardinality + 1 for c in columns]
    total = 1
    for s in sizes:
        total *= s
    if total < 2**62:
        key = np.zeros(n, dtype=np.int64)
        stride = 1
        strides = []
        for c, s in zip(columns, sizes, strict=True):
            key += (c.codes.astype(np.int64) + 1) * stride
            strides.append(stride)
            stride *= s
        if total <= max(_DENSE_LIMIT, 4 * n):
            present = np.zeros(total, dtype=bool)
            present[key] = True
            ids = np.flatnonzero(present)
            lut = np.empty(total, dtype=np.int64)
            lut[ids] = np.arange(len(ids))
            inverse = lut[key]
        else:
            ids, inverse = np.unique(key, return_inverse=True)
        tuples = np.empty((len(ids), len(columns)), dtype=np.int32)
        for j, (st, s) in enumerate(zip(strides, sizes, strict=True)):
            tuples[:, j] = (ids // st) % s - 1
        return inverse.reshape(-1), tuples
    stacked = np.stack([c.codes for c in columns], axis=1)
    tuples, inverse = np.unique(stacked, axis=0, return_inverse=True)
    return inverse.reshape(-1), tuples.astype(np.int32)


def tuple_maps(names: Sequence[str], columns: Sequence[Column], tuples: np.ndarray) -> list[dict[str, str]]:
    """The property map of each distinct tuple (missing properties left out, as in the message)."""
    lists = [c.pylist() for c in columns]
    maps = []
    for row in tuples.tolist():
        maps.append({name: lists[j][code] for j, (name, code) in enumerate(zip(names, row, strict=True))
                     if code >= 0})
    return maps


def evaluate_maps(fn: Callable[[Mapping[str, str]], object], maps: Sequence[Mapping[str, str]]
                  ) -> tuple[np.ndarray, np.ndarray | None, list[FilterEvaluationError]]:
    """Run an interpreter closure on each map: per map a state, an error index, and the errors raised."""
    state = np.empty(len(maps), dtype=np.int8)
    err_index: np.ndarray | None = None
    errors: list[FilterEvaluationError] = []
    for i, props in enumerate(maps):
        try:
            v = fn(props)
        except FilterEvaluationError as e:
            if err_index is None:
                err_index = np.zeros(len(maps), dtype=np.int32)
            err_index[i] = len(errors)
            errors.append(e)
            state[i] = ERROR
            continue
        state[i] = TRUE if v is True else (FALSE if v is False else NULL)
    return state, err_index, errors
