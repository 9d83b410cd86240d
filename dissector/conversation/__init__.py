"""The conversation state of one TCP connection: between the stages and the events out.

Input: one TCP connection's events as the pipeline routes them (`connection.Connection`).
Output: what the connection publishes: `ConversationOpened`, frames, pairs, messages,
anomalies, and its `Conversation` record at the end (`records`).
Rule: sans-IO: the per-connection wiring of `flow` (its mode and bytes), `tls` and `pulsar`;
no files, sockets, threads or pyarrow, and nothing of `pipeline`, `tables`, `read` or
`frontends`.
"""
