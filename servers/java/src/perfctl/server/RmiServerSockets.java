package perfctl.server;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.rmi.server.RMIServerSocketFactory;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The RMI server's listening sockets: bound to --host with the --backlog listen backlog, and
 * gated so that at most `slots` accepted connections are open at once. RMI's own accept loop
 * is one thread that gives each connection a thread of its own; the gate makes it a pool of
 * `slots` connection workers (model `rmi`, slots = --threads) or a single-threaded server that
 * serves one connection to its end before it accepts the next (`rmi-single`, slots = 1). The
 * connections beyond that wait in the kernel's listen backlog, as with the HTTP models.
 *
 * One instance serves the registry and the exported object, so they share one port (RMI
 * shares a listening socket between exports whose socket factories are equal: identity here).
 */
final class RmiServerSockets implements RMIServerSocketFactory {
    private final String host;
    private final int backlog;
    private final Semaphore slots;
    private volatile int port;

    RmiServerSockets(String host, int backlog, int slots) {
        this.host = host;
        this.backlog = backlog;
        this.slots = new Semaphore(slots, true);
    }

    /** The port of the last listening socket made (the real one when 0 was asked for). */
    int port() {
        return port;
    }

    /** Connections waiting for a slot right now (accepted by the kernel, not yet by us). */
    int waiting() {
        return slots.getQueueLength();
    }

    @Override
    public ServerSocket createServerSocket(int wanted) throws IOException {
        Gated s = new Gated(slots);
        s.setReuseAddress(true);
        s.bind(new InetSocketAddress(host, wanted), backlog);
        port = s.getLocalPort();
        return s;
    }

    /** A listening socket whose accept() first takes a slot; the socket gives it back on close. */
    private static final class Gated extends ServerSocket {
        private final Semaphore slots;

        Gated(Semaphore slots) throws IOException {
            this.slots = slots;
        }

        @Override
        public Socket accept() throws IOException {
            slots.acquireUninterruptibly();
            Slotted s = new Slotted(slots);
            try {
                implAccept(s);
            } catch (IOException | RuntimeException e) {
                slots.release();
                throw e;
            }
            s.setTcpNoDelay(true);
            return s;
        }
    }

    /** An accepted connection holding one slot until it is closed. */
    private static final class Slotted extends Socket {
        private final Semaphore slots;
        private final AtomicBoolean held = new AtomicBoolean(true);

        Slotted(Semaphore slots) {
            this.slots = slots;
        }

        @Override
        public void close() throws IOException {
            try {
                super.close();
            } finally {
                if (held.compareAndSet(true, false)) {
                    slots.release();
                }
            }
        }
    }
}
