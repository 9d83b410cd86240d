"""Rows of a record batch grouped by the values of some of its columns (label values).

Input: Arrow columns (the labels' values) and, for `groups`, a column of int64 values.
Output: per distinct combination of the label columns' values (ordered by where each
column's values first appear, the first column's first): the number of rows (`count_rows`)
or their values (`group_values`).
Rule: vectorised: each column dictionary-encoded once (nulls as a value of their own, None),
one group number per row, one sort per batch; nothing is made per row.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def _keys(columns: list[pa.Array | pa.ChunkedArray]) -> tuple[np.ndarray, list[list[Any]]]:
    """Each row's group number (int64) over the columns' distinct values, and each column's
    values (dictionaries; None for nulls)."""
    key = np.zeros(len(columns[0]), dtype=np.int64)
    dictionaries = []
    for column in columns:
        encoded = pc.dictionary_encode(column, null_encoding="encode")
        if isinstance(encoded, pa.ChunkedArray):
            encoded = encoded.combine_chunks()
        values = encoded.dictionary.to_pylist()
        key = key * max(1, len(values)) + encoded.indices.to_numpy(zero_copy_only=False)
        dictionaries.append(values)
    return key, dictionaries


def _labels(code: int, dictionaries: list[list[Any]]) -> tuple[Any, ...]:
    out = []
    for values in reversed(dictionaries):
        code, index = divmod(code, max(1, len(values)))
        out.append(values[index])
    return tuple(reversed(out))


def count_rows(columns: list[pa.Array | pa.ChunkedArray]) -> Iterator[tuple[tuple[Any, ...], int]]:
    """(label values, rows) per distinct combination of the columns' values."""
    key, dictionaries = _keys(columns)
    codes, counts = np.unique(key, return_counts=True)
    for code, n in zip(codes.tolist(), counts.tolist(), strict=True):
        yield _labels(code, dictionaries), n


def group_values(
    columns: list[pa.Array | pa.ChunkedArray], values: pa.Array | pa.ChunkedArray
) -> Iterator[tuple[tuple[Any, ...], np.ndarray]]:
    """(label values, their rows' values as int64) per distinct combination of the
    columns' values (one sort per batch, no mask per group)."""
    key, dictionaries = _keys(columns)
    data = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.int64)
    order = np.argsort(key, kind="stable")
    codes, starts = np.unique(key[order], return_index=True)
    ends = [*starts[1:].tolist(), len(order)]
    for code, start, end in zip(codes.tolist(), starts.tolist(), ends, strict=True):
        yield _labels(code, dictionaries), data[order[start:end]]
