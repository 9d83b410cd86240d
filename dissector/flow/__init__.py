"""Packets -> ordered stream bytes per direction.

Input: `RawPacket`s (link, IP and TCP headers as captured).
Output: segments (`net`), reassembled byte streams with exact gaps per direction (`tcp`),
and what a stream's first bytes say about it: TLS, a PROXY header (`preamble`).
Rule: sans-IO and pure Python: no files, sockets, threads, pyarrow, pandas or scapy, and
nothing of `pulsar`, `tables` or `frontends`.
"""
