"""Stream bytes -> Pulsar frames, application messages, conversations.

Input: one direction's stream bytes of a Pulsar connection, in any pieces.
Output: frames and anomalies (`framing`, `sections`), application messages (`payload`,
`messages`), per-connection handshake, entities and request/response pairs
(`conversations`); `encoder` builds frames for tests; `wire` is the only importer of the
generated protobuf bindings.
Rule: sans-IO: no files, sockets, threads, pyarrow, pandas or scapy, and nothing of `flow`,
`tables` or `frontends`.
"""
