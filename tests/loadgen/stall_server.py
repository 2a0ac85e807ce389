"""A test server that answers at once but freezes its whole event loop for 500 ms every
second: the classic set-up that exposes coordinated omission. Usage: stall_server.py PORT"""

import asyncio
import sys
import time

import uvloop

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"
STALL_S, PERIOD_S = 0.5, 1.0
MAX_LIFETIME_S = 300


class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.t = transport

    def data_received(self, data):
        self.t.write(RESPONSE * data.count(b"\r\n\r\n"))


def stall(loop):
    end = time.monotonic() + STALL_S
    while time.monotonic() < end:  # block the loop: nothing is answered meanwhile
        pass
    loop.call_later(PERIOD_S - STALL_S, stall, loop)


async def main(port: int):
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Echo, "127.0.0.1", port)
    loop.call_later(PERIOD_S - STALL_S, stall, loop)
    async with server:
        await asyncio.sleep(MAX_LIFETIME_S)


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1])))
