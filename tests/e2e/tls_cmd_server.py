"""A tiny HTTPS server for `cmd` tests: tls_cmd_server.py PORT CERT KEY (or CERT and KEY from
PERFCTL_TLS_CERT / PERFCTL_TLS_KEY when given as `-`). Answers every GET with 200 "ok",
keep-alive, one thread per connection. With --plain it speaks plain HTTP (a server that
ignores the certificate it was given)."""

import os
import ssl
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Ok(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def main(argv):
    plain = "--plain" in argv
    port, cert, key = [a for a in argv if a != "--plain"]
    cert = os.environ["PERFCTL_TLS_CERT"] if cert == "-" else cert
    key = os.environ["PERFCTL_TLS_KEY"] if key == "-" else key
    server = ThreadingHTTPServer(("127.0.0.1", int(port)), Ok)
    if not plain:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
