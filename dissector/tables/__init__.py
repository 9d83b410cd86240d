"""Events -> tables.

Input: the pipeline's events.
Output: one Arrow schema per table (`schema`), record batches built column-wise
(`builders`), row filters (`filters`) and the jsonl / csv / parquet writers (`output`).
Rule: every table is declared once, in `schema`; everything else takes its columns from it.
"""
