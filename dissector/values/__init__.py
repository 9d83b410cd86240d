"""Message values: payloads decoded by the schemas the capture itself carries. Sans-IO.

Input: the schema-bearing commands of every connection (`SchemaTracker.feed`), then each
message's payload with its metadata's schema_version and key fields.
Output: for each message, a `Resolution` (which schema, how chosen: the `value_schema`
column) and a `Decoded` (JSON text for `value`, or the reason for `value_error`); `redact`
masks the fields `--redact-fields` names.
Rule: nothing here runs unless values are asked for (payloads are the user's data); every
map, nesting and size is bounded by a named bound, and any bytes give a value or an error
string, never an exception. docs/values.md has the design and the interface for the tables.
"""

from dissector.values.cells import ValueCells, Values
from dissector.values.decode import KeyFields, ValueDecoder
from dissector.values.model import Decoded, SchemaInfo, make_schema
from dissector.values.redact import parse_redact_fields, redact, redact_json
from dissector.values.schemas import Resolution, SchemaTracker

__all__ = [
    "Decoded",
    "KeyFields",
    "Resolution",
    "SchemaInfo",
    "SchemaTracker",
    "ValueCells",
    "ValueDecoder",
    "Values",
    "make_schema",
    "parse_redact_fields",
    "redact",
    "redact_json",
]
