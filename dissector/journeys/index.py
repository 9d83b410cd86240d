"""The joiner's indexes: stored messages by id and by producer, subscriptions, the bound.

Input: calls from the command handlers (dissector.journeys.produce, .consume): a stored
message made, given its id, delivered or acknowledged in a subscription.
Output: the stored messages found again by (topic, ledger, entry) or by (topic, producer
name, sequence id); those pushed out by the bound (`take_evicted`), and all of them in the
order first seen (`drain`).
Rules:
- An id is (topic, ledger, entry): ledgers may be numbered per topic. A side whose topic
  is unknown matches by (ledger, entry) alone when exactly one stored message has it, and
  takes the other's topic.
- A stored message seen first by its consumer side (a MESSAGE before the receipt) and
  then receipted is one message: the consumer side's deliveries move to the producer's.
- The name index holds only SENDs still waiting for their receipt: a receipted message is
  never joined to another by name (a replicated copy has another id).
- Beyond MAX_HELD messages the oldest stored message is pushed out of every index and
  handed over with `evicted` set.
- `end_to_end` (None unless metrics are asked for) hears each delivery's end-to-end latency
  once, when the join first knows it: its first ack, of a message whose SEND is known, or
  the merge that joins an acked delivery to its SEND (`told`); such an ack stays (an
  earlier one merged in later changes nothing), so the row says what was told.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Iterator, Sequence

from dissector.events import Frame
from dissector.journeys.batches import ClaimedBatch
from dissector.journeys.state import (
    MAX_CHUNK_IDS,
    MAX_HELD,
    MAX_HELD_VALUE_BYTES,
    MAX_NAMES,
    Conn,
    Delivery,
    EndToEnd,
    Msg,
    Stored,
    Sub,
    bounded_put,
    value_bytes,
)

#: What keys a subscription: (topic, name), or (connection, consumer id) when its
#: SUBSCRIBE was not captured.
SubKey = tuple[str | None, str] | tuple[int, int]
NameKey = tuple[str, str, int]


class Index:
    """Every stored message on its way, and what finds it; see the module docstring."""

    def __init__(self) -> None:
        self.conns: dict[int, Conn] = {}
        #: (ledger, entry) -> the stored message indexed there, or a list of them (two
        #: topics with ledgers numbered alike, or a broker's error)
        self.ids: dict[tuple[int, int], Stored | list[Stored]] = {}
        self.names: dict[NameKey, Stored] = {}
        self.subs: dict[SubKey, Sub] = {}
        #: the stored messages held, oldest first: an OrderedDict, whose oldest is found at
        #: once (a dict's first key is found past every key deleted before it, which the
        #: bound's evictions made a quadratic walk)
        self.held: OrderedDict[Stored, None] = OrderedDict()
        self.held_msgs = 0
        self.held_value_bytes = 0  # of the held messages' values (MAX_HELD_VALUE_BYTES)
        self.serial = 0
        self.evicted: list[Stored] = []
        #: names as first seen (`shared`)
        self.names_seen: dict[str, str] = {}
        #: the batched frame whose entries its rows are naming (dissector.journeys.batches)
        self.batch: ClaimedBatch | None = None
        #: who hears each end-to-end latency as the join first knows it (module rules)
        self.end_to_end: EndToEnd | None = None

    # ------------------------------------------------------------------ records

    def conn(self, conn_id: int) -> Conn:
        conn = self.conns.get(conn_id)
        if conn is None:
            conn = self.conns[conn_id] = Conn(conn_id)
        return conn

    def stored(self, topic: str | None) -> Stored:
        """A new stored message, held (and the oldest pushed out beyond the bound)."""
        self.serial += 1
        s = Stored(self.serial, topic)
        self.held[s] = None
        return s

    def shared(self, name: str) -> str:
        """`name` as first seen: a producer's name comes with each of its messages, one
        copy is kept (of the latest MAX_NAMES names)."""
        kept = self.names_seen.get(name)
        if kept is not None:
            return kept
        self.names_seen[name] = name
        if len(self.names_seen) > MAX_NAMES:
            del self.names_seen[next(iter(self.names_seen))]
        return name

    def msg(self, s: Stored, index: int | None, sequence_id: int | None = None) -> Msg:
        """Message `index` of `s`, made when new. A batch entry replaces the whole-entry
        placeholder a receipt without its SEND made (its batch was not known then)."""
        m = s.message(index)
        if m is not None:
            return m
        if index is not None and s.send_ts is None:
            placeholder = s.message(None)
            if placeholder is not None and not placeholder.deliveries():
                s.drop(None)
                self.held_msgs -= 1
        m = Msg(index, sequence_id)
        s.add(m)
        self.held_msgs += 1
        if index is not None and index >= s.span:
            s.span = index + 1
        return m

    def sub(self, key: SubKey, topic: str | None, name: str | None, sub_type: str | None) -> Sub:
        sub = self.subs.get(key)
        if sub is None:
            sub = Sub(topic, name, sub_type)
            bounded_put(self.subs, key, sub)
        elif sub_type is not None:
            sub.sub_type = sub_type
        return sub

    # ------------------------------------------------------------------ finding by id

    def at(self, key: tuple[int, int]) -> Sequence[Stored]:
        """The stored messages indexed at (ledger, entry)."""
        found = self.ids.get(key)
        if found is None:
            return ()
        return (found,) if isinstance(found, Stored) else found

    def find(self, topic: str | None, ledger: int, entry: int) -> Stored | None:
        found = self.at((ledger, entry))
        if not found:
            return None
        for s in found:
            if s.topic == topic:
                return s
        if len(found) == 1 and (topic is None or found[0].topic is None):
            s = found[0]
            if s.topic is None:
                s.topic = topic
            return s
        return None

    def alias(self, s: Stored, ledger: int, entry: int) -> None:
        """Index `s` under (ledger, entry) (its id, or a chunk's); a message seen there by
        its consumers only is `s` seen from the producer's side: merged into it."""
        key = (ledger, entry)
        ids = s.ids()
        if key in ids or len(ids) >= MAX_CHUNK_IDS:
            return
        if s.produced:
            other = self.find(s.topic, ledger, entry)
            if other is not None and other is not s and not other.produced:
                self._merge(s, other)  # moves its ids, this one among them
                if key in s.ids():
                    return
        s.add_id(key)
        found = self.ids.get(key)
        if found is None:
            self.ids[key] = s
        elif type(found) is Stored:
            self.ids[key] = [found, s]
        else:
            assert isinstance(found, list)
            found.append(s)

    def identify(self, s: Stored, ledger: int, entry: int, partition: int) -> None:
        """`s` is stored at (ledger, entry): indexed there (`alias`). Two messages stored
        under one id (a broker's error) keep their own rows; the first keeps the index."""
        if s.ledger is None:
            s.ledger, s.entry = ledger, entry
            if partition >= 0:
                s.partition = partition
        other = self.find(s.topic, ledger, entry)
        if other is not None and other is not s and (other.produced or not s.produced):
            return
        self.alias(s, ledger, entry)

    def _merge(self, into: Stored, other: Stored) -> None:
        """`other` (consumer side) is `into` (producer side): its deliveries move over. A
        whole entry's (an ack of the entry before its batch was seen) go to every entry."""
        batched = into.batch_size is not None and into.chunks is None
        for m in other.messages():
            if m.index is None and batched:  # an ack of the whole entry: no message's trace
                for mine in list(into.messages()):
                    self._fold(into, mine, m, copy=True)
            else:
                mine = self.msg(into, m.index, m.sequence_id)
                self._fold(into, mine, m, copy=False)
                if mine.trace is None:
                    mine.trace = m.trace
        if other.broker_ts is not None:
            into.broker_ts = other.broker_ts
        if into.partition < 0:
            into.partition = other.partition
        if into.chunks is None:
            into.chunks = other.chunks
        for key in list(other.ids()):
            self._unalias(other, key)
            self.alias(into, *key)
        for sub in self._subs_of(other):
            if sub.live.pop(other.serial, None) is not None:
                self.live(sub, into)
                self.settled(sub, into)
        self._rechunk(other, into)
        self._unhold(other)
        other.forget()  # nothing finds it any more (a subscription's heap names its serial)

    def _fold(self, s: Stored, mine: Msg, other: Msg, copy: bool) -> None:
        """`other`'s deliveries into `mine`, a message of `s` (the same message, found
        twice); copy: `other`'s are folded into more than one message (else they move).
        With the SEND of `s` known, an ack a delivery had stays (told then), and one it
        gains is told now (`end_to_end`, module rules)."""
        send = s.send_ts
        for d in other.deliveries():
            have = mine.delivery(d.sub)
            acked = have is not None and have.acked_ts is not None
            if have is None:
                have = d.copy() if copy else d
                mine.add(have)
            else:
                have.fold(d, keep_ack=send is not None)
            told = self.end_to_end
            if told is not None and send is not None and not acked and have.acked_ts is not None:
                told(s.topic, have.sub.name, have.acked_ts - send)

    # ------------------------------------------------------------------ finding by name

    def wait(self, conn: Conn, s: Stored, frame: Frame, producer_id: int, sequence_id: int) -> None:
        """`s` waits for the facts' answer to its SEND `frame` (one more, for a chunk of a
        message already waiting), and for a delivery under (topic, producer name, sequence
        id)."""
        key = (conn.conn_id, producer_id, sequence_id)
        if s.waiting != key:
            self.unwait(s)
            s.waiting = key
        conn.sends[frame.stream_offset] = s
        s.due += 1
        if s.topic is not None and s.producer_name is not None and s.sequence_id is not None:
            bounded_put(self.names, (s.topic, s.producer_name, s.sequence_id), s)

    @staticmethod
    def answered(conn: Conn, send: int | None) -> Stored | None:
        """The stored message still waiting for the answer to the SEND at stream offset
        `send` (None: the facts found no SEND for it); waiting no more when it was its
        last due."""
        s = None if send is None else conn.sends.pop(send, None)
        if s is None or s.waiting is None or s.waiting[0] != conn.conn_id:
            return None
        s.due -= 1
        if s.due <= 0:
            s.waiting, s.due = None, 0
        return s

    def unwait(self, s: Stored) -> None:
        """`s` waits for no receipt any more (its SENDs' answers, when they come, find
        nothing: `answered`)."""
        s.waiting, s.due = None, 0
        self.unname(s)

    def unname(self, s: Stored) -> None:
        if s.topic is not None and s.producer_name is not None and s.sequence_id is not None:
            key = (s.topic, s.producer_name, s.sequence_id)
            if self.names.get(key) is s:
                del self.names[key]

    def by_name(self, topic: str | None, name: str | None, sequence_id: int) -> Stored | None:
        if topic is None or name is None:
            return None
        return self.names.get((topic, name, sequence_id))

    # ------------------------------------------------------------------ deliveries and acks

    def live(self, sub: Sub, s: Stored) -> None:
        """`s` has entries delivered to `sub` and not acknowledged."""
        if s.serial in sub.live:
            return
        sub.live[s.serial] = s
        if s.ledger is not None and s.entry is not None:
            heapq.heappush(sub.heap, (s.ledger, s.entry, s.serial))
        self._compact(sub)

    def settled(self, sub: Sub, s: Stored) -> None:
        """After an ack: `s` leaves the subscription's live set when all its messages
        delivered there are acknowledged."""
        for m in s.messages():
            d = m.delivery(sub)
            if d is not None and d.acked_ts is None:
                return
        if sub.live.pop(s.serial, None) is not None:
            self._compact(sub)

    @staticmethod
    def _compact(sub: Sub) -> None:
        """Keep the heap within 1.5 times what is live (plus 64): acked one by one, or
        merged into the producer's record, its entries are only skipped when they come up,
        so it is rebuilt now and then (after at least half as many pushes as it keeps: the
        rebuilds cost a constant per push)."""
        if len(sub.heap) <= len(sub.live) * 3 // 2 + 64:
            return
        sub.heap = []
        for x in sub.live.values():
            if x.ledger is not None and x.entry is not None:
                sub.heap.append((x.ledger, x.entry, x.serial))
        heapq.heapify(sub.heap)

    def below(self, sub: Sub, ledger: int, entry: int) -> Iterator[Stored]:
        """The live stored messages of `sub` with an id before (ledger, entry), taken out of
        its heap (a cumulative ack acknowledges them)."""
        heap = sub.heap
        while heap and (heap[0][0], heap[0][1]) < (ledger, entry):
            s = sub.live.get(heapq.heappop(heap)[2])
            if s is not None:
                yield s

    @staticmethod
    def delivery(m: Msg, sub: Sub, conn_id: int, consumer_id: int, name: str | None) -> Delivery:
        d = m.delivery(sub)
        if d is None:
            d = Delivery(sub, conn_id, consumer_id, name)
            m.add(d)
        return d

    # ------------------------------------------------------------------ the bound

    def check_bound(self) -> None:
        """Beyond MAX_HELD messages or MAX_HELD_VALUE_BYTES of their values, push the oldest
        stored messages out (`take_evicted`)."""
        while (self.held_msgs > MAX_HELD or self.held_value_bytes > MAX_HELD_VALUE_BYTES) and len(
            self.held
        ) > 1:
            s = next(iter(self.held))
            self._unindex(s)
            s.evicted = True
            self.evicted.append(s)

    def take_evicted(self) -> list[Stored]:
        out, self.evicted = self.evicted, []
        return out

    def drain(self) -> list[Stored]:
        """Every stored message still held, in the order first seen; the index is emptied."""
        out = list(self.held)
        self.held.clear()
        self.held_msgs = self.held_value_bytes = 0
        self.ids.clear()
        self.names.clear()
        for sub in self.subs.values():  # nothing but `out` holds a stored message now
            sub.live.clear()
            sub.heap.clear()
        return out

    def _unindex(self, s: Stored) -> None:
        self.unwait(s)
        for key in list(s.ids()):
            self._unalias(s, key)
        for sub in self._subs_of(s):
            sub.live.pop(s.serial, None)
        self._rechunk(s, None)  # a chunked message still being sent or delivered
        self._unhold(s)

    def inflight(self, conn: Conn, receiving: bool, key: tuple[int, str], s: Stored) -> None:
        """The chunked message `s` waits for its next chunk on `conn` under `key`."""
        bounded_put(conn.receiving if receiving else conn.sending, key, s)
        places = s.inflight
        if places is None:
            places = s.inflight = []
        if len(places) >= 8 and not len(places) & (len(places) - 1):  # at 8, 16, 32...
            places[:] = [p for p in places if self._awaits(p, s)]  # those gone are dropped
        places.append((conn.conn_id, receiving, key))

    def _awaits(self, place: tuple[int, bool, tuple[int, str]], s: Stored) -> bool:
        conn = self.conns.get(place[0])
        table = None if conn is None else conn.receiving if place[1] else conn.sending
        return table is not None and table.get(place[2]) is s

    def _rechunk(self, s: Stored, into: Stored | None) -> None:
        """The chunked message `s` is `into` now (None: forgotten) where chunks await it."""
        for place in s.inflight or ():
            if self._awaits(place, s):
                conn_id, receiving, key = place
                table = self.conns[conn_id].receiving if receiving else self.conns[conn_id].sending
                if into is None:
                    del table[key]
                else:
                    self.inflight(self.conns[conn_id], receiving, key, into)
        s.inflight = None

    def _unhold(self, s: Stored) -> None:
        if self.held.pop(s, "gone") is None:
            self.held_msgs -= s.count()
            self.held_value_bytes -= value_bytes(s)

    def _unalias(self, s: Stored, key: tuple[int, int]) -> None:
        found = self.ids.get(key)
        if found is s:
            del self.ids[key]
        elif isinstance(found, list) and s in found:
            found.remove(s)
            if len(found) == 1:
                self.ids[key] = found[0]
        s.drop_id(key)

    @staticmethod
    def _subs_of(s: Stored) -> set[Sub]:
        return {d.sub for m in s.messages() for d in m.deliveries()}
