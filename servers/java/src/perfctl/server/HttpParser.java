package perfctl.server;

import java.io.EOFException;
import java.io.IOException;
import java.nio.charset.StandardCharsets;

/**
 * Reads HTTP/1.x requests off one connection: request line, headers, Content-Length body.
 * Refusals are {@link HttpError}s (400 malformed, 413 too large, 501 unsupported); a peer that
 * goes away or stalls is an IOException. Bare LF line ends are tolerated.
 */
final class HttpParser {
    static final int MAX_HEAD = 8 * 1024;
    static final int MAX_BODY = 64 * 1024;

    /** How long one request may take to arrive, from its first byte: the idle timeout. */
    static long requestTimeoutNs() {
        return HttpInput.idleTimeoutMs * 1_000_000L;
    }

    /** tchar of RFC 9110: the characters of methods and header names. */
    private static final boolean[] TCHAR = new boolean[256];

    static {
        for (int c = '0'; c <= '9'; c++) TCHAR[c] = true;
        for (int c = 'a'; c <= 'z'; c++) TCHAR[c] = true;
        for (int c = 'A'; c <= 'Z'; c++) TCHAR[c] = true;
        for (char c : "!#$%&'*+-.^_`|~".toCharArray()) TCHAR[c] = true;
    }

    /** Called when a request asks `Expect: 100-continue` before its body is read. */
    interface Continue {
        void sendContinue() throws IOException;
    }

    private final HttpInput in;
    private final Continue onExpect;
    private int used; // bytes of request line + headers so far
    private long deadline; // nanoTime by which the current request must be complete
    private int lineStart;
    private int lineEnd; // exclusive, CR stripped

    HttpParser(HttpInput in, Continue onExpect) {
        this.in = in;
        this.onExpect = onExpect;
    }

    /** The next request, or null when the peer closed cleanly between requests. */
    HttpRequest next() throws IOException, HttpError {
        used = 0;
        deadline = in.buffered() > 0 ? System.nanoTime() + requestTimeoutNs() : 0;
        do { // RFC 9112 2.2: ignore empty lines before the request line
            if (!readLine(true)) {
                return null;
            }
        } while (lineEnd == lineStart);

        // request line: METHOD SP TARGET SP HTTP/x.y
        byte[] b = in.buf;
        int sp1 = indexOf(b, lineStart, lineEnd, (byte) ' ');
        int sp2 = sp1 < 0 ? -1 : indexOf(b, sp1 + 1, lineEnd, (byte) ' ');
        if (sp2 < 0 || sp1 == lineStart || sp2 == sp1 + 1) {
            throw HttpError.badRequest("malformed request line");
        }
        for (int i = lineStart; i < sp1; i++) {
            if (!TCHAR[b[i] & 0xff]) {
                throw HttpError.badRequest("bad character in method");
            }
        }
        for (int i = sp1 + 1; i < sp2; i++) {
            if (b[i] < 0x21 || b[i] > 0x7e) {
                throw HttpError.badRequest("bad character in request target");
            }
        }
        int v = sp2 + 1;
        if (lineEnd - v != 8 || !startsWith(b, v, "HTTP/") || !digit(b[v + 5]) || b[v + 6] != '.' || !digit(b[v + 7])) {
            throw HttpError.badRequest("malformed HTTP version");
        }
        if (b[v + 5] != '1' || (b[v + 7] != '0' && b[v + 7] != '1')) {
            throw new HttpError(501, "HTTP version not supported");
        }
        boolean http11 = b[v + 7] == '1';
        String method = method(b, lineStart, sp1);
        String target = new String(b, sp1 + 1, sp2 - sp1 - 1, StandardCharsets.ISO_8859_1);

        // headers
        long contentLength = -1;
        boolean chunked = false;
        boolean close = false;
        boolean keepAlive = false;
        boolean expectContinue = false;
        while (true) {
            readLine(false);
            int s = lineStart;
            int e = lineEnd;
            if (s == e) {
                break;
            }
            if (b[s] == ' ' || b[s] == '\t') {
                throw HttpError.badRequest("obsolete header line folding");
            }
            int colon = s;
            while (colon < e && TCHAR[b[colon] & 0xff]) {
                colon++;
            }
            if (colon == s || colon == e || b[colon] != ':') {
                throw HttpError.badRequest("malformed header line");
            }
            int vs = colon + 1;
            int ve = e;
            while (vs < ve && (b[vs] == ' ' || b[vs] == '\t')) vs++;
            while (ve > vs && (b[ve - 1] == ' ' || b[ve - 1] == '\t')) ve--;
            for (int i = vs; i < ve; i++) {
                int c = b[i] & 0xff;
                if ((c < 0x20 && c != '\t') || c == 0x7f) {
                    throw HttpError.badRequest("bad character in header value");
                }
            }
            if (nameIs(b, s, colon, "content-length")) {
                long n = contentLength(b, vs, ve);
                if (contentLength >= 0 && n != contentLength) {
                    throw HttpError.badRequest("conflicting Content-Length headers");
                }
                contentLength = n;
            } else if (nameIs(b, s, colon, "transfer-encoding")) {
                chunked = true;
            } else if (nameIs(b, s, colon, "connection")) {
                for (String token : new String(b, vs, ve - vs, StandardCharsets.ISO_8859_1).split(",")) {
                    String t = token.trim();
                    close |= t.equalsIgnoreCase("close");
                    keepAlive |= t.equalsIgnoreCase("keep-alive");
                }
            } else if (nameIs(b, s, colon, "expect")) {
                expectContinue = ve - vs == 12 && nameIs(b, vs, ve, "100-continue");
            }
        }
        if (chunked) {
            throw new HttpError(501, "Transfer-Encoding on a request is not supported; send Content-Length");
        }
        if (contentLength > MAX_BODY) {
            throw new HttpError(413, "request body over " + MAX_BODY + " bytes");
        }
        byte[] body = HttpRequest.NO_BODY;
        if (contentLength > 0) {
            if (expectContinue && in.buffered() == 0) {
                onExpect.sendContinue();
            }
            body = new byte[(int) contentLength];
            in.readFully(body, deadline == 0 ? System.nanoTime() + requestTimeoutNs() : deadline);
        }
        boolean persistent = http11 ? !close : keepAlive && !close;
        return new HttpRequest(method, target, http11, persistent, body);
    }

