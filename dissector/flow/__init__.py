"""TCP segments -> ordered stream bytes per direction, and which connections are Pulsar.

Input: `Segment`s (from `dissector.net`: the headers of each packet already read).
Output: connections (`tcp`, the flow table) whose directions are reassembled into byte
streams with exact gaps (`reassembly`), what a stream's first bytes say about it: TLS, a
PROXY header (`preamble`), a connection's mode as one transition table (`classify`), its
Community ID (`community_id`) and its shard in a parallel read (`shard`).
Rule: sans-IO and pure Python: no files, sockets, threads, pyarrow, pandas or scapy, and
nothing of `pulsar`, `tables` or `frontends`.
"""
