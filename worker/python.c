/*
 * The python ops, the module ember-worker-python.so that ember-worker loads
 * when Python is first wanted (worker/pyload.c, worker/pymodule.h): each
 * function below is python.h's of the same name.  The interpreter is
 * started in the fork-server, with
 * ember_worker (worker/pyworker.py, built into a C string) and the
 * python.preload modules imported, and inherited by each worker fork()
 * makes, as pyspark/daemon.py does.  The worker's one thread holds the GIL
 * all along; a map_partitions function runs on a Python thread of its own
 * that takes turns with it (pyworker.py, PullStage).
 *
 * A stage is one op of the chain for a run of consecutive python ops.  Its
 * push() gathers records into a list and hands the list over when it is
 * full: one call into Python per batch, not per record.  What comes back
 * leaves Python here, as bytes: str (UTF-8), bytes, None, int or float.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define PYTHON_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PYTHON_LSAN 1
#endif
#endif
#ifdef PYTHON_LSAN
#include <sanitizer/lsan_interface.h>
#endif

#include "frame.h"
#include "held.h"
#include "keyed.h"
#include "log.h"
#include "ops.h"
#include "plan.h"
#include "protocol.h"
#include "pyhost.h"
#include "pymodule.h"
#include "xmalloc.h"


/* Records handed to Python at a time, and bytes at most. */
#define PYTHON_BATCH_RECORDS	1024
#define PYTHON_BATCH_BYTES	(1024 * 1024)

extern const char	 pyworker_source[];

/* ember_worker's stage() and format_error(); NULL when Python failed to
 * start, and python_failure says why. */
static PyObject		*python_stage_fn;
static PyObject		*python_format_fn;
static PyObject		*python_preload_fn;	/* preload(), unload() */
static PyObject		*python_unload_fn;
static char		*python_failure;
static int		 python_started;
static int		 python_tried;	/* python_start ran */

/* What python_defer named: the modules to import, and the pipe a worker
 * that starts the interpreter itself tells the fork-server on. */
static char *const	*python_preload;
static size_t		 python_npreload;
static int		 python_deferred;
static int		 python_wanted_fd = -1;

/* A stage: the op, and ember_worker's Stage for the task. */
struct python_op {
	struct op	 op;
	PyObject	*stage;
	PyObject	*batch;		/* the records gathered (a list) */
	size_t		 bytes;		/* and their bytes */
	int		 downstream;	/* OP_STOP or OP_FAIL from next */
	char		*keyed;		/* a pair or group it made */
	size_t		 used, size;
};

/* _ember_worker.broadcast(id): a read-only view of a held broadcast's
 * bytes and their address (which changes when the broadcast does). */
static PyObject *
python_broadcast_cb(__attribute__((unused)) PyObject *self, PyObject *arg)
{
	const void	*bytes;
	long long	 id;
	size_t		 len;

	id = PyLong_AsLongLong(arg);
	if (id == -1 && PyErr_Occurred())
		return (NULL);
	if ((bytes = held_bytes(id, &len)) == NULL) {
		PyErr_Format(PyExc_KeyError, "broadcast %lld is not held by "
		    "this worker (is it in the op's broadcasts?)", id);
		return (NULL);
	}
	return (Py_BuildValue("(NK)", PyMemoryView_FromMemory((char *)bytes,
	    (Py_ssize_t)len, PyBUF_READ),
	    (unsigned long long)(uintptr_t)bytes));
}

static PyMethodDef python_methods[] = {
	{ "broadcast", python_broadcast_cb, METH_O,
	    "The bytes of a broadcast the worker holds, and their address." },
	{ NULL, NULL, 0, NULL }
};

static struct PyModuleDef python_module = {
	PyModuleDef_HEAD_INIT, "_ember_worker", NULL, -1, python_methods,
	NULL, NULL, NULL, NULL
};

/* Make the _ember_worker module. */
static PyObject *
python_module_init(void)
{
	return (PyModule_Create(&python_module));
}

