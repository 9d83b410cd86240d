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
- `of_raw` finds the shard of a plain Ethernet IPv4/IPv6 TCP packet from its bytes, without
  parsing it (a worker skips the other shards' packets for a fraction of a parse); any other
  packet (VLAN tags, tunnels, IP fragments, other link types) gets -1, to be parsed and
  given to `of`: tunnels by their inner segment, fragments once reassembled (every worker
  reassembles them all). Both key connections the same way (address bytes and ports), so a
  connection gets one shard whichever way its packets go.
- The compiled walk deals as this module does (dissector/_core/deal.c, a `Dealer`): it skips
  other shards' packets without making them, and gives this shard's as `Dealt` (a segment)
  or `DealtRaw` (to parse), a run of skipped packets as `Skipped` where it matters (the idle
  clock, or the last packets read); the packets it cannot key it gives as the plain reader
  does, and a `Sharder` made with that `Dealer` deals them on the same state (the item
  types: dissector.events). This class
  without a Dealer is the reference (tests/core/test_deal.py compares them).
"""

from __future__ import annotations

from collections import OrderedDict
from socket import AF_INET, AF_INET6, inet_pton
from typing import TYPE_CHECKING

from dissector.events import NetIssue, Segment
from dissector.flow.tcp import MAX_OPEN_FLOWS

if TYPE_CHECKING:
    from dissector._core import Dealer

Endpoint = tuple[bytes, int]
_ETHERNET = 1


class Sharder:
    """Deal connections to n shards; see the module docstring. dealer: the compiled one
    whose state this sharder shares with the walk, or None (this class's own)."""

    def __init__(
        self, n: int, capacity: int = MAX_OPEN_FLOWS, dealer: Dealer | None = None
    ) -> None:
        self.n = n
        self.capacity = capacity
        self._next = 0
        self._flows: OrderedDict[tuple[Endpoint, Endpoint], int] = OrderedDict()
        self._dealer = dealer

    def of(self, seg: Segment | NetIssue) -> int:
        """The shard of `seg`'s connection."""
        if seg.src_port is None or seg.dst_port is None or seg.src_ip is None:
            return 0
        assert seg.dst_ip is not None
        family = AF_INET6 if ":" in seg.src_ip else AF_INET
        a: Endpoint = (inet_pton(family, seg.src_ip), seg.src_port)
        b: Endpoint = (inet_pton(family, seg.dst_ip), seg.dst_port)
        return self._deal(a, b)

    def of_raw(self, linktype: int, data: bytes) -> int:
        """The shard of a plain Ethernet IPv4/IPv6 TCP packet, or -1: parse it, then `of`."""
        if linktype != _ETHERNET or len(data) < 54:
            return -1
        ethertype = data[12] << 8 | data[13]
        if ethertype == 0x0800:
            ihl = (data[14] & 0x0F) * 4
            # TCP, not a fragment (MF clear, offset 0), the header and the ports present
            if data[23] != 6 or ihl < 20 or (data[20] & 0x3F) or data[21]:
                return -1
            at = 14 + ihl
            if len(data) < at + 4:
                return -1
            a: Endpoint = (data[26:30], data[at] << 8 | data[at + 1])
            b: Endpoint = (data[30:34], data[at + 2] << 8 | data[at + 3])
        elif ethertype == 0x86DD:
            if data[20] != 6 or len(data) < 58:  # TCP right after the fixed header
                return -1
            a = (data[22:38], data[54] << 8 | data[55])
            b = (data[38:54], data[56] << 8 | data[57])
        else:
            return -1
        return self._deal(a, b)

    def _deal(self, a: Endpoint, b: Endpoint) -> int:
        if self._dealer is not None:
            return self._dealer.deal(a[0], a[1], b[0], b[1])
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
