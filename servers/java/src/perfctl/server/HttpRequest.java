package perfctl.server;

/** One parsed request: what the router and the connection loop need, nothing more. */
final class HttpRequest {
    static final byte[] NO_BODY = new byte[0];

    final String method;
    final String target;
    final boolean http11;
    final boolean keepAlive;
    final byte[] body;

    HttpRequest(String method, String target, boolean http11, boolean keepAlive, byte[] body) {
        this.method = method;
        this.target = target;
        this.http11 = http11;
        this.keepAlive = keepAlive;
        this.body = body;
    }
}
