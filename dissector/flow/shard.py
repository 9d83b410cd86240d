"""Which of n shards a packet's connection belongs to, for dissecting one capture in parallel.

Input: a parsed packet (a TCP segment, or a packet whose headers failed) and n.
Output: its shard, 0 <= k < n.
Rule: both directions of a connection land in the same shard (the hash is symmetric in the
endpoints). Addresses are hashed with Python's string hash, which is the same in every
process forked from one parent, so forked workers agree; a packet without ports or addresses
belongs to shard 0.
"""

from __future__ import annotations

from dissector.events import NetIssue, Segment


def shard_of(seg: Segment | NetIssue, n: int) -> int:
    """The shard of `seg`'s connection among n."""
    if seg.src_port is None or seg.dst_port is None:
        return 0
    return (seg.src_port + seg.dst_port + (hash(seg.src_ip) ^ hash(seg.dst_ip))) % n
