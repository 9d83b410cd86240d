"""Tests of dissector/flow."""
