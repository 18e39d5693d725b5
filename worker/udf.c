/*
 * The udf op.  A plugin's partition function pulls its input (ember_udf_next)
 * while the chain pushes records into ops, so the function runs as a
 * coroutine on a stack of its own: push() adds records to a batch and, when
 * the batch is full, switches to the function; ember_udf_next switches
 * back once the batch is used up; finish() delivers the end of the input
 * and lets the function run to its return.  The function's emits go down
 * the chain from its own stack.
 *
 * Batching records keeps the context switches (two system calls each, for
 * the signal mask) to a few per batch instead of a few per record.
 */
#include <sys/mman.h>

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

#include <jansson.h>

#include "ember/udf.h"
#include "held.h"
#include "log.h"
#include "ops.h"
#include "plan.h"
#include "udf.h"
#include "xmalloc.h"

#if defined(__SANITIZE_ADDRESS__)
#define UDF_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UDF_ASAN 1
#endif
#endif
#ifdef UDF_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

/* The function's stack, below which a guard page catches overflows. */
#define UDF_STACK		(1024 * 1024)
/* Records are handed to the function in batches of at most these. */
#define UDF_BATCH_RECORDS	256
#define UDF_BATCH_BYTES		(64 * 1024)
/* A record larger than this is handed over alone, without a copy. */
#define UDF_DIRECT		(UDF_BATCH_BYTES / 4)

#define UDF_ABI_SYMBOL		"ember_udf_abi_version"

/* A plugin this worker has loaded; kept until the worker exits. */
struct udf_library {
	char			*path;
	void			*handle;
	struct udf_library	*next;
};

enum udf_state {
	UDF_IDLE,		/* not started */
	UDF_RUNNING,		/* on its stack */
	UDF_WAITING,		/* in ember_udf_next, for more records */
	UDF_DONE,		/* returned */
};

/* A record of the batch: where its bytes are in the batch's buffer. */
struct udf_slot {
	size_t			 off;
	size_t			 len;
	int			 null;
};

/* The op, and the context a partition function gets. */
struct ember_udf {
	struct op		 op;
	const struct plan_op	*plan;		/* library, symbol, args */
	ember_udf_fn		*fn;
	int			 partition;
	json_t			*args;		/* parsed on first use */

	enum udf_state		 state;
	int			 rc;		/* what the function returned */
	int			 downstream;	/* OP_STOP, OP_FAIL from emit */
	int			 failed;	/* the chain has our error */
	char			*error;		/* from ember_udf_error */

	struct udf_slot		 slots[UDF_BATCH_RECORDS];
	size_t			 nslots, nextslot;
	char			*bytes;		/* UDF_BATCH_BYTES */
	size_t			 used;
	const struct record	*direct;	/* a large record, not copied */
	int			 eof;

	ucontext_t		 caller, self;
	char			*stack;		/* the mapping, guard first */
#ifdef UDF_ASAN
	const void		*caller_bottom;
	size_t			 caller_size;
#endif
};

static struct udf_library	*udf_libraries;
/* One stack mapping kept between tasks, so most tasks map none. */
static char			*udf_spare;
/* The op whose coroutine is starting, for udf_main. */
static struct ember_udf		*udf_starting;

static void	udf_main(void);

/* The size of the guard page. */
static size_t
udf_page(void)
{
	static size_t	page;

	if (page == 0)
		page = (size_t)sysconf(_SC_PAGESIZE);
	return (page);
}

/* Take a stack mapping: the spare one, or a new one. */
static char *
udf_stack_get(void)
{
	char	*s;

	if ((s = udf_spare) != NULL) {
		udf_spare = NULL;
		return (s);
	}
	s = mmap(NULL, udf_page() + UDF_STACK, PROT_READ|PROT_WRITE,
	    MAP_PRIVATE|MAP_ANONYMOUS|MAP_STACK, -1, 0);
	if (s == MAP_FAILED)
		fatal("mmap");
	if (mprotect(s, udf_page(), PROT_NONE) == -1)
		fatal("mprotect");
	return (s);
}

