"""Redirect cycles in one lookup chain: the same redirect seen twice (lookup.redirect_loop).

Input: the Redirects of one run of a (client, topic) lookup chain, in order (`Hops.add`):
the broker asked (its address as the connection shows it; through a Pulsar proxy, the
broker the connection's CONNECT named in proxy_to_broker_url) and the broker it redirects to
(host and port of the Redirect's service URL), with the LOOKUP_RESPONSE's packet and time.
Output: the run's first cycle (`Hops.add` returns it for the Redirect that closes it, and
again for each later Redirect repeating an edge): the brokers it passes, named `host:port`,
from the first of the two equal redirects to the second ("A -> B -> A -> B"), and the
packets of its Redirects.
Rules:
- An edge is (broker asked, broker redirected to); one seen a second time on a path is a
  loop: the brokers send the client round in a circle, whatever the count threshold.
- A path is Redirects each followed by the client: the next LOOKUP went to the broker the
  Redirect named (its address, when the URL names an IP; when it names a host, a broker on
  the URL's port other than the one that redirected). A LOOKUP elsewhere (the client
  starting again at its service URL, e.g. after failing to reach the broker named) starts
  a new path: A -> X, then A -> X again, is a retry, not a cycle (the consecutive-redirect
  rule counts it).
- Visiting a broker twice is no loop by itself: A -> B -> A then a Connect answer at A is
  the Java broker's normal answer when the leader assigns the bundle to the broker asked
  first; only the edge repeating is.
- A run ends at a non-Redirect answer (the caller starts a new `Hops`).
Memory: at most MAX_HOPS Redirects per run are remembered (a longer run is the
consecutive-redirect rule's).
"""

from __future__ import annotations

import contextlib
import ipaddress
from dataclasses import dataclass, field

#: Redirects of one run remembered for cycles.
MAX_HOPS = 64
Broker = tuple[str | None, int | None]  # (host, port)


@dataclass(frozen=True, slots=True)
class Cycle:
    """The first repeated redirect of a run: brokers in order, and the Redirects' packets."""

    brokers: tuple[Broker, ...]
    packets: tuple[tuple[int, int], ...]  # (packet, ts) of each Redirect of the cycle

    def named(self) -> str:
        return " -> ".join(name(b) for b in self.brokers)


def name(broker: Broker) -> str:
    host, port = broker
    host_text = host or "?"
    if ":" in host_text:  # an IPv6 literal
        host_text = f"[{host_text}]"
    return host_text if port is None else f"{host_text}:{port}"


def follows(asked: Broker, before: tuple[Broker, Broker]) -> bool:
    """Whether a LOOKUP at `asked` follows the Redirect `before` (asked there, named to)."""
    there, named = before
    host, port = named
    if host is not None:
        with contextlib.suppress(ValueError):
            ipaddress.ip_address(host)
            return asked == named
    return asked != there and (port is None or asked[1] == port)


@dataclass(slots=True)
class Hops:
    """The Redirects of one run; see the module docstring."""

    hops: list[tuple[Broker, Broker, int, int]] = field(default_factory=list)
    first: dict[tuple[Broker, Broker], int] = field(default_factory=dict)  # edge -> index
    cycle: Cycle | None = None  # the first one
    last: tuple[Broker, Broker] | None = None  # the latest Redirect (asked, named)

    def add(self, asked: Broker, to: Broker, packet: int, ts: int) -> Cycle | None:
        """A Redirect from `asked` to `to`: None while no edge repeats; else the run's first
        cycle (made by this Redirect when `cycle` was None before)."""
        edge = (asked, to)
        if self.last is not None and not follows(asked, self.last):
            self.hops.clear()  # a new path: the client did not follow the last Redirect
            self.first.clear()
        self.last = edge
        seen = self.first.get(edge)
        if seen is None:
            if len(self.hops) < MAX_HOPS:
                self.first[edge] = len(self.hops)
                self.hops.append((asked, to, packet, ts))
            return None
        if self.cycle is None:
            loop = self.hops[seen:]
            brokers = (loop[0][0], *(hop[1] for hop in loop), to)
            packets = (*((hop[2], hop[3]) for hop in loop), (packet, ts))
            self.cycle = Cycle(brokers, packets)
        return self.cycle
