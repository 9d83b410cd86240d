"""EDGE: `pulsar-dissect live`: a broker's traffic sniffed and dissected as it happens.

Input: a network interface and what the command line asked for.
Output: the text view or JSON lines as packets arrive, pcap and Parquet files, a summary.
Rule: capture apart from dissection: `capturer` (its own process) reads the kernel's ring;
`records` carries the packets between them as pcap records; `session` dissects with the
same pipeline (and compiled record walk) as offline reads; `files` writes; `loop` runs
them, with signals and stopping; `fanout` runs N of them (`-j N`), sharing the flows.
"""
