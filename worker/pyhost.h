/*
 * The python ops' module's side of its host table (worker/pymodule.h):
 * the log, xmalloc, ops and plan functions python.c calls, defined in the
 * module (hidden, so nothing else binds to them) on top of ember-worker's.
 */
#ifndef EMBER_WORKER_PYHOST_H
#define EMBER_WORKER_PYHOST_H

struct pymodule_host;

/* Keep host, which outlives the module, for every call after. */
void	pyhost_set(const struct pymodule_host *host);

#endif
