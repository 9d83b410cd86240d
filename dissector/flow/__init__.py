"""Packets -> ordered stream bytes per direction, and which connections are Pulsar.

Input: `RawPacket`s (link, IP and TCP headers as captured).
Output: segments (`net`), connections (`tcp`, the flow table) whose directions are reassembled
into byte streams with exact gaps (`reassembly`), what a stream's first bytes say about it:
TLS, a PROXY header (`preamble`), and a connection's mode as one transition table (`classify`).
Rule: sans-IO and pure Python: no files, sockets, threads, pyarrow, pandas or scapy, and
nothing of `pulsar`, `tables` or `frontends`.
"""