/* Give a stack mapping back. */
static void
udf_stack_put(char *s)
{
	if (udf_spare == NULL)
		udf_spare = s;
	else if (munmap(s, udf_page() + UDF_STACK) == -1)
		fatal("munmap");
}

/* Switch from the chain to the function. */
static void
udf_switch_in(struct ember_udf *u)
{
#ifdef UDF_ASAN
	void	*fake;

	__sanitizer_start_switch_fiber(&fake, u->stack + udf_page(),
	    UDF_STACK);
#endif
	if (swapcontext(&u->caller, &u->self) == -1)
		fatal("swapcontext");
#ifdef UDF_ASAN
	__sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
}

/* Switch from the function back to the chain, until more input comes. */
static void
udf_switch_out(struct ember_udf *u)
{
#ifdef UDF_ASAN
	void	*fake;

	__sanitizer_start_switch_fiber(&fake, u->caller_bottom,
	    u->caller_size);
#endif
	u->state = UDF_WAITING;
	if (swapcontext(&u->self, &u->caller) == -1)
		fatal("swapcontext");
	u->state = UDF_RUNNING;
#ifdef UDF_ASAN
	/* The chain may resume us from another stack (a udf before us). */
	__sanitizer_finish_switch_fiber(fake, &u->caller_bottom,
	    &u->caller_size);
#endif
}

/* Run the partition function on its stack; never returns. */
static void
udf_main(void)
{
	struct ember_udf	*u = udf_starting;

#ifdef UDF_ASAN
	__sanitizer_finish_switch_fiber(NULL, &u->caller_bottom,
	    &u->caller_size);
#endif
	u->state = UDF_RUNNING;
	u->rc = u->fn(u);
	u->state = UDF_DONE;
#ifdef UDF_ASAN
	__sanitizer_start_switch_fiber(NULL, u->caller_bottom, u->caller_size);
#endif
	setcontext(&u->caller);
	fatal("setcontext");
}

/* What the op answers the chain, given where the function is. */
static int
udf_result(struct ember_udf *u)
{
	if (u->state == UDF_DONE && u->rc != 0 && !u->failed) {
		u->failed = 1;
		if (u->error != NULL)
			return (op_fail(&u->op, "udf %s: %s",
			    u->plan->udf_symbol, u->error));
		return (op_fail(&u->op, "udf %s: failed (returned %d) without "
		    "a message", u->plan->udf_symbol, u->rc));
	}
	if (u->failed || u->downstream == OP_FAIL)
		return (OP_FAIL);
	if (u->downstream == OP_STOP || u->state == UDF_DONE)
		return (OP_STOP);
	return (OP_OK);
}

/* Let the function take what is waiting: start it, or wake it up. */
static int
udf_run(struct ember_udf *u)
{
	switch (u->state) {
	case UDF_IDLE:
		u->stack = udf_stack_get();
#ifdef UDF_ASAN
		/* A stack left by an abandoned function may hold poison. */
		ASAN_UNPOISON_MEMORY_REGION(u->stack + udf_page(), UDF_STACK);
#endif
		if (getcontext(&u->self) == -1)
			fatal("getcontext");
		u->self.uc_stack.ss_sp = u->stack + udf_page();
		u->self.uc_stack.ss_size = UDF_STACK;
		u->self.uc_link = NULL;
		makecontext(&u->self, udf_main, 0);
		udf_starting = u;
		udf_switch_in(u);
		break;
	case UDF_WAITING:
		udf_switch_in(u);
		break;
	case UDF_RUNNING:
		fatalx("%s: udf %s re-entered", __func__,
		    u->plan->udf_symbol);
	case UDF_DONE:
		break;
	}
	return (udf_result(u));
}

