"""Where the two brokers of the golden captures differ on the wire, as their sources say.

Input:  a capture's manifest (tests/support/capture.py writes ``broker.implementation`` and
        the broker's version under ``versions``, the committed ones in pcaps/ included).
Output: what the golden tests expect of that broker: the checksum verdict of its MESSAGE
        frames, whether it closes a consumer that seeks, its CONNECTED ``server_version``.
Rule:   expectations come from the peers' documented behaviour (/work/shared/PEERS.md,
        Apache Pulsar's ``Commands.newConnected``: ``"Pulsar Server" + version``), never
        from our tables. pulsar-lite writes MESSAGE frames without magic 0x0e01 and CRC32C;
        Apache's broker relays each stored entry with the producer's checksum, and closes
        a consumer that seeks (``Consumer.disconnect`` on a cursor reset).
"""

from __future__ import annotations

from typing import Any

LITE, APACHE = "pulsar-lite", "apache-pulsar"

#: implementation -> the `checksum` column of every MESSAGE frame it sends
MESSAGE_CHECKSUM = {LITE: "absent", APACHE: "valid"}
#: implementation -> whether a SEEK makes it close the consumer (the client then subscribes
#: again); pulsar-lite answers SUCCESS and goes on (PEERS.md, peers.run_seek_scenario)
CLOSES_CONSUMER_ON_SEEK = {LITE: False, APACHE: True}


def implementation(manifest: dict[str, Any]) -> str:
    """The broker a manifest was recorded against."""
    return str(manifest["broker"]["implementation"])


def server_version_ok(manifest: dict[str, Any], server_version: str) -> bool:
    """Whether CONNECTED's server_version is the one that broker reports."""
    if implementation(manifest) == APACHE:
        return server_version == f"Pulsar Server{manifest['versions'][APACHE]}"
    return server_version.startswith("Pulsar-Lite")
