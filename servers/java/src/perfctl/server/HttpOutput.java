package perfctl.server;

import java.io.Flushable;
import java.io.IOException;
import java.io.OutputStream;

/** The buffered output side of one connection: serialises responses, Server-Timing included. */
final class HttpOutput implements Flushable {
    private final OutputStream out;
    private final byte[] buf = new byte[16 * 1024];
    private int n;

    HttpOutput(OutputStream out) {
        this.out = out;
    }

    /**
     * Appends one response. queueNs / svcNs go into Server-Timing; close adds `Connection: close`,
     * keepAlive10 adds `Connection: keep-alive` (an HTTP/1.0 client that asked for it); head leaves
     * the body out (Content-Length still tells its length).
     */
    void write(HttpResponse r, long queueNs, long svcNs, boolean close, boolean keepAlive10, boolean head)
            throws IOException {
        ascii("HTTP/1.1 ");
        number(r.status);
        ascii(" ");
        ascii(HttpResponse.reason(r.status));
        ascii("\r\nContent-Type: ");
        ascii(r.contentType);
        ascii("\r\nContent-Length: ");
        number(r.bodyLength);
        ascii("\r\nServer-Timing: queue;dur=");
        millis(queueNs);
        ascii(", svc;dur=");
        millis(svcNs);
        if (r.dbNanos >= 0) { // /db: the part of svc spent in the database
            ascii(", db;dur=");
            millis(r.dbNanos);
        }
        if (r.allow != null) {
            ascii("\r\nAllow: ");
            ascii(r.allow);
        }
        if (close) {
            ascii("\r\nConnection: close");
        } else if (keepAlive10) {
            ascii("\r\nConnection: keep-alive");
        }
        ascii("\r\n\r\n");
        if (!head) {
            bytes(r.body, 0, r.bodyLength);
        }
    }

    void ascii(String s) throws IOException {
        int len = s.length();
        if (len > buf.length - n) {
            flush();
        }
        if (len > buf.length) {
            for (int i = 0; i < len; i++) {
                out.write(s.charAt(i));
            }
            return;
        }
        for (int i = 0; i < len; i++) {
            buf[n++] = (byte) s.charAt(i);
        }
    }

    void bytes(byte[] b, int off, int len) throws IOException {
        if (len > buf.length - n) {
            flush();
            if (len > buf.length) {
                out.write(b, off, len);
                return;
            }
        }
        System.arraycopy(b, off, buf, n, len);
        n += len;
    }

    private void number(long v) throws IOException {
        if (v < 0) {
            ascii("-");
            v = -v;
        }
        if (n + 20 > buf.length) {
            flush();
        }
        int start = n;
        do {
            buf[n++] = (byte) ('0' + v % 10);
            v /= 10;
        } while (v > 0);
        for (int i = start, j = n - 1; i < j; i++, j--) {
            byte t = buf[i];
            buf[i] = buf[j];
            buf[j] = t;
        }
    }

    /** nanoseconds as milliseconds with three decimals, e.g. 1.234 */
    private void millis(long ns) throws IOException {
        long us = Math.max(0, (ns + 500) / 1000);
        number(us / 1000);
        long frac = us % 1000;
        ascii(".");
        if (n + 3 > buf.length) {
            flush();
        }
        buf[n++] = (byte) ('0' + frac / 100);
        buf[n++] = (byte) ('0' + frac / 10 % 10);
        buf[n++] = (byte) ('0' + frac % 10);
    }

    @Override
    public void flush() throws IOException {
        if (n > 0) {
            out.write(buf, 0, n);
            n = 0;
        }
    }
}
