"""PUBLIC, STABLE: the Spark data source and its helpers, at the documented path.

Input: nothing (re-exports). Output: `spark.read.format("pulsar")` (PulsarDataSource),
`session()`, `register()`, `read()`, `check_executors()`, `executor_python()`.
Rule: user scripts import `dissector.spark`; the implementation lives in
`dissector.frontends.spark` and may move, this path does not. Needs the `spark` extra
(pyspark 4).
"""

from dissector.frontends.spark import (
    PulsarDataSource,
    check_executors,
    executor_python,
    options_from,
    read,
    register,
    session,
)

__all__ = [
    "PulsarDataSource",
    "check_executors",
    "executor_python",
    "options_from",
    "read",
    "register",
    "session",
]
