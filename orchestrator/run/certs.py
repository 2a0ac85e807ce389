"""A certificate made for one run: a throw-away CA and a server certificate it signed.

HTTPS servers (`tls: true`) get `cert.pem` and `key.pem`, the load generator trusts `ca.pem`.
Nothing is ever committed or reused: `RunCertificate.make(dir)` writes fresh keys (0600) into
a private directory (0700) of the run, and `remove()` deletes them when the run ends. The
certificate names localhost, 127.0.0.1 and ::1, plus any host given.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

NAMES = ("localhost", "127.0.0.1", "::1")
VALID_DAYS = 2


def _write_private(path: Path, data: bytes) -> None:
    """Write data to a new file readable by its owner only (the mode set at creation)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


@dataclass(frozen=True)
class RunCertificate:
    """Where one run's certificate lives: ca_file (for clients), cert_file and key_file (for
    the server), all inside `directory`."""

    directory: Path
    ca_file: Path
    cert_file: Path
    key_file: Path

    @classmethod
    def make(cls, parent: str | Path | None = None, hosts: tuple[str, ...] = ()) -> RunCertificate:
        """A new CA and a server certificate for NAMES + hosts, in a fresh private directory
        under parent (default: the system's temporary directory). EC P-256 keys, valid for
        VALID_DAYS from an hour ago."""
        from cryptography import x509  # cryptography: only when a run has an HTTPS server
        from cryptography.hazmat.primitives import hashes, serialization  # (as above)
        from cryptography.hazmat.primitives.asymmetric import ec  # (as above)
        from cryptography.x509.oid import NameOID  # (as above)

        directory = Path(tempfile.mkdtemp(prefix="perfctl-tls-", dir=parent))  # 0700
        now = datetime.datetime.now(datetime.UTC)
        start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=VALID_DAYS)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "perfctl run CA")])
        ca = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
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
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )
        key = ec.generate_private_key(ec.SECP256R1())
        sans: list[x509.GeneralName] = []
        for name in dict.fromkeys(NAMES + tuple(hosts)):
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                sans.append(x509.DNSName(name))
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        pem = serialization.Encoding.PEM
        out = cls(directory, directory / "ca.pem", directory / "cert.pem", directory / "key.pem")
        _write_private(out.ca_file, ca.public_bytes(pem))
        _write_private(out.cert_file, cert.public_bytes(pem))
        _write_private(
            out.key_file,
            key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
        )
        return out

    def remove(self) -> None:
        """Delete the directory and its keys (nothing if already gone)."""
        shutil.rmtree(self.directory, ignore_errors=True)
