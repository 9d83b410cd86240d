"""Metrics from the wire: counters, gauges and latency histograms, declared once.

Input: the pipeline's events and the tables' record batches, as a read or `live` makes them
(`feed`). Output: a `store.Snapshot` of every family, rendered as OpenMetrics text
(`openmetrics`), OTLP JSON (`otlp`) and served over HTTP by `live --metrics` (an edge of
the command line). The families are declared in `families.FAMILIES`; docs/metrics.md is
generated from them.
"""
