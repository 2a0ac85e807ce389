"""The bundled Python server of perfctl; speaks servers/PROTOCOL.md.

    python servers/python/server.py --port P [--host H] [--model async|pool] [--threads N]
        [--backlog K] [--buckets B] [--layout flat|by-type] [--corpus PATH] [--seed S]
        [--idle-timeout-ms MS] [--db URI] [--db-pool N] [--tls-cert PEM --tls-key PEM]

Run as a script: the modules next to this file (protocol, async_model, pool_model) are imported
through sys.path.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import ssl
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import db  # noqa: E402
import pool_model  # noqa: E402
from protocol import State  # noqa: E402

MODELS = ("async", "pool")
DEFAULT_CORPUS = os.path.join(os.path.dirname(HERE), "corpus", "sentences.tsv")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line on stderr, exit 2 (PROTOCOL.md)
        print(f"perfctl-server: {message}", file=sys.stderr, flush=True)
        sys.exit(2)


def _nonneg(name, lo=0, hi=None):
    def conv(s):
        try:
            v = int(s, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--{name}: not an integer: {s!r}") from None
        if v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"--{name}: out of range: {s!r}")
        return v

    return conv


def parse_args(argv):
    p = _Parser(prog="server.py", add_help=False)
    p.add_argument("--port", type=_nonneg("port", 0, 65535), required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--model", default="async", choices=MODELS)
    p.add_argument("--threads", type=_nonneg("threads", 1, 4096), default=4)
    p.add_argument("--backlog", type=_nonneg("backlog", 1, 1 << 20), default=128)
    p.add_argument("--buckets", type=_nonneg("buckets", 1, 1 << 26), default=1024)
    p.add_argument("--layout", default="flat", choices=("flat", "by-type"))
    p.add_argument("--corpus", default=DEFAULT_CORPUS)
    p.add_argument("--seed", type=_nonneg("seed", 0), default=1)
    p.add_argument(
        "--idle-timeout-ms", type=_nonneg("idle-timeout-ms", 1, 3_600_000), default=10_000
    )
    p.add_argument("--db", default=None)
    p.add_argument("--db-pool", type=_nonneg("db-pool", 1, 4096), default=None)
    p.add_argument("--tls-cert", default=None)
    p.add_argument("--tls-key", default=None)
    args = p.parse_args(argv)
    if not os.path.isfile(args.corpus):
        p.error(f"--corpus: no such file: {args.corpus}")
    if (args.tls_cert is None) != (args.tls_key is None):
        p.error("--tls-cert and --tls-key go together")
    return args


def tls_context(cert: str, key: str):
    """The server's TLS context: TLS 1.3 only, session tickets on (clients may resume)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def _exit_on_signal() -> None:
    """SIGTERM/SIGINT: exit 0 at once (closing the listening socket with everything else),
    even while a handler busy-spins. The signals are blocked in every thread and taken by
    sigwait in one helper thread, so neither a spinning event loop nor blocked workers delay
    the exit."""
    sigs = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, sigs)

    def wait():
        signal.sigwait(sigs)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    threading.Thread(target=wait, name="signals", daemon=True).start()


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    threads = 1 if args.model == "async" else args.threads
    state = State(args.model, threads, args.buckets, args.layout, args.corpus, args.seed)
    state.backlog = args.backlog
    state.idle_timeout_s = args.idle_timeout_ms / 1000
    try:
        family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((args.host, args.port))
        sock.listen(args.backlog)
    except OSError as e:
        print(
            f"perfctl-server: cannot listen on {args.host}:{args.port}: {e}",
            file=sys.stderr,
            flush=True,
        )
        return 1
    port = sock.getsockname()[1]
    tls = None
    if args.tls_cert:
        try:
            tls = tls_context(args.tls_cert, args.tls_key)
        except (OSError, ValueError) as e:
            print(f"perfctl-server: --tls-cert/--tls-key: {e}", file=sys.stderr, flush=True)
            return 2

    def announce():
        print(
            f"perfctl-server listening on {args.host}:{port} impl=python "
            f"model={args.model} threads={threads} backlog={args.backlog}"
            + (" tls=1.3" if tls else ""),
            flush=True,
        )

    _exit_on_signal()
    try:
        if args.model == "async":
            state.db = db.AsyncDb(args.db, args.seed, args.db_pool or args.threads)
        else:
            state.db = db.SyncDb(args.db, args.seed)
    except ImportError as e:
        print(f"perfctl-server: --db needs the psycopg package: {e}", file=sys.stderr, flush=True)
        return 2
    if args.model == "async":
        import async_model  # uvloop: only a server of the async model loads it

        return async_model.run(state, sock, announce, tls)
    return pool_model.run(state, sock, announce, tls)


if __name__ == "__main__":
    sys.exit(main())
