"""The cluster's TLS certificates: one CA of the cluster's own, and a certificate signed by it for
the scheduler, each worker host and the client (perfctl), for Dask's mutual TLS
(distributed.security.Security: every end shows a certificate of that CA, or is refused).

`write_set(dir, hosts)` makes them (`perfctl cluster certs DIR --hosts h1,h2`, and the local
cluster for each run). Files, PEM: ca.pem (the CA certificate, for everyone), ca-key.pem (keep
it off the cluster: whoever has it can make certificates the cluster trusts), and NAME.pem with
NAME-key.pem for `scheduler`, `client` and each host. Keys are written 0600 in a 0700 directory;
a file is never overwritten. Keys are ECDSA P-256; certificates are valid for CERT_DAYS. Dask
does not check host names (a dedicated CA and IP addresses are the norm), but each certificate
names its host as subjectAltName so that other tools can.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ..errors import PerfctlError

CERT_DAYS = 825  # the longest that common TLS clients accept for a leaf certificate
CA_DAYS = 3650
ROLES = ("scheduler", "client")


@dataclass(frozen=True)
class TlsFiles:
    """The files one end of the cluster needs: the CA certificate, its own certificate, its
    key."""

    ca: Path
    cert: Path
    key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "perfctl cluster"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, mode: int) -> None:
    """path created with mode (never widened by the umask, never an existing file)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, mode)


def _cert(subject: str, issuer: x509.Name, public_key, signer, days: int, ca: bool, sans):
    now = datetime.datetime.now(datetime.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # clocks a little behind
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
    )
    if ca:
        b = b.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), True
        )
    else:
        b = b.add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        if sans:
            b = b.add_extension(x509.SubjectAlternativeName([_san(h) for h in sans]), False)
    return b.sign(signer, hashes.SHA256())


def write_set(directory: Path, hosts: list[str], addresses: dict[str, str] | None = None) -> dict:
    """A CA and certificates for `scheduler`, `client` and every host, into directory (created
    0700; must hold none of these files yet). addresses: name -> an address to put in its
    subjectAltName besides its name. Returns name -> TlsFiles."""
    names = [*ROLES, *hosts]
    bad = [h for h in hosts if h in ROLES or h == "ca" or not h or "/" in h]
    if bad or len(set(names)) != len(names):
        raise PerfctlError(
            f"host names {hosts}: each must be unique, without '/', and none of ca, "
            f"{', '.join(ROLES)}. Fix: give the workers' own names, e.g. --hosts h1,h2."
        )
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    taken = [f"{n}{end}" for n in ["ca", *names] for end in (".pem", "-key.pem")]
    taken = [f for f in taken if (directory / f).exists()]
    if taken:
        raise PerfctlError(
            f"{directory}: holds {', '.join(sorted(taken))} already; perfctl never overwrites "
            "a certificate or key. Fix: choose an empty directory, or remove those files."
        )
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _cert(
        "perfctl cluster CA",
        _name("perfctl cluster CA"),
        ca_key.public_key(),
        ca_key,
        CA_DAYS,
        True,
        [],
    )
    ca_path = directory / "ca.pem"
    _write(directory / "ca-key.pem", _key_pem(ca_key), 0o600)
    _write(ca_path, ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)
    out = {}
    for name in names:
        key = ec.generate_private_key(ec.SECP256R1())
        sans = [name] + ([addresses[name]] if addresses and name in addresses else [])
        cert = _cert(name, ca_cert.subject, key.public_key(), ca_key, CERT_DAYS, False, sans)
        files = TlsFiles(ca_path, directory / f"{name}.pem", directory / f"{name}-key.pem")
        _write(files.key, _key_pem(key), 0o600)
        _write(files.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
        out[name] = files
    return out
