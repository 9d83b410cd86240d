"""TCP stream bytes of a TLS connection -> what its handshake shows, and with a key log its
decrypted streams.

Input: each direction's reassembled bytes and gaps (from `flow`), and the session's key log.
Output: `Plain` and `PlainGap` per direction, in order (`plain`; what Pulsar framing reads),
anomalies, and the handshake's facts (`facts`: version, suite, SNI, ALPN, certificate).
Rule: a stream-to-stream stage of its own: sans-IO and pure Python, nothing of `flow`,
`pulsar`, `tables` or `frontends`; the pipeline wires it between TCP reassembly and framing.
"""
