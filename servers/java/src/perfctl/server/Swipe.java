package perfctl.server;

import java.nio.charset.StandardCharsets;

/**
 * POST /swipe/left/ and /swipe/right/ (seed 001's endpoint): a JSON body
 * `{"swiper": 1..5000, "swipee": 1..1000000, "comment": "..."}` parsed and validated as the
 * seed's servlet did (every key present once, integers in range, the comment a string of at
 * most 256 characters, nothing else), then the cost of GET /work with the same query
 * (`spin_us`, `sleep_us`, `dist`, `bucket`). 201 with `{"swipe": "left"}`; a direction other
 * than left or right is a 404, a body that does not validate a 400 naming what is wrong.
 */
final class Swipe {
    static final int MAX_SWIPER = 5000;
    static final int MAX_SWIPEE = 1_000_000;
    static final int MAX_COMMENT = 256;
    private static final byte[] LEFT = "{\"swipe\": \"left\"}\n".getBytes(StandardCharsets.US_ASCII);
    private static final byte[] RIGHT = "{\"swipe\": \"right\"}\n".getBytes(StandardCharsets.US_ASCII);

    private final Work work;

    Swipe(Work work) {
        this.work = work;
    }

    /** path: /swipe/DIR or /swipe/DIR/; query: /work's parameters (may be null). */
    HttpResponse handle(String path, String query, byte[] body) throws HttpError {
        String dir = path.substring("/swipe/".length());
        if (dir.endsWith("/")) {
            dir = dir.substring(0, dir.length() - 1);
        }
        boolean left = dir.equals("left");
        if (!left && !dir.equals("right")) {
            return HttpResponse.notFound();
        }
        validate(body);
        work.handle(query);
        return new HttpResponse(201, HttpResponse.JSON, left ? LEFT : RIGHT, (left ? LEFT : RIGHT).length,
                null, false);
    }

    /** The seed's checks; HttpError 400 with the first thing wrong. */
    static void validate(byte[] body) throws HttpError {
        Parser p = new Parser(new String(body, StandardCharsets.UTF_8));
        long swiper = -1;
        long swipee = -1;
        String comment = null;
        p.expect('{');
        if (!p.eat('}')) {
            do {
                String key = p.string();
                p.expect(':');
                switch (key) {
                    case "swiper":
                        swiper = once(swiper, p.integer(), key);
                        break;
                    case "swipee":
                        swipee = once(swipee, p.integer(), key);
                        break;
                    case "comment":
                        if (comment != null) {
                            throw HttpError.badRequest("comment given twice");
                        }
                        comment = p.string();
                        break;
                    default:
                        throw HttpError.badRequest("unknown key " + key + " (swiper, swipee, comment)");
                }
            } while (p.eat(','));
            p.expect('}');
        }
        p.end();
        if (swiper < 1 || swiper > MAX_SWIPER) {
            throw HttpError.badRequest("swiper must be an integer 1.." + MAX_SWIPER);
        }
        if (swipee < 1 || swipee > MAX_SWIPEE) {
            throw HttpError.badRequest("swipee must be an integer 1.." + MAX_SWIPEE);
        }
        if (comment == null || comment.length() > MAX_COMMENT) {
            throw HttpError.badRequest("comment must be a string of at most " + MAX_COMMENT + " characters");
        }
    }

    private static long once(long old, long v, String key) throws HttpError {
        if (old != -1) {
            throw HttpError.badRequest(key + " given twice");
        }
        return v;
    }

    /** A strict reader of the flat JSON object above: strings without escapes other than
     * \" \\ \/ and integers without sign, fraction or exponent. */
    private static final class Parser {
        private final String s;
        private int i;

        Parser(String s) {
            this.s = s;
        }

        private void space() {
            while (i < s.length() && " \t\r\n".indexOf(s.charAt(i)) >= 0) {
                i++;
            }
        }

        boolean eat(char c) {
            space();
            if (i < s.length() && s.charAt(i) == c) {
                i++;
                return true;
            }
            return false;
        }

        void expect(char c) throws HttpError {
            if (!eat(c)) {
                throw HttpError.badRequest("body is not a JSON object of swiper, swipee and comment (expected '"
                        + c + "' at " + i + ")");
            }
        }

        void end() throws HttpError {
            space();
            if (i != s.length()) {
                throw HttpError.badRequest("body has bytes after its JSON object");
            }
        }

        String string() throws HttpError {
            expect('"');
            StringBuilder b = new StringBuilder();
            while (i < s.length()) {
                char c = s.charAt(i++);
                if (c == '"') {
                    return b.toString();
                }
                if (c == '\\') {
                    char e = i < s.length() ? s.charAt(i++) : 0;
                    if (e != '"' && e != '\\' && e != '/') {
                        throw HttpError.badRequest("unsupported escape in a JSON string");
                    }
                    c = e;
                } else if (c < 0x20) {
                    throw HttpError.badRequest("control character in a JSON string");
                }
                b.append(c);
            }
            throw HttpError.badRequest("unterminated JSON string");
        }

        long integer() throws HttpError {
            space();
            int start = i;
            while (i < s.length() && i - start < 10 && Character.isDigit(s.charAt(i))) {
                i++;
            }
            if (i == start || (i < s.length() && (Character.isDigit(s.charAt(i)) || ".eE".indexOf(s.charAt(i)) >= 0))) {
                throw HttpError.badRequest("swiper and swipee must be integers");
            }
            return Long.parseLong(s.substring(start, i));
        }
    }
}
