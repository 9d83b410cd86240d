"""Tests of dissector/net."""