/* Take a record for the function. */
static int
udf_push_cb(struct op *op, const struct record *r)
{
	struct ember_udf	*u = (struct ember_udf *)op;
	struct udf_slot		*slot;
	int			 rc;

	if (u->state == UDF_DONE)
		return (udf_result(u));
	if (r->len > UDF_DIRECT) {
		/* Lives until we return, so until the function asks for
		 * the next record. */
		if (u->nslots != 0 && (rc = udf_run(u)) != OP_OK)
			return (rc);
		u->direct = r;
		return (udf_run(u));
	}
	if (u->nslots == UDF_BATCH_RECORDS ||
	    UDF_BATCH_BYTES - u->used < r->len) {
		if ((rc = udf_run(u)) != OP_OK)
			return (rc);
	}
	slot = &u->slots[u->nslots++];
	slot->off = u->used;
	slot->len = r->len;
	slot->null = r->null;
	if (!r->null) {
		memcpy(u->bytes + u->used, r->data, r->len);
		u->used += r->len;
	}
	return (OP_OK);
}

/* End the input: the function runs to its return. */
static int
udf_finish_cb(struct op *op)
{
	struct ember_udf	*u = (struct ember_udf *)op;

	u->eof = 1;
	if (udf_run(u) == OP_FAIL)
		return (OP_FAIL);
	return (op_next_finish(op));
}

/* Free the op; a function still waiting for input is abandoned (its task
 * failed, and the worker will not be reused). */
static void
udf_free_cb(struct op *op)
{
	struct ember_udf	*u = (struct ember_udf *)op;

	if (u->stack != NULL)
		udf_stack_put(u->stack);
	json_decref(u->args);
	free(u->error);
	free(u->bytes);
	free(u);
}

/* Load a plugin once for the worker's life and check its ABI. */
static void *
udf_load(const char *path, char **err)
{
	struct udf_library	*lib;
	const int		*version;
	void			*handle;
	const char		*e;

	for (lib = udf_libraries; lib != NULL; lib = lib->next) {
		if (strcmp(lib->path, path) == 0)
			return (lib->handle);
	}
	if (*path != '/') {
		xasprintf(err, "%s: not an absolute path", path);
		return (NULL);
	}
	/* Preloaded by the fork-server: the same handle comes back. */
	if ((handle = dlopen(path, RTLD_NOW|RTLD_LOCAL)) == NULL) {
		e = dlerror();
		xasprintf(err, "%s", e != NULL ? e : path);
		return (NULL);
	}
	/*
	 * Never closed, not even when refused: its constructors have run,
	 * and the worker is not reused after a failed task.
	 */
	if ((version = dlsym(handle, UDF_ABI_SYMBOL)) == NULL) {
		xasprintf(err, "%s: no %s (not an ember plugin?)", path,
		    UDF_ABI_SYMBOL);
		return (NULL);
	}
	if (*version != EMBER_UDF_ABI_VERSION) {
		xasprintf(err, "%s: built for ember UDF ABI %d, this ember "
		    "speaks %d", path, *version, EMBER_UDF_ABI_VERSION);
		return (NULL);
	}
	log_debug("loaded plugin %s", path);

	lib = xcalloc(1, sizeof *lib);
	lib->path = xstrdup(path);
	lib->handle = handle;
	lib->next = udf_libraries;
	udf_libraries = lib;
	return (handle);
}

/* Make the op for a udf. */
struct op *
udf_op_create(const struct plan_op *p, struct chain *chain, char **err)
{
	struct ember_udf	*u;
	void			*handle, *sym;

	*err = NULL;
	if ((handle = udf_load(p->udf_library, err)) == NULL)
		return (NULL);
	dlerror();
	if ((sym = dlsym(handle, p->udf_symbol)) == NULL) {
		xasprintf(err, "no function \"%s\" in %s", p->udf_symbol,
		    p->udf_library);
		return (NULL);
	}

	u = xcalloc(1, sizeof *u);
	u->op.push = udf_push_cb;
	u->op.finish = udf_finish_cb;
	u->op.free = udf_free_cb;
	u->op.chain = chain;
	u->plan = p;
	u->fn = (ember_udf_fn *)sym;
	u->partition = chain_partition(chain);
	u->state = UDF_IDLE;
	u->downstream = OP_OK;
	u->bytes = xmalloc(UDF_BATCH_BYTES);
	return (&u->op);
}

