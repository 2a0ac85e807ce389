"""HTTPS for the load generator: the client's TLS context, session resumption and the probe.

TLS is a transport chosen once per connection at connect time (Worker.open_connection hands
the context to loop.create_connection); the plain-HTTP path never looks at anything here.

Session resumption: asyncio's create_connection takes no `session`, so the context is a
subclass whose wrap_bio passes the last session it was given (`sessions.session`). A TLS 1.3
server sends its tickets after the handshake, so a session is taken from a connection when it
closes, or, while none has closed, from any open one that holds a ticket (`remember`).
"""

from __future__ import annotations

import socket
import ssl

import numpy as np

from .spec import LoadSpec


class _ResumingContext(ssl.SSLContext):
    """An SSLContext that offers `self.session` on every new client connection (None: a full
    handshake). Set by Sessions; read by uvloop's SSL protocol through wrap_bio."""

    session: ssl.SSLSession | None = None

    def wrap_bio(self, incoming, outgoing, server_side=False, server_hostname=None, session=None):
        return super().wrap_bio(
            incoming, outgoing, server_side, server_hostname, session or self.session
        )


def client_context(spec: LoadSpec) -> ssl.SSLContext:
    """The client context of spec: TLS 1.3 only, the CA file (or the system's CAs) when
    verifying, no verification at all with tls_verify False; resuming when tls_resume."""
    ctx = _ResumingContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    if spec.tls_verify:
        if spec.tls_ca_file:
            ctx.load_verify_locations(cafile=spec.tls_ca_file)
        else:
            ctx.load_default_certs()
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


class Sessions:
    """What one worker's TLS connections share: the context, the session to resume, and the
    handshake figures for the summary (times in ms, one per connection opened)."""

    def __init__(self, spec: LoadSpec) -> None:
        self.context = client_context(spec)
        self.resume = spec.tls_resume
        self.server_name = spec.tls_server_name or spec.host
        self.handshakes_ms: list[float] = []
        self.resumed = 0

    def opened(self, ssl_object, handshake_ms: float) -> None:
        """A connection finished its handshake in handshake_ms."""
        self.handshakes_ms.append(handshake_ms)
        if ssl_object is not None and ssl_object.session_reused:
            self.resumed += 1

    def remember(self, ssl_object) -> None:
        """Keep ssl_object's session for the next connections when it carries a ticket."""
        if not self.resume or ssl_object is None:
            return
        session = ssl_object.session
        if session is not None and session.has_ticket:
            self.context.session = session

    def summary(self) -> dict:
        """tls_connections, tls_resumed and the handshake p50/p99/max (ms; NaN without any)."""
        hs = np.asarray(self.handshakes_ms, dtype=np.float64)
        nan = float("nan")
        return {
            "tls_connections": int(hs.size),
            "tls_resumed": self.resumed,
            "tls_handshake_p50_ms": float(np.percentile(hs, 50)) if hs.size else nan,
            "tls_handshake_p99_ms": float(np.percentile(hs, 99)) if hs.size else nan,
            "tls_handshake_max_ms": float(hs.max()) if hs.size else nan,
        }


def probe(spec: LoadSpec, timeout_s: float = 5.0) -> str | None:
    """Open one TLS connection to spec's endpoint as the load will; None when the handshake
    succeeds, else one sentence saying why it failed (a certificate that does not verify, a
    server that does not speak TLS, no server at all). Blocking; call before the load."""
    ctx = client_context(spec)
    name = spec.tls_server_name or spec.host
    where = f"{spec.host}:{spec.port}"
    try:
        raw = socket.create_connection((spec.host, spec.port), timeout=timeout_s)
    except OSError as e:
        return f"cannot connect to {where}: {e.strerror or e}"
    try:
        with ctx.wrap_socket(raw, server_hostname=name):
            return None
    except ssl.SSLCertVerificationError as e:
        return f"the certificate of {where} does not verify for {name!r}: {e.verify_message}"
    except ssl.SSLError as e:
        reason = e.reason or str(e)
        if reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"):
            return f"{where} does not speak TLS (it answered in plain text: {reason})"
        return f"the TLS handshake with {where} failed: {reason}"
    except TimeoutError:
        return f"{where} did not finish a TLS handshake within {timeout_s:g} s"
    except OSError as e:
        return f"the TLS handshake with {where} failed: {e.strerror or e}"
    finally:
        raw.close()
