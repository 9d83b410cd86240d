"""Events -> tables.

Input: the pipeline's events.
Output: the registry of tables (`schema.TABLES`: Arrow schema and row function per table),
record batches built from events (`builders`), row filters (`filters`: the read options as
one predicate model, `predicates`, compiled to Arrow, SQL and Spark), latency statistics
(`stats`) and the jsonl / csv / parquet writers (`output`).
Rule: every table is declared once, as one column list (`per_frame`, `per_connection`, built with
`columns`); its schema and its rows both come from it, and everything else takes its table
names and columns from the registry.
"""