/*
 * The ABI (include/ember/udf.h).  These are exported from ember-worker
 * (worker/udf.syms) and are called from the function's stack only.
 */

/* Give the function the next record, waiting for the chain if need be. */
int
ember_udf_next(struct ember_udf *u, const char **data, size_t *len)
{
	struct udf_slot	*slot;

	for (;;) {
		/* The rest of the chain wants no more: nor do we. */
		if (u->downstream != OP_OK || u->state != UDF_RUNNING)
			return (0);
		if (u->nextslot < u->nslots) {
			slot = &u->slots[u->nextslot++];
			*data = slot->null ? NULL : u->bytes + slot->off;
			*len = slot->len;
			return (1);
		}
		if (u->direct != NULL) {
			*data = u->direct->null ? NULL : u->direct->data;
			*len = u->direct->null ? 0 : u->direct->len;
			u->direct = NULL;
			return (1);
		}
		if (u->eof)
			return (0);
		u->nslots = u->nextslot = u->used = 0;
		udf_switch_out(u);
	}
}

/* Pass a record of the function down the chain. */
int
ember_udf_emit(struct ember_udf *u, const char *data, size_t len)
{
	struct record	r = { NULL, 0, 0, 0, NULL, 0 };
	int		rc;

	if (u->downstream != OP_OK)
		return (-1);
	r.data = data;
	r.len = data == NULL ? 0 : len;
	r.null = data == NULL;
	if ((rc = op_next(&u->op, &r)) != OP_OK) {
		u->downstream = rc;
		return (-1);
	}
	return (0);
}

/* The plan's args, as JSON text. */
const char *
ember_udf_args(struct ember_udf *u)
{
	return (u->plan->udf_args);
}

/* Look a key of the args up. */
static json_t *
udf_arg(struct ember_udf *u, const char *key)
{
	if (u->args == NULL) {
		/* The plan's JSON, dumped by jansson: it parses. */
		u->args = json_loads(u->plan->udf_args, JSON_ALLOW_NUL, NULL);
		if (u->args == NULL)
			u->args = json_object();
	}
	return (key == NULL ? NULL : json_object_get(u->args, key));
}

/* Read a string of the args. */
int
ember_udf_arg_string(struct ember_udf *u, const char *key,
    const char **value, size_t *len)
{
	json_t	*j;

	if ((j = udf_arg(u, key)) == NULL)
		return (0);
	if (!json_is_string(j))
		return (-1);
	*value = json_string_value(j);
	if (len != NULL)
		*len = json_string_length(j);
	return (1);
}

/* Read an integer of the args. */
int
ember_udf_arg_int(struct ember_udf *u, const char *key, int64_t *value)
{
	json_t	*j;

	if ((j = udf_arg(u, key)) == NULL)
		return (0);
	if (!json_is_integer(j))
		return (-1);
	*value = json_integer_value(j);
	return (1);
}

/* The bytes of a broadcast the worker holds. */
const void *
ember_udf_broadcast(__attribute__((unused)) struct ember_udf *u, int64_t id,
    size_t *len)
{
	size_t	dummy;

	return (held_bytes(id, len != NULL ? len : &dummy));
}

/* Set the function's error message. */
int
ember_udf_error(struct ember_udf *u, const char *fmt, ...)
{
	va_list	 ap;
	char	*message;

	va_start(ap, fmt);
	xvasprintf(&message, fmt, ap);
	va_end(ap);
	free(u->error);
	u->error = message;
	return (-1);
}

/* The partition being computed. */
int
ember_udf_partition(struct ember_udf *u)
{
	return (u->partition);
}
