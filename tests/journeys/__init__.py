"""Tests of dissector/journeys."""
