"""A test server with the response framings real servers use: /chunked answers with chunked
transfer encoding, /close with a body delimited by closing the connection, /truncated with a
body shorter than its Content-Length (then the connection closes), /timing-later with a
Server-Timing header from the 40th response of each connection on, /close-later and
/truncated-later like /close and /truncated from the 20th response of a connection (before
that like /plain), anything else with Content-Length. Usage: odd_server.py PORT"""

import asyncio
import sys

import uvloop

CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
)
CLOSE = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nbody until close"
PLAIN = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
TRUNCATED = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part"
TIMED = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nserver-TIMING: svc;dur=0.250\r\n\r\nok"


class Odd(asyncio.Protocol):
    def connection_made(self, transport):
        self.t = transport
        self.buf = b""
        self.answered = 0

    def data_received(self, data):
        self.buf += data
        while b"\r\n\r\n" in self.buf:
            head, self.buf = self.buf.split(b"\r\n\r\n", 1)
            path = head.split(b" ", 2)[1]
            self.answered += 1
            if path.endswith(b"-later") and self.answered < 20:
                self.t.write(PLAIN)
            elif path.startswith(b"/chunked"):
                self.t.write(CHUNKED)
            elif path.startswith(b"/close"):
                self.t.write(CLOSE)
                self.t.close()
                return
            elif path.startswith(b"/truncated"):
                self.t.write(TRUNCATED)
                self.t.close()
                return
            elif path.startswith(b"/timing-later") and self.answered >= 40:
                self.t.write(TIMED)
            else:
                self.t.write(PLAIN)


async def main(port):
    server = await asyncio.get_running_loop().create_server(Odd, "127.0.0.1", port)
    async with server:
        await asyncio.sleep(300)


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1])))
