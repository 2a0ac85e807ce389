/* db: GET /db on PostgreSQL through libpq (prefix db_). servers/PROTOCOL.md, /db.
 * Each thread that serves /db holds one connection of its own (thread-local), opened on its
 * first /db request with the --db URI; a connection that fails is dropped and the next request
 * opens a new one. Queries block the calling thread (in `epoll`, its whole loop). */
#ifndef PERFCTL_DB_H
#define PERFCTL_DB_H

#include <stddef.h>
#include <stdint.h>

#define DB_MAX_ROWS 1000

/* Remembers the connection URI (NULL: no database; /db then answers 503) and the seed of
 * the per-thread key draws. Call once before serving. */
void db_init(const char *uri, uint64_t seed);

/* Serves one /db query string (q, qn bytes, undecoded). Returns the HTTP status: 200 (body
 * written into out: {"query": ..., "rows": N}), 400 (a bad parameter; out says which) or 503
 * (no database, or it failed; out holds the reason). *db_ns gets the time spent in the
 * database, or -1 when no query ran (a bad parameter, no database, no connection). out is
 * NUL-terminated; returns its length in *out_len. */
int db_serve(const char *q, size_t qn, char *out, size_t outcap, size_t *out_len, int64_t *db_ns);

#endif
