"""Stream bytes -> Pulsar frames, application messages, conversations.

Input: one direction's stream bytes of a Pulsar connection, in any pieces.
Output: frames and anomalies (`framing` locates them, `frame_events` emits them, `sections`
decodes their parts), application messages (`payload`, `messages`), per-connection handshake
and entities (`entities`) and request/response pairs (`pairing`, rows by `pairs`), all
three for a connection's decoded events at once (`publish`);
`encoder` builds frames for tests; `wire` is the only importer of the generated protobuf
bindings and the only walker of its descriptors.
Rule: sans-IO: no files, sockets, threads, pyarrow, pandas or scapy, and nothing of `flow`,
`tables` or `frontends`.
"""
