"""Packets -> TCP segments: link, tunnel, IP and TCP headers, and IP fragments reassembled.

Input: `RawPacket`s (link, IP and TCP headers as captured).
Output: `Segment`s for TCP over IPv4 or IPv6 (`headers`), through any stack of tunnels and
shims (`decap`) and IP fragments (`fragments`, reassembled into whole datagrams), and
`NetIssue`s for faults.
Rule: sans-IO and pure Python: no files, sockets, threads, pyarrow, pandas or scapy, and
nothing of the stages after it (`flow`, `tls`, `pulsar`, `tables`, `frontends`).
"""
