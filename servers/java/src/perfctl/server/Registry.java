package perfctl.server;

import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/** POST /register: users kept in memory in a ConcurrentHashMap-backed set. */
final class Registry {
    static final int MAX_USER_BYTES = 256;
    private static final byte[] CREATED = "created\n".getBytes(StandardCharsets.US_ASCII);
    private static final byte[] EXISTS = "exists\n".getBytes(StandardCharsets.US_ASCII);

    private final Set<String> users = ConcurrentHashMap.newKeySet();

    int size() {
        return users.size();
    }

    /** body: application/x-www-form-urlencoded `user=U&pass=P`. */
    HttpResponse register(byte[] body) throws HttpError {
        Map<String, String> form = Query.parse(new String(body, StandardCharsets.ISO_8859_1));
        String user = form.get("user");
        if (user == null) {
            throw HttpError.badRequest("missing user");
        }
        int len = user.getBytes(StandardCharsets.UTF_8).length;
        if (len == 0 || len > MAX_USER_BYTES) {
            throw HttpError.badRequest("user must be 1.." + MAX_USER_BYTES + " bytes");
        }
        return users.add(user) ? HttpResponse.text(201, CREATED) : HttpResponse.text(409, EXISTS);
    }
}
