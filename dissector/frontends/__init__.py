"""EDGE: what people and other programs use: the command line, the text view, live
capture and its files, the Spark data source and fleet job, the summary.

Input: the reader's events and tables, a packet socket (live), Spark.
Output: text, files and Spark DataFrames.
Rule: frontends only wire and present; decoding lives in `net`, `flow` and `pulsar`, tables in
`tables`.
"""
