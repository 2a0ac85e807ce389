/* registry: the in-memory, thread-safe set of registered users (prefix rg_). */
#ifndef PERFCTL_REGISTRY_H
#define PERFCTL_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

void rg_init(void);
void rg_free(void);

/* Adds user[0..n): 1 if it was new, 0 if it was already there, -1 out of memory. */
int rg_add(const char *user, size_t n);

uint64_t rg_count(void);

#endif
