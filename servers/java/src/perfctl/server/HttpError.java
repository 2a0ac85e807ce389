package perfctl.server;

/** A request the server refuses: 400, 413 or 501. The response closes the connection. */
final class HttpError extends Exception {
    private static final long serialVersionUID = 1L;
    final int status;

    HttpError(int status, String message) {
        super(message, null, false, false); // no stack trace: these are ordinary events
        this.status = status;
    }

    static HttpError badRequest(String message) {
        return new HttpError(400, message);
    }
}
