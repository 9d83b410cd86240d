"""Diagnoses: what went wrong on the wire, in words, with the evidence. Sans-IO.

Input: the pipeline's events (frames, anomalies, conversations opening and ending).
Output: `Finding` records (the `findings` table), made by `Diagnoser` (engine.py) from
rules kept per connection (connection.py, requests.py, producers.py, consumers.py,
chunks.py, over the state of state.py) and across connections (spanning.py,
subscriptions.py).
Rule: codes, severities, hints and thresholds come from one registry (dissector.findings);
a rule never fires on what the capture cannot know (a connection whose start or bytes are
missing gets no finding that needs them). Nothing here runs unless findings are asked for.
"""

from dissector.diagnose.engine import Diagnoser

__all__ = ["Diagnoser"]
