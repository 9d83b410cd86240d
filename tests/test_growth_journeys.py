"""The journeys' growth families make what they say (fuzz.growth_journeys; issue 42).

Input: the families' frame makers at a small n.
Output: pass or fail: each input holds n of its thing, counted from the frames decoded
(dissector.pulsar.framing) and their own fields, not from the journeys they make.
Rule: no wall-clock time (`make fuzz-growth` judges the growth).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from dissector.events import Frame
from dissector.pulsar.framing import FrameDecoder
from dissector.pulsar.wire import SingleMessageMetadata
from fuzz import growth, growth_journeys
from fuzz.growth_journeys import CLAIM, ack_claims, batch_claims, deliver_noack


def _frames(made: Iterator[tuple[int, bytes]]) -> list[Frame]:
    out: list[Frame] = []
    for _, data in made:
        out += [f for f in FrameDecoder().feed(data) if isinstance(f, Frame)]
    return out


def test_batch_claims_are_n_messages_claiming_more_than_they_hold() -> None:
    frames = _frames(batch_claims(7))
    assert [f.command_name for f in frames] == ["MESSAGE"] * 7
    for f in frames:
        assert f.metadata.num_messages_in_batch == CLAIM
        assert f.payload is not None
        size = int.from_bytes(bytes(f.payload[:4]), "big")  # one entry, then nothing
        single = SingleMessageMetadata.FromString(bytes(f.payload[4 : 4 + size]))
        assert len(f.payload) == 4 + size + single.payload_size


def test_ack_claims_are_n_batch_acks_of_one_word() -> None:
    frames = _frames(ack_claims(5))
    assert [f.command_name for f in frames] == ["ACK"] * 5
    assert {(tuple(m.ack_set), m.batch_size) for f in frames for m in f.body.message_id} == {
        ((1,), CLAIM)
    }


def test_deliver_noack_is_n_deliveries_and_no_ack() -> None:
    counts = Counter(f.command_name for f in _frames(deliver_noack(9)))
    assert counts["SEND"] == counts["SEND_RECEIPT"] == counts["MESSAGE"] == 9
    assert counts["ACK"] == 0


def test_the_families_are_in_the_growth_check(tmp_path: Path) -> None:
    names = {f.name for f in growth.FAMILIES}
    assert {f.name for f in growth_journeys.FAMILIES} <= names
    made = growth_journeys.make_deliver_noack(3, tmp_path)
    assert Path(made.captures[0]).stat().st_size > 0


def test_deliver_noack_measures_the_clis_streamed_read_in_one_process(tmp_path: Path) -> None:
    """The product a user runs: `read` to a file, one process (the measured one)."""
    for make in (growth_journeys.make_deliver_noack, growth_journeys.make_deliver_noack_all):
        argv = make(3, tmp_path).argv
        assert argv is not None and argv[0] == "read" and "-o" in argv
        assert argv[argv.index("-j") + 1] == "1"
