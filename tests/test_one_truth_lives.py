"""One truth of a producer's and consumer's life: the diagnoses' view (dissector.diagnose's
per-connection state, made from the `Lifecycle` facts) and the entities' (the `Entity`
records the entities table is made of, `Conversation.info.entities`) say the same thing of
every producer and consumer a connection declared, on every bundled sample and crafted
capture (tests/support/truth_scenes.py).

Each side is computed on its own: the entities from the facts' entity steps, the diagnoses
from the facts they are fed (the event API's, as a findings read makes them). Their claims:
the same topic (and subscription), and open exactly while the entity is pending or created
(failed: its PRODUCER or SUBSCRIBE answered ERROR; closed by the client or the broker).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dissector.diagnose import Diagnoser
from dissector.diagnose.state import ConnState
from dissector.events import Conversation, Entity, EntityKind, EntityState, Lifecycle, LifeStep
from dissector.read import iter_events
from tests.support.truth_scenes import corpus

OPEN = frozenset({EntityState.PENDING, EntityState.CREATED})


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return corpus(tmp_path_factory.mktemp("one-truth-lives"))


def _disagreements(conn: ConnState, entities: list[Entity]) -> list[str]:
    """How the diagnoses' producers and consumers of `conn` differ from its entities (the
    live one of each id: the last of its id)."""
    live = {(e.kind, e.entity_id): e for e in entities}
    bad = []
    for (kind, eid), e in live.items():
        producer = kind is EntityKind.PRODUCER
        seen = (conn.producers if producer else conn.consumers).get(eid)
        if seen is None:
            bad.append(f"conn {conn.conn_id} {kind} {eid}: no diagnoses' state")
            continue
        subscription = None if producer else getattr(seen, "subscription", None)
        if seen.topic != e.topic or (not producer and subscription != e.subscription):
            bad.append(f"conn {conn.conn_id} {kind} {eid}: {seen.topic} against {e.topic}")
        if seen.open != (e.state in OPEN):
            bad.append(f"conn {conn.conn_id} {kind} {eid}: open {seen.open}, {e.state}")
    return bad


def test_the_diagnoses_and_the_entities_agree_on_every_life(captures: dict[str, Path]) -> None:
    bad: list[str] = []
    compared = steps = 0
    seen_steps: set[LifeStep] = set()
    for name, path in captures.items():
        engine = Diagnoser()
        for _, ev in iter_events([path]):
            if type(ev) is Lifecycle:
                steps += 1
                seen_steps.add(ev.step)
            if type(ev) is Conversation and ev.conn_id in engine.conns:
                entities = ev.info.entities
                compared += len(entities)
                bad += [
                    f"{name}: {line}" for line in _disagreements(engine.conns[ev.conn_id], entities)
                ]
            engine.feed(ev)
    assert not bad, "\n".join(bad)
    assert compared >= 20 and steps >= compared  # each entity declared, most answered
    # the corpus has producers created, failed and closed by the client
    assert {LifeStep.DECLARED, LifeStep.CREATED, LifeStep.CLOSED_BY_CLIENT} <= seen_steps
