"""Record the sample raw streams in pcaps/streams/ from real peers on loopback.

Input: none (starts pulsar-lite and drives the official pulsar-client through the recording
proxy of tests/support/peers.py). Output: one file of raw bytes per connection direction,
plus the client's manifest of what it did.
Rule: the bytes are exactly what crossed the proxy (its LOOKUP_RESPONSE rewrite included, so
that the client stays on the recorded connection).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.peers import record, run_scenario  # noqa: E402

OUT = ROOT / "pcaps" / "streams"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    connections, manifest = record(run_scenario, messages=10, batching=True)
    for i, conn in enumerate(connections):
        stem = "produce_consume" if i == 0 else f"produce_consume.{i}"
        (OUT / f"{stem}.client_to_broker.bin").write_bytes(conn.client_to_broker)
        (OUT / f"{stem}.broker_to_client.bin").write_bytes(conn.broker_to_client)
    (OUT / "produce_consume.manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {len(connections)} connection(s) to {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
