package perfctl.server;

import java.io.Flushable;
import java.io.IOException;
import java.io.InputStream;
import java.net.Socket;
import java.net.SocketTimeoutException;

/**
 * The buffered input side of one connection. Before every blocking read it flushes the output
 * (so pipelined responses go out in batches, yet nothing waits unflushed while we block).
 * Reads time out after the idle timeout (SO_TIMEOUT); a request in progress also has an overall
 * deadline, so a slowloris client cannot hold its connection longer than that either.
 */
final class HttpInput {
    /** The idle / slowloris timeout (--idle-timeout-ms; 10 s by default). Set by Main before
     *  the first connection is accepted, never after. */
    static int idleTimeoutMs = 10_000;

    final byte[] buf = new byte[16 * 1024];
    int pos;
    int lim;
    private final Socket socket;
    private final InputStream in;
    private final Flushable beforeBlock;
    private int timeoutMs = idleTimeoutMs;

    HttpInput(Socket socket, Flushable beforeBlock) throws IOException {
        this.socket = socket;
        this.in = socket.getInputStream();
        this.beforeBlock = beforeBlock;
    }

    int buffered() {
        return lim - pos;
    }

    /**
     * Reads more bytes after lim (moving the unread bytes to the front first when the buffer's
     * end is reached). deadline: System.nanoTime() value after which the request times out, or 0.
     * Returns false at end of stream.
     */
    boolean fill(long deadline) throws IOException {
        if (pos == lim) {
            pos = lim = 0;
        } else if (lim == buf.length) {
            System.arraycopy(buf, pos, buf, 0, lim - pos);
            lim -= pos;
            pos = 0;
        }
        if (lim == buf.length) {
            throw new IllegalStateException("input buffer full"); // parsers limit lines below this
        }
        beforeBlock.flush();
        int want = idleTimeoutMs;
        if (deadline != 0) {
            long leftMs = (deadline - System.nanoTime()) / 1_000_000L;
            if (leftMs <= 0) {
                throw new SocketTimeoutException("request not complete within the timeout");
            }
            want = (int) Math.min(idleTimeoutMs, leftMs);
        }
        if (want != timeoutMs) {
            socket.setSoTimeout(want);
            timeoutMs = want;
        }
        int n = in.read(buf, lim, buf.length - lim);
        if (n < 0) {
            return false;
        }
        lim += n;
        return true;
    }

    /** Reads exactly dst.length bytes (buffered ones first). */
    void readFully(byte[] dst, long deadline) throws IOException {
        int off = 0;
        while (off < dst.length) {
            if (pos == lim && !fill(deadline)) {
                throw new java.io.EOFException("end of stream inside a request body");
            }
            int n = Math.min(lim - pos, dst.length - off);
            System.arraycopy(buf, pos, dst, off, n);
            pos += n;
            off += n;
        }
    }
}
