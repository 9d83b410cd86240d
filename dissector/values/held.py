"""The schemas the tracker holds: one copy of each distinct schema, bounded in bytes.

Input: every schema the tracker learns from a command (`hold`, with the label of where it was
first seen: "topic T: AVRO v3"), the same schema named again by its answer (`named`), and
each use of one to decode a message (`touch`).
Output: a `Held` per distinct schema (type, name, definition, properties), shared by every
map of the tracker that names it; `Held.schema` is the schema, or, once forgotten, its stub
(`SchemaInfo.forgotten`: no definition, name or properties; its type and size kept), so a
message decoded with it has `value_error` naming MAX_HELD_SCHEMA_BYTES.
Rule: the held schemas' bytes (definition, name, properties, plus HELD_SCHEMA_OVERHEAD
each) total at most MAX_HELD_SCHEMA_BYTES; past it, the least recently learnt or used is
forgotten, and `on_forget(label)` says so. Learning a forgotten schema again (the same
bytes: a new PRODUCER carries its schema) brings it back for every map that names it; the
forgotten are remembered by digest only (MAX_FORGOTTEN_SCHEMAS, oldest out).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, replace

from dissector.values.model import SchemaInfo

#: Bytes of the distinct schemas held (the tracker's maps name them, by count bounds of
#: their own): real schemas are kilobytes (an Avro record of hundreds of fields ~50 KiB), so
#: this holds hundreds of large ones and thousands of small ones, but only 16 near
#: MAX_DEFINITION_BYTES (each ~1 MB, and all of them kept made 40 wide schemas grow a read
#: by 1 MB each, without end under the count bounds: 10,000 topics x 64 versions).
MAX_HELD_SCHEMA_BYTES = 16 << 20
#: What one held schema costs besides its bytes (the records and dict entries naming it):
#: bounds how many empty schemas (BYTES, STRING without properties) can be held.
HELD_SCHEMA_OVERHEAD = 512
#: Forgotten schemas remembered (a digest and a stub each), to bring them back when learnt
#: again: as many as the tracker's maps may still name, in practice far fewer.
MAX_FORGOTTEN_SCHEMAS = 65_536


@dataclass(slots=True, eq=False)
class Held:
    """One distinct schema, as every map of the tracker names it (by identity)."""

    schema: SchemaInfo  # the schema, or its stub once forgotten
    digest: bytes
    cost: int
    label: str  # where it was first learnt: "topic T: AVRO v3"


class HeldSchemas:
    """Distinct schemas, least recently used first out past MAX_HELD_SCHEMA_BYTES."""

    def __init__(self, on_forget: Callable[[str], None] | None = None) -> None:
        self._held: dict[bytes, Held] = {}  # digest -> held, least recently used first
        self._forgotten: dict[bytes, Held] = {}  # digest -> held whose schema is a stub
        self._on_forget = on_forget
        self.bytes = 0  # the held schemas' costs
        self.forgets = 0  # schemas forgotten so far

    def hold(self, schema: SchemaInfo, label: str) -> Held:
        """The one Held of `schema`'s bytes (now the most recently used), made if new,
        brought back if forgotten; the least recently used go past the bound."""
        digest = _digest(schema)
        held = self._held.pop(digest, None)
        if held is None:
            held = self._forgotten.pop(digest, None)
            if held is None:
                held = Held(schema=schema, digest=digest, cost=cost(schema), label=label)
            else:
                held.schema = schema
            self.bytes += held.cost
        self._held[digest] = held
        while self.bytes > MAX_HELD_SCHEMA_BYTES and len(self._held) > 1:
            self._forget(next(iter(self._held.values())))
        return held

    def named(self, schema: SchemaInfo, label: str) -> Held:
        """The Held of `schema`'s bytes as it stands, held or forgotten (its use order kept:
        the schema is named again, not used), made (`hold`) only when unknown."""
        digest = _digest(schema)
        held = self._held.get(digest) or self._forgotten.get(digest)
        return held if held is not None else self.hold(schema, label)

    def touch(self, held: Held) -> SchemaInfo:
        """`held`'s schema, now the most recently used (a stub stays forgotten)."""
        if held.digest in self._held:
            self._held[held.digest] = self._held.pop(held.digest)
        return held.schema

    def __len__(self) -> int:
        return len(self._held)

    def _forget(self, held: Held) -> None:
        del self._held[held.digest]
        self.bytes -= held.cost
        self.forgets += 1
        s = held.schema
        held.schema = replace(s, name="", definition=b"", properties=(), forgotten=True)
        self._forgotten[held.digest] = held
        if len(self._forgotten) > MAX_FORGOTTEN_SCHEMAS:
            del self._forgotten[next(iter(self._forgotten))]
        if self._on_forget is not None:
            self._on_forget(held.label)


def cost(schema: SchemaInfo) -> int:
    """The bytes `schema` holds, as MAX_HELD_SCHEMA_BYTES counts them."""
    props = sum(len(k) + len(v) for k, v in schema.properties)
    return HELD_SCHEMA_OVERHEAD + len(schema.definition) + len(schema.name) + props


def _digest(schema: SchemaInfo) -> bytes:
    h = hashlib.sha256(repr((schema.type, schema.name, schema.definition_size)).encode())
    h.update(repr(schema.properties).encode())
    h.update(schema.definition)
    return h.digest()
