package perfctl.server;

import java.io.IOException;
import java.io.InputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;

/**
 * Serves one accepted connection until it closes: keep-alive, pipelining (responses in order,
 * flushed when no further request is buffered), Connection: close, errors then close.
 */
final class Connection implements Runnable {
    private static final byte[] CONTINUE = "HTTP/1.1 100 Continue\r\n\r\n".getBytes(StandardCharsets.US_ASCII);
    /** Lingering close after an error: read and drop what the client still sends, this long at most. */
    private static final int LINGER_MS = 500;
    private static final int LINGER_BYTES = 1 << 20;

    private final Socket socket;
    private final long acceptedAt;
    private final Router router;
    private final Stats stats;

    Connection(Socket socket, long acceptedAt, Router router, Stats stats) {
        this.socket = socket;
        this.acceptedAt = acceptedAt;
        this.router = router;
        this.stats = stats;
    }

    @Override
    public void run() {
        long began = System.nanoTime();
        try {
            serve(began - acceptedAt);
        } catch (IOException e) {
            // the peer reset, closed mid-request or stalled past the timeout: just close
        } catch (Throwable t) {
            System.err.println("perfctl-server: connection failed: " + t);
        } finally {
            close();
        }
    }

    private void serve(long firstQueueNs) throws IOException {
        HttpOutput out = new HttpOutput(socket.getOutputStream());
        HttpInput in = new HttpInput(socket, out);
        HttpParser parser = new HttpParser(in, () -> {
            out.bytes(CONTINUE, 0, CONTINUE.length);
            out.flush();
        });
        long queueNs = firstQueueNs;
        while (true) {
            HttpRequest req;
            try {
                req = parser.next();
            } catch (HttpError e) {
                long t = System.nanoTime();
                out.write(HttpResponse.error(e.status, e.getMessage()), queueNs, System.nanoTime() - t, true, false, false);
                stats.responded();
                out.flush();
                lingerClose(in);
                return;
            }
            if (req == null) {
                out.flush();
                return;
            }
            long start = System.nanoTime();
            HttpResponse resp;
            try {
                resp = router.route(req);
            } catch (HttpError e) {
                resp = HttpResponse.error(e.status, e.getMessage());
            }
            long svc = System.nanoTime() - start;
            boolean close = resp.close || !req.keepAlive;
            out.write(resp, queueNs, svc, close, !close && !req.http11, req.method.equals("HEAD"));
            stats.responded();
            queueNs = 0;
            if (close) {
                out.flush();
                if (resp.close) {
                    lingerClose(in);
                }
                return;
            }
            if (in.buffered() == 0) {
                out.flush();
            }
        }
    }

    /**
     * Half-close, then drop whatever the client still sends (briefly), so that the kernel does
     * not answer unread input with a reset that could destroy the response we just wrote.
     */
    private void lingerClose(HttpInput in) {
        try {
            socket.shutdownOutput();
            socket.setSoTimeout(LINGER_MS);
            InputStream raw = socket.getInputStream();
            long end = System.nanoTime() + LINGER_MS * 1_000_000L;
            int total = 0;
            byte[] sink = in.buf;
            int n;
            while (total < LINGER_BYTES && System.nanoTime() < end && (n = raw.read(sink)) > 0) {
                total += n;
            }
        } catch (IOException ignored) {
            // timed out or reset: we are closing anyway
        }
    }

    private void close() {
        try {
            socket.close();
        } catch (IOException ignored) {
            // nothing to do
        }
        stats.connectionClosed();
    }

    /** No worker for this connection (e.g. the pool's queue is full): 503 at once, then close. */
    void reject(String why) {
        try {
            HttpOutput out = new HttpOutput(socket.getOutputStream());
            out.write(HttpResponse.error(503, why), 0, 0, true, false, false);
            out.flush();
            stats.responded();
            socket.shutdownOutput();
            InputStream raw = socket.getInputStream();
            int avail = raw.available();
            if (avail > 0) {
                raw.skip(avail); // drop what is already here (no blocking): avoids a reset on close
            }
        } catch (IOException ignored) {
            // the client is gone
        } finally {
            close();
        }
    }
}
