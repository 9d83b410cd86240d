"""Which of n shards a packet's connection belongs to, for dissecting one capture in parallel.

Input: the parsed packets of a capture, in order (a TCP segment, or a packet whose headers
failed), and n.
Output: each packet's shard, 0 <= k < n.
Rules: both directions of a connection land in the same shard; connections are dealt to the
shards in turn, in the order their first packet appears, so that shards get as many
connections as each other (a hash of the endpoints leaves 8 connections split 6 to 2 as
often as not). Every worker sees every packet and deals the same way, so they agree without
talking. Endpoints are remembered for the MAX_OPEN_FLOWS most recently seen connections (as
the flow table bounds itself); a packet without ports or addresses belongs to shard 0.
"""

from __future__ import annotations

from collections import OrderedDict

from dissector.events import NetIssue, Segment
from dissector.flow.tcp import MAX_OPEN_FLOWS

Endpoint = tuple[str, int]


class Sharder:
    """Deal connections to n shards; see the module docstring."""

    def __init__(self, n: int, capacity: int = MAX_OPEN_FLOWS) -> None:
        self.n = n
        self.capacity = capacity
        self._next = 0
        self._flows: OrderedDict[tuple[Endpoint, Endpoint], int] = OrderedDict()

    def of(self, seg: Segment | NetIssue) -> int:
        """The shard of `seg`'s connection."""
        if seg.src_port is None or seg.dst_port is None or seg.src_ip is None:
            return 0
        assert seg.dst_ip is not None
        a: Endpoint = (seg.src_ip, seg.src_port)
        b: Endpoint = (seg.dst_ip, seg.dst_port)
        key = (a, b) if a <= b else (b, a)
        flows = self._flows
        k = flows.get(key)
        if k is None:
            k = self._next
            self._next = (k + 1) % self.n
            flows[key] = k
            if len(flows) > self.capacity:
                flows.popitem(last=False)
        else:
            flows.move_to_end(key)
        return k
