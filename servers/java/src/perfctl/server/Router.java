package perfctl.server;

import java.nio.charset.StandardCharsets;

/** Maps a request to its endpoint: 404 for unknown paths, 405 (with Allow) for wrong methods. */
final class Router {
    private static final byte[] OK = "ok\n".getBytes(StandardCharsets.US_ASCII);

    private final Work work;
    private final Swipe swipe;
    private final Search search;
    private final Registry registry;
    private final Stats stats;
    private final DbEndpoint db;

    /** /db answers a query string; the plain servers have none (/db is then a 404). */
    interface DbEndpoint {
        HttpResponse handle(String query) throws HttpError;
    }

    Router(Work work, Search search, Registry registry, Stats stats) {
        this(work, search, registry, stats, null);
    }

    Router(Work work, Search search, Registry registry, Stats stats, DbEndpoint db) {
        this.work = work;
        this.swipe = new Swipe(work);
        this.search = search;
        this.registry = registry;
        this.stats = stats;
        this.db = db;
    }

    HttpResponse route(HttpRequest r) throws HttpError {
        String target = r.target;
        if (!target.startsWith("/")) {
            target = originForm(target);
        }
        int q = target.indexOf('?');
        String path = q < 0 ? target : target.substring(0, q);
        String query = q < 0 ? null : target.substring(q + 1);
        boolean get = r.method.equals("GET");
        switch (path) {
            case "/work":
                return get ? work.handle(query) : HttpResponse.methodNotAllowed("GET");
            case "/health":
                return get ? HttpResponse.text(200, OK) : HttpResponse.methodNotAllowed("GET");
            case "/search":
                return get ? search.handle(query) : HttpResponse.methodNotAllowed("GET");
            case "/register":
                return r.method.equals("POST") ? registry.register(r.body) : HttpResponse.methodNotAllowed("POST");
            case "/stats":
                return get ? HttpResponse.json(stats.json()) : HttpResponse.methodNotAllowed("GET");
            case "/db":
                if (db == null) {
                    return HttpResponse.notFound();
                }
                return get ? db.handle(query) : HttpResponse.methodNotAllowed("GET");
            default:
                if (path.startsWith("/swipe/")) {
                    return r.method.equals("POST") ? swipe.handle(path, query, r.body)
                            : HttpResponse.methodNotAllowed("POST");
                }
                return HttpResponse.notFound();
        }
    }

    /** absolute-form (http://host/path?q) to origin-form (/path?q); anything else is a 400. */
    private static String originForm(String target) throws HttpError {
        int scheme = target.indexOf("://");
        if (scheme > 0 && (target.regionMatches(true, 0, "http", 0, scheme) || target.regionMatches(true, 0, "https", 0, scheme))) {
            int slash = target.indexOf('/', scheme + 3);
            int query = target.indexOf('?', scheme + 3);
            if (slash < 0 || (query >= 0 && query < slash)) {
                return query < 0 ? "/" : "/" + target.substring(query);
            }
            return target.substring(slash);
        }
        throw HttpError.badRequest("request target must start with /");
    }
}
