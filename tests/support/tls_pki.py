"""Moved to fuzz/tls_pki.py (with fuzz/memory_tls.py, which the fuzz campaign uses: fuzz/ does
not import tests/); this name stays for tests written against it. Import from fuzz.tls_pki."""

from fuzz.tls_pki import ORGANIZATION, TestPki, make_pki, server_context

__all__ = ["ORGANIZATION", "TestPki", "make_pki", "server_context"]
