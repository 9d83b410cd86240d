"""Message values: payloads decoded by the schemas the capture itself carries. Sans-IO.

Input: the schema facts of every connection (`SchemaTracker.learn`: dissector.facts makes
them from the schema-bearing commands), then each
message's payload with its metadata's schema_version and key fields.
Output: for each message, a `Resolution` (which schema, how chosen) and a `DecodedValue`
(JSON text, or the reason there is none); `redact` masks the fields `--redact-fields` names;
`Values.cells` puts them together as the row's `ValueCells` (value, value_schema,
value_error): the one call the tables make.
Rule: nothing here runs unless values are asked for (payloads are the user's data); every
map, nesting and size is bounded by a named bound, and any bytes give a value or an error
string, never an exception. docs/values.md has the design and the interface for the tables.
"""

from dissector.values.cells import ValueCells, Values
from dissector.values.decode import KeyFields, ValueDecoder
from dissector.values.model import DecodedValue, SchemaInfo, make_schema
from dissector.values.redact import parse_redact_fields, redact, redact_json
from dissector.values.schemas import Resolution, SchemaTracker

__all__ = [
    "DecodedValue",
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
