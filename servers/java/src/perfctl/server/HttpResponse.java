package perfctl.server;

import java.nio.charset.StandardCharsets;

/** A response before serialisation: status, content type, body bytes [0, bodyLength). */
final class HttpResponse {
    static final String TEXT = "text/plain";
    static final String JSON = "application/json";

    final int status;
    final String contentType;
    final byte[] body;
    final int bodyLength;
    final String allow; // for 405, else null
    final boolean close; // the server closes after this response
    long dbNanos = -1; // /db: time spent in the database (Server-Timing db;dur=), else -1

    HttpResponse(int status, String contentType, byte[] body, int bodyLength, String allow, boolean close) {
        this.status = status;
        this.contentType = contentType;
        this.body = body;
        this.bodyLength = bodyLength;
        this.allow = allow;
        this.close = close;
    }

    static HttpResponse text(int status, byte[] body) {
        return new HttpResponse(status, TEXT, body, body.length, null, false);
    }

    static HttpResponse json(String body) {
        byte[] b = body.getBytes(StandardCharsets.UTF_8);
        return new HttpResponse(200, JSON, b, b.length, null, false);
    }

    /** /db without a database, or with the database down: 503, the connection stays open. */
    static HttpResponse unavailable(String why, long dbNanos) {
        byte[] b = ("database unavailable: " + why.replaceAll("[^\\x20-\\x7e]", "?") + "\n")
                .getBytes(StandardCharsets.US_ASCII);
        HttpResponse r = new HttpResponse(503, TEXT, b, b.length, null, false);
        r.dbNanos = dbNanos;
        return r;
    }

    static HttpResponse methodNotAllowed(String allow) {
        byte[] b = "method not allowed\n".getBytes(StandardCharsets.US_ASCII);
        return new HttpResponse(405, TEXT, b, b.length, allow, false);
    }

    static HttpResponse notFound() {
        byte[] b = "not found\n".getBytes(StandardCharsets.US_ASCII);
        return new HttpResponse(404, TEXT, b, b.length, null, false);
    }

    /** 400 / 413 / 501 / 503: text body naming the problem, then close. */
    static HttpResponse error(int status, String message) {
        byte[] b = (message.replaceAll("[^\\x20-\\x7e]", "?") + "\n").getBytes(StandardCharsets.US_ASCII);
        return new HttpResponse(status, TEXT, b, b.length, null, true);
    }

    static String reason(int status) {
        switch (status) {
            case 200: return "OK";
            case 201: return "Created";
            case 400: return "Bad Request";
            case 404: return "Not Found";
            case 405: return "Method Not Allowed";
            case 409: return "Conflict";
            case 413: return "Content Too Large";
            case 501: return "Not Implemented";
            case 503: return "Service Unavailable";
            default: return "Status";
        }
    }
}
