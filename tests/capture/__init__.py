"""Tests of dissector/capture."""
