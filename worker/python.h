/*
 * The python ops: CPython embedded in ember-worker, in a module
 * (worker/python.c, ember-worker-python.so) that worker/pyload.c loads
 * the first time one of these functions needs it; until then the fork
 * hooks do nothing and nothing of Python is mapped.  The fork-server starts
 * the interpreter once (python_start), when python.preload names modules
 * or when Python is first wanted, and every worker it forks after
 * inherits it, copy-on-write, with the modules of python.preload imported.  A run of
 * consecutive python ops is one stage, one op of the chain, that hands
 * records to Python in batches (worker/pyworker.py).  Without Python
 * (./configure --without-python) there is no module and python ops fail.
 */
#ifndef EMBER_WORKER_PYTHON_H
#define EMBER_WORKER_PYTHON_H

#include <stddef.h>
#include <stdint.h>

struct chain;
struct op;
struct plan_op;

/*
 * Name the modules the interpreter imports when it starts, and wanted_fd,
 * where a worker that has to start it itself sends a byte (a datagram
 * socket the fork-server polls; -1: none), without starting it (the fork-server,
 * once, after it has dropped its privileges).  A worker forked while no
 * interpreter is up starts one on its first python op: workers without
 * python ops fork from a process without the interpreter's heap.
 */
void		 python_defer(char *const *preload, size_t npreload,
		     int wanted_fd);

/*
 * Start the interpreter with python_defer's modules, unless it was tried
 * already.  A module that does not import is logged and skipped; an
 * interpreter that does not start leaves every python op failing with the
 * reason.
 */
void		 python_start(void);

/*
 * Unpickle broadcast id's bytes (the sealed memfd fd, mapped read-only)
 * in the fork-server, so that the workers it forks after share the object
 * (worker/pyworker.py, preload), with the address space bounded by limit
 * (workers.max_memory; 0: none) meanwhile.  0, or -1 (logged) if it did
 * not load: one that raised is kept as its traceback, for the workers.
 */
int		 python_broadcast_load(int64_t id, int fd, uint64_t limit);
/* Let go of what python_broadcast_load loaded for id, if anything. */
void		 python_broadcast_unload(int64_t id);

/* Around the fork-server's fork(): the interpreter's own fork hooks. */
void		 python_fork_before(void);
void		 python_fork_parent(void);
void		 python_fork_child(void);

/*
 * Make the op for the n consecutive PLAN_OP_PYTHON ops from first (they
 * must outlive the op), unpickling their functions.  NULL with *err
 * allocated when Python is missing or a function does not unpickle.
 */
struct op	*python_op_create(const struct plan_op *first, size_t n,
		     struct chain *, char **err);

#endif