/* The pending exception's traceback as text, allocated; clears it. */
static char *
python_error(void)
{
	PyObject	*type, *value, *tb, *text = NULL;
	const char	*s = NULL;
	char		*message;

	PyErr_Fetch(&type, &value, &tb);
	PyErr_NormalizeException(&type, &value, &tb);
	if (value != NULL && tb != NULL)
		PyException_SetTraceback(value, tb);
	if (value != NULL && python_format_fn != NULL)
		text = PyObject_CallOneArg(python_format_fn, value);
	if (text != NULL)
		s = PyUnicode_AsUTF8(text);
	if (s == NULL) {
		PyErr_Clear();
		s = "an exception that cannot be formatted";
	}
	message = xstrdup(s);
	/* Python's traceback ends with a newline; the error does not. */
	if (*message != '\0' && message[strlen(message) - 1] == '\n')
		message[strlen(message) - 1] = '\0';
	Py_XDECREF(text);
	Py_XDECREF(type);
	Py_XDECREF(value);
	Py_XDECREF(tb);
	return (message);
}

/* Remember why Python cannot run python ops here. */
static void
python_fail(const char *what)
{
	char	*e = python_error();

	xasprintf(&python_failure, "python: %s: %s", what, e);
	log_error("%s", python_failure);
	free(e);
}

/* Run ember_worker's source as a module and keep what the ops call. */
static int
python_load_worker(void)
{
	PyObject	*code, *mod;

	code = Py_CompileString(pyworker_source, "ember_worker.py",
	    Py_file_input);
	if (code == NULL)
		return (-1);
	mod = PyImport_ExecCodeModule("ember_worker", code);
	Py_DECREF(code);
	if (mod == NULL)
		return (-1);
	python_stage_fn = PyObject_GetAttrString(mod, "stage");
	python_format_fn = PyObject_GetAttrString(mod, "format_error");
	python_preload_fn = PyObject_GetAttrString(mod, "preload");
	python_unload_fn = PyObject_GetAttrString(mod, "unload");
	Py_DECREF(mod);
	return (python_stage_fn != NULL && python_format_fn != NULL &&
	    python_preload_fn != NULL && python_unload_fn != NULL ? 0 : -1);
}

static void	python_start_interpreter(char *const *, size_t);

static void
python_defer(char *const *preload, size_t npreload, int wanted_fd)
{
	python_preload = preload;
	python_npreload = npreload;
	python_wanted_fd = wanted_fd;
	python_deferred = 1;
}

/*
 * Start the interpreter once.  What it allocates lives as long as the
 * fork-server, reachable only from Python's own arenas, which the leak
 * checker does not scan: it is told to look away.
 */
static void
python_start(void)
{
	if (python_tried)
		return;
	python_tried = 1;
#ifdef PYTHON_LSAN
	__lsan_disable();
#endif
	python_start_interpreter(python_preload, python_npreload);
#ifdef PYTHON_LSAN
	__lsan_enable();
#endif
}

/*
 * Start the interpreter in a worker forked before the fork-server had
 * one, and tell the fork-server, so that the workers it forks after have
 * it from the fork.  Nothing to do in a process python_defer was not
 * called in (ember-worker --stdio): its python ops fail as before.
 */
static void
python_start_late(void)
{
	char	c = 'P';

	if (!python_deferred || python_tried)
		return;
	log_debug("python: starting the interpreter in the worker");
	python_start();
	if (python_wanted_fd != -1) {
		/* Full: the fork-server has been told already; EPIPE or
		 * ECONNREFUSED: it has started Python since. */
		if (send(python_wanted_fd, &c, 1, MSG_NOSIGNAL) == -1)
			log_debug("python: tell the fork-server: %s",
			    strerror(errno));
		close(python_wanted_fd);
		python_wanted_fd = -1;
	}
}

/* Start the interpreter, without its signal handlers (the worker's
 * signals are the fork-server's business), and import the modules. */
static void
python_start_interpreter(char *const *preload, size_t npreload)
{
	PyConfig	 config;
	PyStatus	 status;
	PyObject	*mod;
	size_t		 i;

	if (PyImport_AppendInittab("_ember_worker", python_module_init) == -1)
		fatalx("PyImport_AppendInittab");
	PyConfig_InitPythonConfig(&config);
	config.install_signal_handlers = 0;
	config.parse_argv = 0;
	status = PyConfig_SetString(&config, &config.program_name,
	    L"ember-worker");
	if (!PyStatus_Exception(status))
		status = Py_InitializeFromConfig(&config);
	PyConfig_Clear(&config);
	if (PyStatus_Exception(status)) {
		xasprintf(&python_failure, "python: the interpreter did not "
		    "start: %s", status.err_msg != NULL ? status.err_msg : "?");
		log_error("%s", python_failure);
		return;
	}
	python_started = 1;
	if (python_load_worker() == -1) {
		python_fail("ember_worker");
		return;
	}
	for (i = 0; i < npreload; i++) {
		if ((mod = PyImport_ImportModule(preload[i])) == NULL) {
			char *e = python_error();

			log_error("python.preload %s: %s", preload[i], e);
			free(e);
			continue;
		}
		Py_DECREF(mod);
		log_debug("python: imported %s", preload[i]);
	}
}

