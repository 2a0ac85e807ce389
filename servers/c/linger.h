/* linger: lingering close off the serving thread (prefix lg_).
 *
 * After a response that closes the connection the server half-closes and must read what the
 * client still sends until its FIN: closing with unread input makes the kernel reset the
 * connection, which can destroy the response before the client has read it. Waiting for the
 * FIN takes a client round trip; done by the worker it would count as service time, so one
 * thread does it for every connection with an epoll set, bounded by LG_LINGER_NS and 1 MiB
 * per connection. */
#ifndef PERFCTL_LINGER_H
#define PERFCTL_LINGER_H

#include <stdint.h>

#define LG_LINGER_NS 1000000000LL /* drain-before-close after a closing response */

/* Starts the thread: 0, or -1. */
int lg_start(void);
/* Takes over fd after its last response: half-closes it, drains it, closes it. */
void lg_hand_over(int fd);
/* Tells the thread to close what it holds and finish. */
void lg_stop(void);
/* Waits for the thread until deadline_ns (monotonic): 0 finished (or never started), -1. */
int lg_join(int64_t deadline_ns);

#endif
