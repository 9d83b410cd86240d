"""A throwaway certificate authority and server certificate for TLS tests and fuzzing.

Input:  a directory and the server's host name (default ``localhost``).
Output: ``TestPki``: PEM files (CA certificate, server certificate and key) and the
        server certificate's subject, issuer and expiry as they were built (the values a
        dissector must report), plus ``server_context``: an ``ssl.SSLContext`` serving
        that certificate, writing an NSS key log, optionally capped at a TLS version.
Rule:   the ``cryptography`` package builds the certificates (a runtime dependency of the
        dissector anyway); keys are fresh per call and never leave the directory.  The
        server certificate names the host in its subjectAltName (what the client's
        hostname check reads) and in its CN; validity starts a minute in the past (clock
        skew) and ends on a whole second (certificates carry no fraction).
"""

from __future__ import annotations

import datetime as dt
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["TestPki", "make_pki", "server_context"]

ORGANIZATION = "pulsar-dissector tests"


@dataclass(frozen=True)
class TestPki:
    """The files and the facts of one generated CA + server certificate."""

    ca_path: Path
    cert_path: Path
    key_path: Path
    host: str
    subject: x509.Name  # the server certificate's, as built
    issuer: x509.Name  # = the CA's subject
    not_before: dt.datetime  # UTC, aware
    not_after: dt.datetime  # UTC, aware, whole seconds
    serial: int


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "CH"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def make_pki(directory: Path, host: str = "localhost", *, days: int = 30) -> TestPki:
    """Write ``ca.pem``, ``server.pem`` and ``server.key`` into ``directory``."""
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    not_before = now - dt.timedelta(minutes=1)
    not_after = now + dt.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("pulsar-dissector test CA")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    # RSA for the server: the common choice in Pulsar deployments (ECDHE-RSA suites in 1.2).
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = _name(host)
    serial = x509.random_serial_number()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    ca_path = directory / "ca.pem"
    cert_path = directory / "server.pem"
    key_path = directory / "server.key"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return TestPki(
        ca_path=ca_path,
        cert_path=cert_path,
        key_path=key_path,
        host=host,
        subject=subject,
        issuer=ca_name,
        not_before=not_before,
        not_after=not_after,
        serial=serial,
    )


def server_context(
    pki: TestPki,
    keylog: Path,
    *,
    maximum_version: ssl.TLSVersion | None = None,
    ciphers: str | None = None,
) -> ssl.SSLContext:
    """A TLS server context for ``pki``'s certificate writing an NSS key log to ``keylog``.

    ``ciphers`` (an OpenSSL cipher list) restricts the TLS 1.2 suites; TLS 1.3 suites
    are OpenSSL's defaults.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.cert_path, pki.key_path)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if maximum_version is not None:
        context.maximum_version = maximum_version
    if ciphers is not None:
        context.set_ciphers(ciphers)
    context.keylog_filename = str(keylog)
    return context