/* Set the soft address-space limit (the hard one stays); the old one. */
static rlim_t
python_limit_as(rlim_t cur)
{
	struct rlimit	rl;
	rlim_t		old;

	if (getrlimit(RLIMIT_AS, &rl) == -1)
		return (RLIM_INFINITY);
	old = rl.rlim_cur;
	rl.rlim_cur = cur < rl.rlim_max ? cur : rl.rlim_max;
	if (setrlimit(RLIMIT_AS, &rl) == -1)
		log_warn("setrlimit RLIMIT_AS: %s", strerror(errno));
	return (old);
}

/* Call ember_worker.preload(id, bytes) under the workers' memory limit:
 * what it loads is in every worker's address space. */
static int
python_preload_call(int64_t id, const void *bytes, size_t len,
    uint64_t limit)
{
	PyObject	*view, *rc;
	rlim_t		 old = RLIM_INFINITY;
	int		 ok = 0;

	if ((view = PyMemoryView_FromMemory((char *)bytes, (Py_ssize_t)len,
	    PyBUF_READ)) == NULL)
		return (-1);
	if (limit != 0)
		old = python_limit_as((rlim_t)limit);
	/* What it loads is reachable from Python's arenas only, as what
	 * python_start made. */
#ifdef PYTHON_LSAN
	__lsan_disable();
#endif
	rc = PyObject_CallFunction(python_preload_fn, "LO", (long long)id,
	    view);
#ifdef PYTHON_LSAN
	__lsan_enable();
#endif
	if (limit != 0)
		python_limit_as(old);
	Py_DECREF(view);
	if (rc == NULL)
		return (-1);
	if (rc != Py_None) {
		log_info("python: broadcast %lld did not unpickle: %s",
		    (long long)id, PyUnicode_Check(rc) ?
		    PyUnicode_AsUTF8(rc) : "?");
		ok = -1;
	}
	Py_DECREF(rc);
	return (ok);
}

