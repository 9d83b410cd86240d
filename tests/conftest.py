"""pytest configuration: Hypothesis profiles (no per-example deadline: CI machines vary)."""

from hypothesis import settings

settings.register_profile("default", deadline=None)
settings.load_profile("default")
