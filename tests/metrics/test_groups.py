"""Rows grouped by label columns (dissector.metrics.groups) against pandas' groupby."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from dissector.metrics.groups import count_rows, group_values

labels = st.sampled_from(["a", "b", "c", None])


@given(st.lists(st.tuples(labels, labels, st.integers(0, 10**9)), min_size=1, max_size=60))
def test_groups_are_pandas_groups(rows: list[tuple[str | None, str | None, int]]) -> None:
    first, second, values = (pa.array(list(c)) for c in zip(*rows, strict=True))
    frame = pd.DataFrame(rows, columns=["x", "y", "v"])
    expected = {
        key: sorted(group.v.tolist()) for key, group in frame.groupby(["x", "y"], dropna=False)
    }
    expected = {tuple(None if pd.isna(k) else k for k in key): v for key, v in expected.items()}
    got = {key: sorted(vals.tolist()) for key, vals in group_values([first, second], values)}
    assert got == expected
    assert dict(count_rows([first, second])) == {k: len(v) for k, v in expected.items()}
    for _, vals in group_values([first, second], values):
        assert vals.dtype == np.int64
