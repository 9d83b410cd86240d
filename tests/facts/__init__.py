"""Tests of dissector/facts: the protocol-facts state machine."""
