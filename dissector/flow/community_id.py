"""Community ID v1: the flow hash Zeek, Suricata and Wireshark share, to join their records.

Input: a connection's endpoints (IP addresses as text, TCP ports), an optional 16-bit seed.
Output: "1:" + base64(SHA1(seed . address . address . proto . 0 . port . port)), all in
network byte order, the endpoint with the smaller (address, port) first, so that both
directions of a connection give the same id (https://github.com/corelight/community-id-spec).
Rule: computed once per connection, when the conversation opens (dissector.tables.builders);
rows only hold a reference to the string. Written here rather than taken from the
`communityid` package: only TCP over IPv4/IPv6 is needed (a dozen lines of hashlib), that
package ships no type information (this project type-checks strictly) and still carries
Python 2 compatibility code; tests/flow/test_community_id.py checks this against the spec's
published vectors and against tshark.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from ipaddress import ip_address

#: IP protocol number of TCP, the only transport the dissector follows.
TCP = 6

_SEED = struct.Struct("!H")
_TAIL = struct.Struct("!BxHH")  # protocol, one byte of padding, the two ports


def community_id(
    src_ip: str, src_port: int, dst_ip: str, dst_port: int, proto: int = TCP, seed: int = 0
) -> str | None:
    """The Community ID v1 of a flow (base64 form); None when an address is not an IP address.

    The same for (src, dst) and (dst, src): the endpoints are ordered as the spec orders them,
    by packed address, then port.
    """
    try:
        src, dst = ip_address(src_ip).packed, ip_address(dst_ip).packed
    except ValueError:
        return None
    if (dst, dst_port) < (src, src_port):
        src, dst, src_port, dst_port = dst, src, dst_port, src_port
    data = _SEED.pack(seed) + src + dst + _TAIL.pack(proto, src_port, dst_port)
    digest = hashlib.sha1(data, usedforsecurity=False).digest()
    return "1:" + base64.b64encode(digest).decode("ascii")
