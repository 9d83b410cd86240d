"""Moved to fuzz/memory_tls.py (the fuzz campaign's `tls` level uses it, and fuzz/ does not
import tests/); this name stays for tests written against it. Import from fuzz.memory_tls."""

from fuzz.memory_tls import (
    ISSUER,
    OP_NO_ENCRYPT_THEN_MAC,
    SNI,
    SUBJECT,
    TlsRun,
    run_tls,
)

__all__ = ["ISSUER", "OP_NO_ENCRYPT_THEN_MAC", "SNI", "SUBJECT", "TlsRun", "run_tls"]
