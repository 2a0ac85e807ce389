package perfctl.server;

import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.File;
import java.io.IOException;
import java.lang.reflect.Method;
import java.nio.file.Files;
import java.util.concurrent.Executor;
import org.apache.catalina.Context;
import org.apache.catalina.LifecycleException;
import org.apache.catalina.connector.Connector;
import org.apache.catalina.startup.Tomcat;
import org.apache.coyote.AbstractProtocol;
import org.apache.tomcat.util.net.AbstractEndpoint;
import org.apache.tomcat.util.threads.ThreadPoolExecutor;

/**
 * `impl: java, model: servlet`: one plain jakarta.servlet HttpServlet on embedded Tomcat (the
 * container Spring Boot embeds by default, at the same version, so servlet vs spring compares
 * the framework and nothing else). Tomcat's NIO connector: --threads worker threads (min spare =
 * max, so the pool is fixed like `pool`), --backlog as acceptCount (the listen backlog),
 * --idle-timeout-ms as connectionTimeout and keepAliveTimeout, 8 KiB headers.
 */
public final class ServletMain {
    private ServletMain() {
    }

    /** The servlet: every method of every path goes to the shared Router (Stack). */
    static final class PerfServlet extends HttpServlet {
        private static final long serialVersionUID = 1L;
        private final transient Stack stack;

        PerfServlet(Stack stack) {
            this.stack = stack;
        }

        @Override
        protected void service(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            stack.serve(req, resp, System.nanoTime());
        }
    }

    /** Applies the cell's threads, backlog and idle timeout to a Tomcat HTTP/1.1 connector. */
    static void configure(Connector c, Config config) {
        c.setProperty("address", config.host);
        c.setProperty("maxThreads", Integer.toString(config.threads));
        c.setProperty("minSpareThreads", Integer.toString(config.threads));
        c.setProperty("acceptCount", Integer.toString(config.backlog));
        c.setProperty("connectionTimeout", Integer.toString(config.idleTimeoutMs));
        c.setProperty("keepAliveTimeout", Integer.toString(config.idleTimeoutMs));
        c.setProperty("maxKeepAliveRequests", "-1");
        c.setProperty("maxHttpHeaderSize", "8192");
        c.setProperty("maxConnections", "10000");
        c.setProperty("tcpNoDelay", "true");
        // what the other servers take in a request target (a regex in /search's query: [ ] | ^ ...)
        c.setProperty("relaxedQueryChars", "[]|{}^\\`\"<>");
        c.setProperty("relaxedPathChars", "[]|{}^\\`\"<>");
        c.setMaxPostSize(Stack.MAX_BODY);
        // a body the servlet did not read (over 64 KiB: answered 413) is not waited for: close
        c.setProperty("maxSwallowSize", "0");
    }

    /**
     * Tomcat's executor queue, busy threads and open connections, for /stats. The open connections
     * are the endpoint's map of socket wrappers (an entry from accept to close), not its
     * connection count: that counts a slot in before the acceptor blocks in accept(), so
     * "count - 1" is right only once the acceptor has looped, and read 0 with one connection
     * open when /stats beat the acceptor thread to a CPU.
     */
    static void watch(Stack stack, Connector c) {
        AbstractProtocol<?> p = (AbstractProtocol<?>) c.getProtocolHandler();
        AbstractEndpoint<?, ?> endpoint = endpointOf(p);
        stack.watch(() -> {
            Executor e = p.getExecutor();
            return e instanceof ThreadPoolExecutor ? ((ThreadPoolExecutor) e).getQueue().size() : 0;
        }, null, () -> endpoint.getConnections().size());
    }

    /** The protocol's endpoint (AbstractProtocol.getEndpoint is protected). */
    private static AbstractEndpoint<?, ?> endpointOf(AbstractProtocol<?> p) {
        try {
            Method m = AbstractProtocol.class.getDeclaredMethod("getEndpoint");
            m.setAccessible(true);
            return (AbstractEndpoint<?, ?>) m.invoke(p);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("Tomcat's protocol has no endpoint to count connections", e);
        }
    }

    public static void main(String[] args) throws IOException {
        Stack stack = Stack.start(args, "servlet");
        File base = Files.createTempDirectory("perfctl-tomcat").toFile();
        base.deleteOnExit();
        Tomcat tomcat = new Tomcat();
        tomcat.setBaseDir(base.getAbsolutePath());
        Connector connector = new Connector("HTTP/1.1");
        connector.setPort(stack.config.port);
        configure(connector, stack.config);
        tomcat.setConnector(connector);
        Context ctx = tomcat.addContext("", base.getAbsolutePath());
        Tomcat.addServlet(ctx, "perfctl", new PerfServlet(stack));
        ctx.addServletMappingDecoded("/", "perfctl");
        try {
            tomcat.start();
        } catch (LifecycleException e) {
            System.err.println("perfctl-server: cannot start Tomcat: " + e.getMessage());
            System.exit(1);
        }
        if (connector.getLocalPort() <= 0) {
            System.err.println("perfctl-server: cannot listen on " + stack.config.host + ":" + stack.config.port);
            System.exit(1);
        }
        watch(stack, connector);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            System.out.flush();
            System.err.flush();
            Runtime.getRuntime().halt(0); // SIGTERM / SIGINT: status 0 at once, like the plain server
        }, "shutdown"));
        stack.announce(connector.getLocalPort());
        tomcat.getServer().await();
    }
}
