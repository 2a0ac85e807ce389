package perfctl.server;

import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.util.Locale;
import java.util.function.IntSupplier;

/**
 * What the servers on real stacks (servlet, spring) share: the flags of servers/PROTOCOL.md,
 * the endpoints of the plain Java server (Router, Work, Search, Registry, Stats) and the one
 * way a servlet request is answered (status, Content-Type, Content-Length, Server-Timing).
 *
 * Server-Timing: `queue` is 0.000: the container queues connections (its accept queue and its
 * executor's queue) where a servlet cannot see them, so no honest figure exists; `svc` runs
 * from the servlet (or Spring handler) taking the request to the response being ready.
 */
final class Stack {
    static final int MAX_BODY = 64 * 1024;

    final Config config;
    final Stats stats;
    final Router router;
    /** stdout as the program found it: the listening line goes there, nothing else does. */
    private static final PrintStream LISTENING_LINE = System.out;
    private volatile IntSupplier queue = () -> 0;
    private volatile IntSupplier threads;

    private Stack(Config config, Search search) throws Config.Error {
        this.config = config;
        this.stats = new Stats(config.model, config.buckets);
        Registry registry = new Registry();
        threads = () -> config.threads;
        stats.attach(new Model() {
            @Override
            public void dispatch(Connection c) {
                throw new UnsupportedOperationException("the container accepts connections");
            }

            @Override
            public int threads() {
                return threads.getAsInt();
            }

            @Override
            public int queueLength() {
                return queue.getAsInt();
            }
        }, registry);
        Db db = HikariConnections.endpoint(config);
        this.router = new Router(new Work(stats, config.seed), search, registry, stats, db);
    }

    /** Parses the flags for one of Config.STACK_MODELS; exits 2 with one stderr line on a bad one. */
    static Stack start(String[] args, String model) {
        System.setOut(System.err); // libraries that log to stdout (Spring Boot's console) log to stderr
        try {
            Config c = Config.parse(args, new String[] {model});
            HttpInput.idleTimeoutMs = c.idleTimeoutMs;
            return new Stack(c, Search.load(c.corpus, c.byType));
        } catch (Config.Error e) {
            System.err.println("perfctl-server: " + e.getMessage());
            System.exit(2);
        } catch (IOException e) {
            System.err.println("perfctl-server: bad value for --corpus: cannot read it: " + e);
            System.exit(2);
        }
        return null;
    }

    /** The container's executor and connection count, once it runs. */
    void watch(IntSupplier queueLength, IntSupplier busyThreads, IntSupplier connections) {
        this.queue = queueLength;
        if (busyThreads != null) {
            this.threads = busyThreads;
        }
        stats.connectionsFrom(connections);
    }

    void announce(int port) {
        LISTENING_LINE.println("perfctl-server listening on " + config.host + ":" + port + " impl=java model="
                + config.model + " threads=" + config.threads + " backlog=" + config.backlog);
        LISTENING_LINE.flush();
    }

    /** Serves one request through the Router and writes the answer. t0: System.nanoTime() when
     * serving began. */
    void serve(HttpServletRequest req, HttpServletResponse resp, long t0) throws IOException {
        HttpResponse r;
        try {
            r = answer(req);
        } catch (HttpError e) {
            r = HttpResponse.error(e.status, e.getMessage());
        }
        write(req, resp, r, t0);
    }

    private HttpResponse answer(HttpServletRequest req) throws HttpError, IOException {
        if (req.getHeader("Transfer-Encoding") != null) {
            throw new HttpError(501, "Transfer-Encoding on a request is not supported");
        }
        String proto = req.getProtocol();
        if (!"HTTP/1.1".equals(proto) && !"HTTP/1.0".equals(proto)) {
            throw new HttpError(501, "HTTP version not supported");
        }
        long length = req.getContentLengthLong();
        if (length > MAX_BODY) {
            throw new HttpError(413, "body over 64 KiB");
        }
        byte[] body = HttpRequest.NO_BODY;
        if (length > 0) {
            try (InputStream in = req.getInputStream()) {
                body = in.readNBytes((int) length);
            }
        }
        String target = req.getRequestURI();
        if (req.getQueryString() != null) {
            target = target + "?" + req.getQueryString();
        }
        boolean http11 = "HTTP/1.1".equals(proto);
        String conn = req.getHeader("Connection");
        boolean close = conn != null && conn.toLowerCase(Locale.ROOT).contains("close");
        return router.route(new HttpRequest(req.getMethod(), target, http11, !close, body));
    }

    void write(HttpServletRequest req, HttpServletResponse resp, HttpResponse r, long t0) throws IOException {
        resp.setStatus(r.status);
        resp.setContentType(r.contentType);
        resp.setContentLength(r.bodyLength);
        if (r.allow != null) {
            resp.setHeader("Allow", r.allow);
        }
        if (r.close) {
            resp.setHeader("Connection", "close");
        }
        StringBuilder timing = new StringBuilder(64).append("queue;dur=0.000, svc;dur=");
        millis(timing, System.nanoTime() - t0);
        if (r.dbNanos >= 0) {
            millis(timing.append(", db;dur="), r.dbNanos);
        }
        resp.setHeader("Server-Timing", timing.toString());
        // counted before the body goes out: once the declared Content-Length is written Tomcat
        // may complete the response, and a client's next /stats could overtake a later count
        // (seen: 10000 of 10001 counted right after 200 clients finished)
        stats.responded();
        if (!"HEAD".equals(req.getMethod())) {
            OutputStream out = resp.getOutputStream();
            out.write(r.body, 0, r.bodyLength);
        }
    }

    /** ns as milliseconds with three decimals (rounded to the microsecond). */
    static void millis(StringBuilder b, long ns) {
        long us = ns > 0 ? (ns + 500) / 1000 : 0;
        b.append(us / 1000).append('.');
        long frac = us % 1000;
        if (frac < 100) {
            b.append('0');
        }
        if (frac < 10) {
            b.append('0');
        }
        b.append(frac);
    }
}
