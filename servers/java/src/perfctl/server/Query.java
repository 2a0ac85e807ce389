package perfctl.server;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;

/**
 * application/x-www-form-urlencoded decoding, used for query strings and /register bodies:
 * pairs split on '&amp;', key and value split on the first '=', '+' is a space, %XX a byte, the
 * bytes UTF-8. The first occurrence of a key wins. A bad %-escape is a 400.
 */
final class Query {
    private Query() {
    }

    static Map<String, String> parse(String s) throws HttpError {
        Map<String, String> out = new HashMap<>(8);
        if (s == null || s.isEmpty()) {
            return out;
        }
        int i = 0;
        int n = s.length();
        while (i <= n) {
            int amp = s.indexOf('&', i);
            if (amp < 0) {
                amp = n;
            }
            if (amp > i) {
                int eq = s.indexOf('=', i);
                String key;
                String value;
                if (eq < 0 || eq > amp) {
                    key = decode(s, i, amp);
                    value = "";
                } else {
                    key = decode(s, i, eq);
                    value = decode(s, eq + 1, amp);
                }
                out.putIfAbsent(key, value);
            }
            i = amp + 1;
        }
        return out;
    }

    static String decode(String s, int from, int to) throws HttpError {
        boolean plain = true;
        for (int i = from; i < to && plain; i++) {
            char c = s.charAt(i);
            plain = c != '%' && c != '+' && c < 0x80;
        }
        if (plain) {
            return s.substring(from, to);
        }
        ByteArrayOutputStream b = new ByteArrayOutputStream(to - from);
        for (int i = from; i < to; i++) {
            char c = s.charAt(i);
            if (c == '+') {
                b.write(' ');
            } else if (c == '%') {
                int hi = i + 2 < to ? Character.digit(s.charAt(i + 1), 16) : -1;
                int lo = hi >= 0 ? Character.digit(s.charAt(i + 2), 16) : -1;
                if (lo < 0) {
                    throw HttpError.badRequest("bad %-escape in query or form");
                }
                b.write(hi * 16 + lo);
                i += 2;
            } else {
                b.write(c); // the request line holds only visible ASCII; bodies are read as Latin-1
            }
        }
        return new String(b.toByteArray(), StandardCharsets.UTF_8);
    }
}
