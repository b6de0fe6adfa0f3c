"""TLS material for the UFM twin: a CA made fresh for each twin run and the server certificate it signs.

Real UFM answers over HTTPS only, so the twin does too, and the connector has to verify it the way
it would verify a site's UFM: against a CA named in the site file (``ca_file``). The CA's private
key never reaches the disk; only ``ca.crt`` (what a client trusts) and the server's
``server.crt``/``server.key`` are written. ``validity`` makes a server certificate that has
expired or is not valid yet, for the tests of the connector's certificate checks.

Not ``simulator.controlplane.pki.Authority``: that one reuses the files it finds and always
issues leaves valid for a year, while this twin wants a new CA per run and certificates outside
their validity window.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

Validity = Literal["valid", "expired", "not_yet_valid"]
VALIDITIES: tuple[Validity, ...] = ("valid", "expired", "not_yet_valid")
HOSTS = ("127.0.0.1", "localhost")  # the twin listens on loopback; clients may name it either way

# The server certificate's window relative to now, per validity (the CA itself is always valid,
# so a failure is about the server certificate alone).
_WINDOWS: dict[Validity, tuple[dt.timedelta, dt.timedelta]] = {
    "valid": (-dt.timedelta(minutes=5), dt.timedelta(days=30)),
    "expired": (-dt.timedelta(days=30), -dt.timedelta(days=1)),
    "not_yet_valid": (dt.timedelta(days=1), dt.timedelta(days=30)),
}


@dataclass(frozen=True)
class TwinTls:
    ca_cert: Path  # what the site file's ca_file points at
    cert: Path  # the server certificate (SAN: 127.0.0.1, localhost)
    key: Path


def _key_usage(*, sign_certs: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=sign_certs,
        crl_sign=sign_certs,
        encipher_only=False,
        decipher_only=False,
    )


def issue_twin_tls(
    directory: Path,
    *,
    validity: Validity = "valid",
    hosts: Sequence[str] = HOSTS,
    ca_name: str = "gpufabric UFM twin CA",
) -> TwinTls:
    """A new CA and a server certificate for ``hosts`` in ``directory`` (files replaced if present)."""
    if validity not in _WINDOWS:
        raise ValueError(f"validity must be one of {VALIDITIES}, not {validity!r}")
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_subject)
        .issuer_name(ca_subject)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=60))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(sign_certs=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = _WINDOWS[validity]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + start)
        .not_valid_after(now + end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(sign_certs=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    tls = TwinTls(directory / "ca.crt", directory / "server.crt", directory / "server.key")
    tls.key.unlink(missing_ok=True)  # a new file, so it is created 0600 and never readable by others
    with os.fdopen(os.open(tls.key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
        out.write(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    tls.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    tls.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    return tls
