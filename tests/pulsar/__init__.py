"""Tests of dissector/pulsar."""
