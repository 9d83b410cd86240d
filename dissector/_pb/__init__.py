"""Generated protobuf bindings (do not edit): regenerate with `make proto`.

Only dissector.wire imports from here.
"""
