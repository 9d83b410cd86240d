"""Tests of dissector/frontends."""
