package perfctl.server;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

/** GET /search?type=T&amp;re=REGEX over the sentence corpus, in the flat or the by-type layout. */
final class Search {
    static final int TYPES = 4;

    /** One corpus line of the flat layout. */
    private static final class Entry {
        final int type;
        final String text;

        Entry(int type, String text) {
            this.type = type;
            this.text = text;
        }
    }

    private final boolean byType;
    private final Entry[] flat; // layout flat: every sentence, scanned with a type check
    private final String[][] perType; // layout by-type: perType[T - 1] holds the sentences of type T

    private Search(boolean byType, Entry[] flat, String[][] perType) {
        this.byType = byType;
        this.flat = flat;
        this.perType = perType;
    }

    /** Loads `TYPE<TAB>SENTENCE` lines; lines that do not parse are skipped (and counted on stderr). */
    static Search load(Path corpus, boolean byType) throws IOException {
        List<Entry> entries = new ArrayList<>();
        int skipped = 0;
        for (String line : Files.readAllLines(corpus, StandardCharsets.UTF_8)) {
            int tab = line.indexOf('\t');
            int type = tab == 1 ? line.charAt(0) - '0' : -1;
            if (type < 1 || type > TYPES) {
                skipped += line.isEmpty() ? 0 : 1;
                continue;
            }
            entries.add(new Entry(type, line.substring(tab + 1)));
        }
        if (skipped > 0) {
            System.err.println("perfctl-server: skipped " + skipped + " malformed corpus lines in " + corpus);
        }
        if (!byType) {
            return new Search(false, entries.toArray(new Entry[0]), null);
        }
        String[][] per = new String[TYPES][];
        for (int t = 1; t <= TYPES; t++) {
            List<String> l = new ArrayList<>();
            for (Entry e : entries) {
                if (e.type == t) {
                    l.add(e.text);
                }
            }
            per[t - 1] = l.toArray(new String[0]);
        }
        return new Search(true, null, per);
    }

    HttpResponse handle(String query) throws HttpError {
        Map<String, String> q = Query.parse(query);
        String t = q.get("type");
        int type = t == null || !t.matches("[0-9]{1,9}") ? -1 : Integer.parseInt(t);
        if (type < 1 || type > TYPES) {
            throw HttpError.badRequest("bad value for type: expected an integer 1.." + TYPES);
        }
        String re = q.get("re");
        if (re == null) {
            throw HttpError.badRequest("missing re");
        }
        Pattern p;
        try {
            p = Pattern.compile(re);
        } catch (PatternSyntaxException e) {
            throw HttpError.badRequest("re does not compile");
        }
        return HttpResponse.json("{\"type\": " + type + ", \"matches\": " + count(type, p) + "}");
    }

    int count(int type, Pattern p) {
        Matcher m = p.matcher("");
        int n = 0;
        if (byType) {
            for (String s : perType[type - 1]) {
                if (m.reset(s).find()) {
                    n++;
                }
            }
        } else {
            for (Entry e : flat) {
                if (e.type == type && m.reset(e.text).find()) {
                    n++;
                }
            }
        }
        return n;
    }
}
