/*
 * python.h's functions in ember-worker: the python ops' module
 * (ember-worker-python.so, worker/python.c) is dlopen'ed the first time
 * Python is wanted, so that a fork-server that never runs a python op
 * forks its workers without libpython and its libraries' mappings
 * (bench/README.md, "Fresh worker").  The module is found beside the
 * running ember-worker, never on a path a job or the environment names.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "held.h"
#include "keyed.h"
#include "log.h"
#include "ops.h"
#include "plan.h"
#include "pymodule.h"
#include "python.h"
#include "xmalloc.h"

static const struct pymodule	*pyload_module;
static char			*pyload_failure;

/* What python_defer named, for the module once it is loaded. */
static char *const	*pyload_preload;
static size_t		 pyload_npreload;
static int		 pyload_wanted_fd = -1;
static int		 pyload_deferred;

#ifdef HAVE_PYTHON
static int	 pyload_tried;

/* Log a message the module formatted. */
static void
pyload_log(enum log_level level, const char *msg)
{
	switch (level) {
	case LOG_LEVEL_ERROR:
		log_error("%s", msg);
		break;
	case LOG_LEVEL_WARN:
		log_warn("%s", msg);
		break;
	case LOG_LEVEL_INFO:
		log_info("%s", msg);
		break;
	default:
		log_debug("%s", msg);
		break;
	}
}

/* Die with a message the module formatted. */
static __attribute__((noreturn)) void
pyload_fatalx(const char *msg)
{
	fatalx("%s", msg);
}

static const struct pymodule_host pyload_host = {
	PYMODULE_VERSION,
	log_enabled,
	pyload_log,
	pyload_fatalx,
	xcalloc,
	xrealloc,
	held_bytes,
	keyed_value_next,
	op_fail_take,
	plan_python_kind_name
};

/* The module's path: beside this ember-worker.  NULL if unknown. */
static char *
pyload_path(void)
{
	char	 exe[PATH_MAX], *slash, *path;
	ssize_t	 n;

	if ((n = readlink("/proc/self/exe", exe, sizeof exe - 1)) <= 0)
		return (NULL);
	exe[n] = '\0';
	if ((slash = strrchr(exe, '/')) == NULL)
		return (NULL);
	*slash = '\0';
	xasprintf(&path, "%s/%s", exe, PYMODULE_NAME);
	return (path);
}

/* Load the module once: its table, or NULL with pyload_failure set. */
static const struct pymodule *
pyload_get(void)
{
	pymodule_init_fn	*init;
	void			*h;
	char			*path;

	if (pyload_tried)
		return (pyload_module);
	pyload_tried = 1;
	if ((path = pyload_path()) == NULL) {
		pyload_failure = xstrdup("python: ember-worker's own path is "
		    "unknown: the python ops' module cannot be found");
		log_error("%s", pyload_failure);
		return (NULL);
	}
	/* Global: Python's extension modules bind to libpython's symbols. */
	if ((h = dlopen(path, RTLD_NOW | RTLD_GLOBAL)) == NULL) {
		xasprintf(&pyload_failure, "python: %s", dlerror());
		log_error("%s", pyload_failure);
		free(path);
		return (NULL);
	}
	if ((init = (pymodule_init_fn *)dlsym(h, PYMODULE_INIT)) == NULL ||
	    (pyload_module = init(&pyload_host)) == NULL) {
		xasprintf(&pyload_failure, "python: %s is not this "
		    "ember-worker's module", path);
		log_error("%s", pyload_failure);
		free(path);
		return (NULL);
	}
	log_debug("python: loaded %s", path);
	free(path);
	if (pyload_deferred)
		pyload_module->defer(pyload_preload, pyload_npreload,
		    pyload_wanted_fd);
	return (pyload_module);
}
#else
/* Nothing to load: there is no module. */
static const struct pymodule *
pyload_get(void)
{
	if (pyload_failure == NULL)
		pyload_failure = xstrdup("python: this ember-worker was "
		    "built without Python");
	return (NULL);
}
#endif

void
python_defer(char *const *preload, size_t npreload, int wanted_fd)
{
	pyload_preload = preload;
	pyload_npreload = npreload;
	pyload_wanted_fd = wanted_fd;
	pyload_deferred = 1;
}

void
python_start(void)
{
	const struct pymodule	*m;

	if ((m = pyload_get()) != NULL)
		m->start();
}

int
python_broadcast_load(int64_t id, int fd, uint64_t limit)
{
	const struct pymodule	*m;

	if ((m = pyload_get()) == NULL)
		return (-1);
	return (m->broadcast_load(id, fd, limit));
}

/* Nothing was loaded for id if the module was not. */
void
python_broadcast_unload(int64_t id)
{
	if (pyload_module != NULL)
		pyload_module->broadcast_unload(id);
}

/* No module, no interpreter, no hooks. */
void
python_fork_before(void)
{
	if (pyload_module != NULL)
		pyload_module->fork_before();
}

void
python_fork_parent(void)
{
	if (pyload_module != NULL)
		pyload_module->fork_parent();
}

void
python_fork_child(void)
{
	if (pyload_module != NULL)
		pyload_module->fork_child();
}

struct op *
python_op_create(const struct plan_op *first, size_t n, struct chain *chain,
    char **err)
{
	const struct pymodule	*m;

	if ((m = pyload_get()) == NULL) {
		*err = xstrdup(pyload_failure);
		return (NULL);
	}
	return (m->op_create(first, n, chain, err));
}