    /**
     * Makes the next line available as [lineStart, lineEnd) and consumes it. first: this is
     * (possibly) the request line, so end of stream before any byte of it is a clean close.
     */
    private boolean readLine(boolean first) throws IOException, HttpError {
        byte[] b = in.buf;
        int scanned = 0;
        while (true) {
            int from = in.pos + scanned;
            for (int i = from; i < in.lim; i++) {
                if (b[i] == '\n') {
                    int len = i + 1 - in.pos;
                    used += len;
                    if (used > MAX_HEAD) {
                        throw new HttpError(413, "request line and headers over " + MAX_HEAD + " bytes");
                    }
                    lineStart = in.pos;
                    lineEnd = i > lineStart && b[i - 1] == '\r' ? i - 1 : i;
                    in.pos = i + 1;
                    return true;
                }
            }
            scanned = in.lim - in.pos;
            if (used + scanned > MAX_HEAD) {
                throw new HttpError(413, "request line and headers over " + MAX_HEAD + " bytes");
            }
            if (!in.fill(deadline)) {
                if (first && scanned == 0) {
                    return false;
                }
                throw new EOFException("end of stream inside a request");
            }
            b = in.buf;
            if (deadline == 0) {
                deadline = System.nanoTime() + requestTimeoutNs();
            }
        }
    }

    private static long contentLength(byte[] b, int s, int e) throws HttpError {
        if (s == e) {
            throw HttpError.badRequest("bad Content-Length");
        }
        long n = 0;
        for (int i = s; i < e; i++) {
            if (!digit(b[i])) {
                throw HttpError.badRequest("bad Content-Length");
            }
            n = Math.min(Long.MAX_VALUE / 20, n * 10 + (b[i] - '0')); // saturates: huge is "too large"
        }
        return n;
    }

    private static String method(byte[] b, int s, int e) {
        if (e - s == 3 && b[s] == 'G' && b[s + 1] == 'E' && b[s + 2] == 'T') {
            return "GET";
        }
        if (e - s == 4 && b[s] == 'P' && b[s + 1] == 'O' && b[s + 2] == 'S' && b[s + 3] == 'T') {
            return "POST";
        }
        return new String(b, s, e - s, StandardCharsets.ISO_8859_1);
    }

    private static boolean nameIs(byte[] b, int s, int e, String lower) {
        if (e - s != lower.length()) {
            return false;
        }
        for (int i = 0; i < lower.length(); i++) {
            int c = b[s + i];
            if (c >= 'A' && c <= 'Z') {
                c += 'a' - 'A';
            }
            if (c != lower.charAt(i)) {
                return false;
            }
        }
        return true;
    }

    private static boolean startsWith(byte[] b, int s, String ascii) {
        for (int i = 0; i < ascii.length(); i++) {
            if (b[s + i] != ascii.charAt(i)) {
                return false;
            }
        }
        return true;
    }

    private static boolean digit(byte c) {
        return c >= '0' && c <= '9';
    }

    private static int indexOf(byte[] b, int s, int e, byte c) {
        for (int i = s; i < e; i++) {
            if (b[i] == c) {
                return i;
            }
        }
        return -1;
    }
}
