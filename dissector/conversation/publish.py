"""A Pulsar connection's decoded events, published: frames with their topics, pairs, messages.

Input: the events a connection's frame decoders made (`Frame`, `FrameRun`, `Anomaly`), once
the connection is known to be Pulsar; its `facts.ConversationState` and the run's
`messages.MessageExtractor` (or None: no application messages wanted).
Output: the events to publish, appended to the caller's list: each frame with its topic and
then the pairs it completes and the messages it carries, each run with its frames' topics,
anomalies as they are; the count of anomalies among them (the connection's row counts them).
Rule: one conversation state sees every frame of its connection, in stream order, once; a
frame's topic is set by building the tuple (no per-frame `_replace`). With values asked for
(`messages.values`), the schema facts the state made of a frame go to it: it learns the
schemas, and the schema anomalies it finds follow their frame; when they are published
(`state.schemas.published`: the findings with values asked for) the facts follow too.
"""

from __future__ import annotations

from collections.abc import Sequence

from dissector.events import Anomaly, Frame, FrameRun, PipelineEvent
from dissector.facts import ConversationState
from dissector.pulsar.messages import MessageExtractor
from dissector.pulsar.wire import PAYLOAD_TYPES

#: A Frame with its topic set, built from a tuple: NamedTuple._replace costs several times
#: more, once per frame. `topic` is Frame's last field, `topics` FrameRun's.
_new_frame = tuple.__new__
_TOPIC = Frame._fields.index("topic")
assert len(Frame._fields) - 1 == _TOPIC
_TOPICS = FrameRun._fields.index("topics")
assert len(FrameRun._fields) - 1 == _TOPICS


def publish(
    state: ConversationState,
    messages: MessageExtractor | None,
    events: Sequence[PipelineEvent],
    out: list[PipelineEvent],
) -> int:
    """Append `events` as published to `out`; return how many anomalies were appended."""
    anomalies = 0
    for ev in events:
        if type(ev) is Frame:
            topic, pairs = state.observe(ev)
            if topic is not None:
                ev = _new_frame(Frame, (*ev[:_TOPIC], topic))  # ev._replace(topic=...)
            out.append(ev)
            if pairs:
                out.extend(pairs)
            if messages is not None:
                if ev.command_type in PAYLOAD_TYPES:
                    for item in messages.feed(ev):
                        if type(item) is Anomaly:
                            anomalies += 1
                        out.append(item)
                elif messages.values is not None:
                    told = state.schemas.take()  # the frame's schema facts
                    if told:
                        faults = messages.values.learn(told, ev)  # schema.* anomalies
                        anomalies += len(faults)
                        out.extend(faults)
                        if state.schemas.published:
                            out.extend(told)
            elif state.schemas.told:  # schema facts as events, no payload decoding
                out.extend(state.schemas.take())
        elif type(ev) is FrameRun:
            out.append(_new_frame(FrameRun, (*ev[:_TOPICS], state.observe_run(ev))))
        else:
            if type(ev) is Anomaly:
                anomalies += 1
            out.append(ev)
    return anomalies
