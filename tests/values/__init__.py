"""Tests of dissector/values."""
