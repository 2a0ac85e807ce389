"""A certificate made for one run: a throw-away CA and a server certificate it signed.

HTTPS servers (`tls: true`) get `cert.pem` and `key.pem`, the load generator trusts `ca.pem`.
Nothing is ever committed or reused: `RunCertificate.make(dir)` writes fresh keys (0600) into
a private directory (0700) of the run, and `remove()` deletes them when the run ends. The
certificate names localhost, 127.0.0.1 and ::1, plus any host given.
"""

from __future__ import annotations

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
        from . import tls_keys  # cryptography: only when a run has an HTTPS server

        directory = Path(tempfile.mkdtemp(prefix="perfctl-tls-", dir=parent))  # 0700
        ca_pem, cert_pem, key_pem = tls_keys.ca_and_server(NAMES + tuple(hosts), VALID_DAYS)
        out = cls(directory, directory / "ca.pem", directory / "cert.pem", directory / "key.pem")
        _write_private(out.ca_file, ca_pem)
        _write_private(out.cert_file, cert_pem)
        _write_private(out.key_file, key_pem)
        return out

    def remove(self) -> None:
        """Delete the directory and its keys (nothing if already gone)."""
        shutil.rmtree(self.directory, ignore_errors=True)
