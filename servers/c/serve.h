/* serve: what the concurrency models share for listening, accepting and serving (prefix sv_).
 * The listening socket, the accept error policy of the blocking acceptors, and the blocking
 * connection loop that single, thread and pool run for every connection they accept; epoll
 * uses the listener, TCP_NODELAY and the idle timeout and runs its own loop. */
#ifndef PERFCTL_SERVE_H
#define PERFCTL_SERVE_H

#include <stddef.h>
#include <stdint.h>

#define SV_IDLE_NS_DEFAULT 10000000000LL /* idle / slowloris timeout: 10 s */

/* The idle / slowloris timeout in ns (--idle-timeout-ms): a connection idle, or a request
 * trickling in, for longer is closed. Set once by the dispatcher before sv_listen. */
extern int64_t sv_idle_ns;

/* A listening socket on host:port (port 0: any); *bound gets the port. nonblock: a
 * non-blocking listener (epoll); otherwise the listener carries what sv_serve_blocking relies
 * on for every accepted socket (sv_idle_ns receive/send timeouts, TCP_NODELAY). reuseport:
 * SO_REUSEPORT, for one listener per epoll loop on the same port. Every listener has
 * TCP_DEFER_ACCEPT. Returns the descriptor, or -1 with a message in err. */
int sv_listen(const char *host, int port, int backlog, int nonblock, int reuseport, int *bound,
	      char *err, size_t errcap);
/* Sets TCP_NODELAY on a connected socket (one accepted from a non-blocking listener). */
void sv_set_nodelay(int fd);
/* What a blocking acceptor does after accept4(2) failed with err: 1 accept again (no
 * connection within the listener's receive timeout, aborted connections, network errors; out of
 * descriptors or memory after a 10 ms back-off, logged at most once a second), 0 stop accepting
 * (stopping, the listener was shut down, EBADF, ...). */
int sv_accept_error(int err);
/* Serves the accepted blocking connection fd until the client closes it, it idles or trickles
 * for longer than sv_idle_ns, a closing response is sent, or the server stops. Then counts the
 * connection out (st_conn_add(-1); the acceptor counted it in) and closes fd, or hands it to
 * the lingering close (lg_hand_over) when a closing error response or unread input could make
 * close(2) reset it. first_queue_ns: the first request's queue time (0: the acceptor serves). */
void sv_serve_blocking(int fd, int64_t first_queue_ns);
/* Wakes every connection inside sv_serve_blocking (shutdown(2) on its socket) so that it
 * returns; after st_stop_set(), connections arriving later return at once. */
void sv_wake_blocking(void);

#endif
