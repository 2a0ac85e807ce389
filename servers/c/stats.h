/* stats: server-wide counters, the /work bucket array and the stop flag (prefix st_). */
#ifndef PERFCTL_STATS_H
#define PERFCTL_STATS_H

#include <stddef.h>
#include <stdint.h>

int st_init(size_t buckets, const char *model); /* 0, or -1 if out of memory */
void st_free(void);

/* The stop flag: set once by the signal-handling thread, polled by everything else. */
void st_stop_set(void);
int st_stopping(void);

void st_request_done(void);     /* a response was produced */
uint64_t st_work_begin(void);   /* counts a /work request, returns its running number */
void st_bucket_add(uint64_t i); /* counters[i mod buckets] += 1 */
void st_conn_add(int delta);
void st_queue_add(int delta);
void st_threads_add(int delta);
void st_threads_set(int64_t n);

/* Writes the /stats JSON object (with users) into buf; returns its length (< cap). */
size_t st_json(char *buf, size_t cap, uint64_t users);

#endif
