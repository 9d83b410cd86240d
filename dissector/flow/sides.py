"""A connection's sides swapped: the one operation that applies a roles judgment.

Input: anything said or kept per side of a connection whose roles `flow.classify` judged
the other way round after they were first taken (`classify.SWAPS`): its `FlowKey`, an event
made with the old roles, a map by `Direction` (decoders, marks, counts).
Output: the same as the new roles say it (`swap`).
Rule: a swap changes what is said per side and nothing else: a key's client and broker, an
event's direction, a `ConnClosed`'s counts per side and its closing side, a map's keys
(client first) and the direction its values read (an object with a `direction` attribute
now reads the other side); a thing that says nothing per side is returned as it is.
Swapping twice gives back what was swapped.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

from dissector.events import ConnClosed, ConnOpened, Direction, FlowKey

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
OTHER = {C2B: B2C, B2C: C2B}

T = TypeVar("T")


def swap(x: T) -> T:
    """`x` with its sides swapped (see the module docstring)."""
    return cast(T, _swapped(x))


def _swapped(x: Any) -> Any:
    if type(x) is dict:
        out = {}
        for side in (C2B, B2C):
            if OTHER[side] in x:
                value = x[OTHER[side]]
                if isinstance(getattr(value, "direction", None), Direction):
                    value.direction = side
                out[side] = value
        return out
    if type(x) is FlowKey:
        return FlowKey(x.broker_ip, x.broker_port, x.client_ip, x.client_port)
    if type(x) is ConnOpened:
        return x._replace(key=_swapped(x.key))
    if type(x) is ConnClosed:
        return x._replace(
            packets_c2b=x.packets_b2c,
            packets_b2c=x.packets_c2b,
            bytes_c2b=x.bytes_b2c,
            bytes_b2c=x.bytes_c2b,
            closed_by=None if x.closed_by is None else OTHER[x.closed_by],
        )
    direction = getattr(x, "direction", None)
    if isinstance(direction, Direction) and hasattr(x, "_replace"):  # an event (NamedTuple)
        return x._replace(direction=OTHER[direction])
    return x