static int
python_broadcast_load(int64_t id, int fd, uint64_t limit)
{
	struct stat	 st;
	void		*bytes = NULL;
	char		*e;
	int		 rc;

	python_start();
	if (python_preload_fn == NULL)
		return (-1);
	if (fstat(fd, &st) == -1) {
		log_warn("python: broadcast %lld: fstat: %s", (long long)id,
		    strerror(errno));
		return (-1);
	}
	if (st.st_size > 0 && (bytes = mmap(NULL, (size_t)st.st_size,
	    PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		log_warn("python: broadcast %lld: mmap: %s", (long long)id,
		    strerror(errno));
		return (-1);
	}
	rc = python_preload_call(id, bytes != NULL ? bytes : "",
	    (size_t)st.st_size, limit);
	if (rc == -1 && PyErr_Occurred()) {
		e = python_error();
		log_error("python: preload of broadcast %lld: %s",
		    (long long)id, e);
		free(e);
	}
	if (bytes != NULL)
		munmap(bytes, (size_t)st.st_size);
	if (rc == 0)
		log_debug("python: broadcast %lld loaded", (long long)id);
	return (rc);
}

static void
python_broadcast_unload(int64_t id)
{
	PyObject	*rc;
	char		*e;

	if (python_unload_fn == NULL)
		return;
	if ((rc = PyObject_CallFunction(python_unload_fn, "L",
	    (long long)id)) == NULL) {
		e = python_error();
		log_error("python: unload of broadcast %lld: %s",
		    (long long)id, e);
		free(e);
		return;
	}
	Py_DECREF(rc);
	log_debug("python: broadcast %lld unloaded", (long long)id);
}

/* Take the interpreter's locks before fork(). */
static void
python_fork_before(void)
{
	if (python_started)
		PyOS_BeforeFork();
}

/* Release them in the fork-server. */
static void
python_fork_parent(void)
{
	if (python_started)
		PyOS_AfterFork_Parent();
}

/* Make the worker's interpreter its own. */
static void
python_fork_child(void)
{
	if (python_started)
		PyOS_AfterFork_Child();
}

/* Bytes as Python sees them: str (surrogateescape keeps bytes that are
 * not UTF-8 for the way out), or None. */
static PyObject *
python_from_bytes(const char *data, size_t len, int null)
{
	if (null)
		Py_RETURN_NONE;
	return (PyUnicode_DecodeUTF8(data != NULL ? data : "",
	    (Py_ssize_t)len, "surrogateescape"));
}

/* A group's values as a list. */
static PyObject *
python_from_values(const struct record *r)
{
	const char	*p = r->data, *v;
	PyObject	*list, *o;
	size_t		 vlen;
	int		 vnull;

	if ((list = PyList_New(0)) == NULL)
		return (NULL);
	while (keyed_value_next(&p, r->data + r->len, &v, &vlen, &vnull)) {
		if ((o = python_from_bytes(v, vlen, vnull)) == NULL ||
		    PyList_Append(list, o) == -1) {
			Py_XDECREF(o);
			Py_DECREF(list);
			return (NULL);
		}
		Py_DECREF(o);
	}
	return (list);
}

/* A record as Python sees it: str or None; a pair (key, value); a group
 * (key, [values]). */
static PyObject *
python_from_record(const struct record *r)
{
	PyObject	*k, *v;

	if (r->kind == PLAN_KIND_RECORD)
		return (python_from_bytes(r->data, r->len, r->null));
	k = python_from_bytes(r->key, r->klen, 0);
	v = r->kind == PLAN_KIND_GROUP ? python_from_values(r) :
	    python_from_bytes(r->data, r->len, r->null);
	if (k == NULL || v == NULL) {
		Py_XDECREF(k);
		Py_XDECREF(v);
		return (NULL);
	}
	return (Py_BuildValue("(NN)", k, v));
}

/* A Python object as a record; *keep holds what its bytes live in.  -1
 * with an error set when it has none of the types a record may have. */
static int
python_to_record(PyObject *o, struct record *r, PyObject **keep)
{
	Py_ssize_t	 len;
	char		*data;

	*keep = NULL;
	*r = (struct record){ NULL, 0, 0, 0, NULL, 0 };
	if (o == Py_None) {
		r->null = 1;
		return (0);
	}
	if (PyLong_CheckExact(o))
		o = *keep = PyObject_Str(o);
	else if (PyFloat_CheckExact(o))
		o = *keep = PyObject_Repr(o);
	if (o == NULL)
		return (-1);
	if (PyUnicode_Check(o)) {
		if ((r->data = PyUnicode_AsUTF8AndSize(o, &len)) == NULL) {
			/* Lone surrogates: bytes that came in as not UTF-8. */
			PyErr_Clear();
			Py_XDECREF(*keep);
			*keep = PyUnicode_AsEncodedString(o, "utf-8",
			    "surrogateescape");
			if (*keep == NULL)
				return (-1);
			o = *keep;
		} else {
			r->len = (size_t)len;
			return (0);
		}
	}
	if (PyBytes_Check(o)) {
		if (PyBytes_AsStringAndSize(o, &data, &len) == -1)
			return (-1);
		r->data = data;
		r->len = (size_t)len;
		return (0);
	}
	PyErr_Format(PyExc_TypeError, "a record leaving Python must be str, "
	    "bytes, None, int or float, not %s", Py_TYPE(o)->tp_name);
	return (-1);
}

/* Append len bytes to the op's keyed record buffer. */
static void
python_keyed_add(struct python_op *p, const void *data, size_t len)
{
	if (p->used + len > p->size) {
		p->size = (p->used + len) * 2;
		p->keyed = xrealloc(p->keyed, p->size);
	}
	if (len > 0)
		memcpy(p->keyed + p->used, data, len);
	p->used += len;
}

/* Append a value (a record's object) to the keyed buffer, as a frame
 * when frame is set.  -1 with an error set. */
static int
python_keyed_value(struct python_op *p, PyObject *o, int frame, int *null)
{
	struct record	 v;
	PyObject	*keep;
	unsigned char	 len[4];

	if (python_to_record(o, &v, &keep) == -1)
		return (-1);
	if (frame) {
		be32_put(len, v.null ? EMBER_NULL : (int32_t)v.len);
		python_keyed_add(p, len, 4);
	}
	python_keyed_add(p, v.data, v.len);
	*null = v.null;
	Py_XDECREF(keep);
	return (0);
}

/*
 * A 2-tuple as a keyed record: (key, value) a pair, (key, [values]) a
 * group.  Its bytes are copied into the op's buffer, valid until the next
 * one.  -1 with an error set.
 */
static int
python_to_keyed(struct python_op *p, PyObject *o, struct record *r)
{
	PyObject	*k = PyTuple_GET_ITEM(o, 0);
	PyObject	*v = PyTuple_GET_ITEM(o, 1);
	Py_ssize_t	 i;
	size_t		 klen;
	int		 null;

	p->used = 0;
	if (k == Py_None) {
		PyErr_SetString(PyExc_TypeError, "a pair's key must not be "
		    "None");
		return (-1);
	}
	if (python_keyed_value(p, k, 0, &null) == -1)
		return (-1);
	klen = p->used;
	*r = (struct record){ NULL, 0, 0, PLAN_KIND_PAIR, NULL, klen };
	if (PyList_Check(v)) {
		r->kind = PLAN_KIND_GROUP;
		for (i = 0; i < PyList_GET_SIZE(v); i++)
			if (python_keyed_value(p, PyList_GET_ITEM(v, i), 1,
			    &null) == -1)
				return (-1);
	} else if (python_keyed_value(p, v, 0, &r->null) == -1)
		return (-1);
	r->key = p->keyed != NULL ? p->keyed : "";
	r->data = r->null ? NULL : r->key + klen;
	r->len = p->used - klen;
	return (0);
}

/* Fail the task with the pending exception's traceback. */
static int
python_op_fail(struct python_op *p)
{
	char	*e = python_error();
	int	 rc;

	rc = op_fail(&p->op, "python: %s", e);
	free(e);
	return (rc);
}

/* Pass what a stage made down the chain. */
static int
python_emit(struct python_op *p, PyObject *out)
{
	struct record	 r;
	PyObject	*keep, *o;
	Py_ssize_t	 i, n;
	int		 rc;

	n = PyList_GET_SIZE(out);
	for (i = 0; i < n && p->downstream == OP_OK; i++) {
		o = PyList_GET_ITEM(out, i);
		keep = NULL;
		if (PyTuple_CheckExact(o) && PyTuple_GET_SIZE(o) == 2) {
			if (python_to_keyed(p, o, &r) == -1)
				return (python_op_fail(p));
		} else if (python_to_record(o, &r, &keep) == -1)
			return (python_op_fail(p));
		rc = op_next(&p->op, &r);
		Py_XDECREF(keep);
		if (rc != OP_OK)
			p->downstream = rc;
	}
	return (p->downstream);
}

/* Call a method of the stage, then pass on what it made and what more it
 * makes until it wants input again. */
static int
python_call(struct python_op *p, const char *method, PyObject *arg)
{
	PyObject	*out;
	const char	*next = "more";
	int		 rc;

	for (;;) {
		if (arg != NULL)
			out = PyObject_CallMethod(p->stage, method, "O", arg);
		else
			out = PyObject_CallMethod(p->stage, method, NULL);
		if (out == NULL)
			return (python_op_fail(p));
		if (out == Py_None || out == Py_False) {
			/* None: it wants input; False: it wants no more. */
			rc = out == Py_None ? OP_OK : OP_STOP;
			Py_DECREF(out);
			return (rc);
		}
		if (!PyList_Check(out)) {
			Py_DECREF(out);
			return (op_fail(&p->op, "python: %s() did not give a "
			    "list", method));
		}
		rc = python_emit(p, out);
		Py_DECREF(out);
		if (rc != OP_OK)
			return (rc);
		method = next;
		arg = NULL;
	}
}

/* Hand the gathered records to the stage. */
static int
python_flush(struct python_op *p)
{
	PyObject	*batch = p->batch;
	int		 rc;

	if (PyList_GET_SIZE(batch) == 0)
		return (OP_OK);
	if ((p->batch = PyList_New(0)) == NULL)
		fatalx("python: out of memory");
	p->bytes = 0;
	rc = python_call(p, "push", batch);
	Py_DECREF(batch);
	return (rc);
}

/* Gather a record; hand the batch over when it is full. */
static int
python_push_cb(struct op *op, const struct record *r)
{
	struct python_op	*p = (struct python_op *)op;
	PyObject		*o;
	int			 rc;

	if (p->downstream != OP_OK)
		return (p->downstream);
	if ((o = python_from_record(r)) == NULL)
		return (python_op_fail(p));
	rc = PyList_Append(p->batch, o);
	Py_DECREF(o);
	if (rc == -1)
		return (python_op_fail(p));
	p->bytes += r->len + r->klen;
	if (PyList_GET_SIZE(p->batch) >= PYTHON_BATCH_RECORDS ||
	    p->bytes >= PYTHON_BATCH_BYTES)
		return (python_flush(p));
	return (OP_OK);
}

/* Hand over the last records, end the stage's input, then finish. */
static int
python_finish_cb(struct op *op)
{
	struct python_op	*p = (struct python_op *)op;
	int			 rc;

	if (p->downstream == OP_OK && (rc = python_flush(p)) == OP_FAIL)
		return (rc);
	if (p->downstream == OP_OK &&
	    (rc = python_call(p, "finish", NULL)) == OP_FAIL)
		return (rc);
	if (p->downstream == OP_FAIL)
		return (OP_FAIL);
	return (op_next_finish(op));
}

/* Free the stage; a map_partitions function left halfway is unwound. */
static void
python_free_cb(struct op *op)
{
	struct python_op	*p = (struct python_op *)op;
	PyObject		*rc;

	if (p->stage != NULL) {
		if ((rc = PyObject_CallMethod(p->stage, "close", NULL)) == NULL)
			PyErr_Clear();
		Py_XDECREF(rc);
	}
	Py_XDECREF(p->stage);
	Py_XDECREF(p->batch);
	free(p->keyed);
	free(p);
}

/* The stage's specs for ember_worker.stage(): [(kind, fn, zero), ...]. */
static PyObject *
python_specs(const struct plan_op *first, size_t n)
{
	PyObject	*specs, *spec;
	size_t		 i;

	if ((specs = PyList_New((Py_ssize_t)n)) == NULL)
		return (NULL);
	for (i = 0; i < n; i++) {
		spec = Py_BuildValue("(ssz)",
		    plan_python_kind_name(first[i].py_kind), first[i].py_fn,
		    first[i].py_zero);
		if (spec == NULL) {
			Py_DECREF(specs);
			return (NULL);
		}
		PyList_SET_ITEM(specs, (Py_ssize_t)i, spec);
	}
	return (specs);
}

/* Make a stage for n python ops. */
static struct op *
python_op_create(const struct plan_op *first, size_t n, struct chain *chain,
    char **err)
{
	struct python_op	*p;
	PyObject		*specs, *stage;
	char			*e;

	*err = NULL;
	python_start_late();
	if (python_stage_fn == NULL) {
		*err = xstrdup(python_failure != NULL ? python_failure :
		    "python: the interpreter was not started");
		return (NULL);
	}
	stage = NULL;
	if ((specs = python_specs(first, n)) != NULL) {
		stage = PyObject_CallOneArg(python_stage_fn, specs);
		Py_DECREF(specs);
	}
	if (stage == NULL) {
		e = python_error();
		xasprintf(err, "python: the function did not unpickle: %s", e);
		free(e);
		return (NULL);
	}
	p = xcalloc(1, sizeof *p);
	p->op.push = python_push_cb;
	p->op.finish = python_finish_cb;
	p->op.free = python_free_cb;
	p->op.chain = chain;
	p->stage = stage;
	p->downstream = OP_OK;
	if ((p->batch = PyList_New(0)) == NULL)
		fatalx("python: out of memory");
	return (&p->op);
}

/* What the module does, for pyload.c. */
static const struct pymodule python_table = {
	PYMODULE_VERSION,
	python_defer,
	python_start,
	python_broadcast_load,
	python_broadcast_unload,
	python_fork_before,
	python_fork_parent,
	python_fork_child,
	python_op_create
};

pymodule_init_fn	pymodule_init __attribute__((visibility("default")));

/* Take ember-worker's host table (pyhost.c); the module's table. */
const struct pymodule *
pymodule_init(const struct pymodule_host *host)
{
	if (host->version != PYMODULE_VERSION)
		return (NULL);
	pyhost_set(host);
	return (&python_table);
}
