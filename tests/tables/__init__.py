"""Tests of dissector/tables."""
