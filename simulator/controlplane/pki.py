"""The control plane's certificates: one CA, serving certificates and client certificates.

Why our own PKI: the API server authenticates every component by client certificate (the common
name is the user, the organisations are the groups), the way kubeadm sets a cluster up, and it
calls admission webhooks over TLS only. Everything is made with ``cryptography``, once per
workdir, with ECDSA P-256 keys (fast to generate; Kubernetes accepts them everywhere) and an RSA
key for service-account tokens (RS256 is what every token consumer expects).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALID = dt.timedelta(days=365)


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _name(common_name: str, organisations: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organisations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


class Authority:
    """A CA in ``directory`` (created on first use, reused after) that signs leaf certificates."""

    def __init__(self, directory: Path, name: str = "gpufabric-controlplane-ca") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.pair = CertPair(directory / "ca.crt", directory / "ca.key")
        if self.pair.cert.is_file() and self.pair.key.is_file():
            self._key = serialization.load_pem_private_key(self.pair.key.read_bytes(), password=None)
            self._cert = x509.load_pem_x509_certificate(self.pair.cert.read_bytes())
            return
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        subject = _name(name)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALID * 10)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        _write_key(self.pair.key, key)
        self.pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self._key, self._cert = key, cert

    @property
    def pem(self) -> bytes:
        return self.pair.cert.read_bytes()

    def issue(
        self,
        stem: str,
        common_name: str,
        *,
        organisations: tuple[str, ...] = (),
        dns_names: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
        server: bool = False,
        client: bool = False,
    ) -> CertPair:
        """Write ``<stem>.crt``/``<stem>.key`` signed by this CA, or reuse them if present."""
        pair = CertPair(self.directory / f"{stem}.crt", self.directory / f"{stem}.key")
        if pair.cert.is_file() and pair.key.is_file():
            return pair
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        )
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organisations))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._cert.public_key()),  # type: ignore[arg-type]
                critical=False,
            )
        )
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())  # type: ignore[arg-type]
        _write_key(pair.key, key)
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return pair


def service_account_keys(directory: Path) -> CertPair:
    """The RSA key pair the API server signs service-account tokens with (``sa.key``/``sa.pub``)."""
    pair = CertPair(directory / "sa.pub", directory / "sa.key")
    if pair.cert.is_file() and pair.key.is_file():
        return pair
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(pair.key, key)
    pair.cert.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return pair
