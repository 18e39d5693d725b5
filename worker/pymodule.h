/*
 * Between ember-worker and its python ops' module (ember-worker-python.so,
 * worker/python.c), which it dlopens on first use (worker/pyload.c): until
 * then neither the module nor libpython and its libraries are in the
 * address space every worker is forked from.  The module exports
 * pymodule_init alone; what it needs of ember-worker comes in the host
 * table (worker/pyhost.c turns it back into the usual calls), so that
 * ember-worker exports nothing to it that a plugin could bind to.
 */
#ifndef EMBER_WORKER_PYMODULE_H
#define EMBER_WORKER_PYMODULE_H

#include <stddef.h>
#include <stdint.h>

#include "log.h"
#include "plan.h"

/* Bump when either table changes: a module of another build is refused. */
#define PYMODULE_VERSION	1

/* The module's file, beside the ember-worker that loads it. */
#define PYMODULE_NAME		"ember-worker-python.so"

/* The entry point's name, for dlsym. */
#define PYMODULE_INIT		"pymodule_init"

struct chain;
struct op;

/* What ember-worker lends the module. */
struct pymodule_host {
	int		 version;
	int		 (*log_enabled)(enum log_level);
	void		 (*log)(enum log_level, const char *);
	void		 (*fatalx)(const char *) __attribute__((noreturn));
	void		*(*xcalloc)(size_t, size_t);
	void		*(*xrealloc)(void *, size_t);
	const void	*(*held_bytes)(int64_t, size_t *);
	int		 (*keyed_value_next)(const char **, const char *,
			     const char **, size_t *, int *);
	int		 (*op_fail_take)(struct op *, char *);
	const char	*(*plan_python_kind_name)(enum plan_python_kind);
};

/* What the module does: python.h's functions, with the same contracts. */
struct pymodule {
	int		 version;
	void		 (*defer)(char *const *, size_t, int);
	void		 (*start)(void);
	int		 (*broadcast_load)(int64_t, int, uint64_t);
	void		 (*broadcast_unload)(int64_t);
	void		 (*fork_before)(void);
	void		 (*fork_parent)(void);
	void		 (*fork_child)(void);
	struct op	*(*op_create)(const struct plan_op *, size_t,
			     struct chain *, char **);
};

/* Keep host for the module's life; the module's table, or NULL if
 * host->version is not the module's. */
typedef const struct pymodule *pymodule_init_fn(const struct pymodule_host *);

#endif
