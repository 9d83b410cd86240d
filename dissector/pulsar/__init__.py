"""Stream bytes -> Pulsar frames and application messages.

Input: one direction's stream bytes of a Pulsar connection, in any pieces.
Output: frames and anomalies (`framing` locates them, `resync` finds where they start again
after bytes that are not one, `frame_events` emits them, `sections` decodes their parts),
application messages (`decompression`, `batches` and `chunks` unpack payloads, `messages`
makes the messages); `encoder` builds frames for tests; `wire` is the only importer of the
generated protobuf bindings and the only walker of its descriptors.
Rule: sans-IO: no files, sockets, threads, pyarrow, pandas or scapy, and nothing of `flow`,
`tables` or `frontends`.
"""
