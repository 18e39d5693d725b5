/*
 * ember-worker --stdio: a plan's op chain as a filter, records in on
 * standard input and out on standard output, in ember's framing (int32
 * big-endian length + bytes, -5 for a null record).  Another engine's
 * executor (Spark's, through mapPartitions) feeds it a partition, so the
 * ops there are the very code emberd's workers run (docs/spark.md).
 * Pairs and groups come in and go out as a worker's batch holds them.
 */
#include <sys/stat.h>

#include <arpa/inet.h>

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "held.h"
#include "keyed.h"
#include "ops.h"
#include "plan.h"
#include "protocol.h"
#include "stdio_chain.h"
#include "taskdesc.h"
#include "xmalloc.h"

/* The largest record read: what one int32 frame can say. */
#define STDIO_MAX_RECORD	INT32_MAX
#define STDIO_BUFFER		(256 * 1024)

/* The sink: each record the chain leaves, framed on the output. */
struct stdio_sink {
	struct op	 op;
	FILE		*out;
};

/* Write one int32 in network order. */
static int
stdio_put_int(FILE *f, int32_t v)
{
	uint32_t	n = htonl((uint32_t)v);

	return (fwrite(&n, sizeof n, 1, f) == 1 ? 0 : -1);
}

/* Frame a pair or group onto the output, as a batch holds it. */
static int
stdio_sink_keyed(struct stdio_sink *s, const struct record *r)
{
	unsigned char	head[KEYED_HEAD], word[4];

	if (r->klen > STDIO_MAX_RECORD || r->len > STDIO_MAX_RECORD)
		return (op_fail(&s->op, "a keyed record of %zu bytes is too "
		    "large", r->klen + r->len));
	keyed_head(head, r);
	keyed_word(word, r);
	if (fwrite(head, 1, sizeof head, s->out) != sizeof head ||
	    (r->klen > 0 && fwrite(r->key, 1, r->klen, s->out) != r->klen) ||
	    fwrite(word, 1, sizeof word, s->out) != sizeof word ||
	    (r->len > 0 && fwrite(r->data, 1, r->len, s->out) != r->len))
		return (op_fail(&s->op, "standard output: %s",
		    strerror(errno)));
	return (OP_OK);
}

/* Frame a record onto the output. */
static int
stdio_sink_push_cb(struct op *op, const struct record *r)
{
	struct stdio_sink	*s = (struct stdio_sink *)op;

	if (r->kind != PLAN_KIND_RECORD)
		return (stdio_sink_keyed(s, r));
	if (r->null) {
		if (stdio_put_int(s->out, EMBER_NULL) == -1)
			return (op_fail(op, "standard output: %s",
			    strerror(errno)));
		return (OP_OK);
	}
	if (r->len > STDIO_MAX_RECORD)
		return (op_fail(op, "a record of %zu bytes is too large",
		    r->len));
	if (stdio_put_int(s->out, (int32_t)r->len) == -1 ||
	    (r->len > 0 && fwrite(r->data, 1, r->len, s->out) != r->len))
		return (op_fail(op, "standard output: %s", strerror(errno)));
	return (OP_OK);
}

/* Nothing follows the sink. */
static int
stdio_sink_finish_cb(struct op *op)
{
	(void)op;
	return (OP_OK);
}

/* Free the sink. */
static void
stdio_sink_free_cb(struct op *op)
{
	free(op);
}

/* Read exactly len bytes: 1, 0 at a clean end of input, -1 mid-way. */
static int
stdio_read(FILE *f, void *buf, size_t len)
{
	size_t	n;

	if (len == 0)
		return (1);
	n = fread(buf, 1, len, f);
	if (n == len)
		return (1);
	return (n == 0 && feof(f) ? 0 : -1);
}

/* Grow *buf to hold need bytes. */
static void
stdio_grow(char **buf, size_t *size, size_t need)
{
	if (need > *size) {
		*size = need * 2;
		*buf = xrealloc(*buf, *size);
	}
}

/* Read a frame (-5 allowed where null) onto the end of *buf at *used:
 * 1, or -1 with *err. */
static int
stdio_frame_append(FILE *f, char **buf, size_t *size, size_t *used, int null,
    const char *what, char **err)
{
	uint32_t	n;
	int32_t		len;

	if (stdio_read(f, &n, sizeof n) != 1) {
		xasprintf(err, "standard input: a %s is cut short", what);
		return (-1);
	}
	len = (int32_t)ntohl(n);
	if (len < 0 && !(null && len == EMBER_NULL)) {
		xasprintf(err, "standard input: a %s has a bad length %d", what,
		    len);
		return (-1);
	}
	stdio_grow(buf, size, *used + 4 + (len > 0 ? (size_t)len : 0));
	memcpy(*buf + *used, &n, sizeof n);
	*used += 4;
	if (len > 0 && stdio_read(f, *buf + *used, (size_t)len) != 1) {
		xasprintf(err, "standard input: a %s is cut short", what);
		return (-1);
	}
	*used += len > 0 ? (size_t)len : 0;
	return (1);
}

/* Read the rest of a pair or group after its marker into *buf, whole as
 * a batch holds it, and decode it into *r. */
static int
stdio_next_keyed(FILE *f, int32_t marker, char **buf, size_t *size,
    struct record *r, char **err)
{
	const char	*what = marker == EMBER_PAIR ? "pair" : "group";
	uint32_t	 n;
	int32_t		 count = 1;
	size_t		 used = 4, got;

	stdio_grow(buf, size, 64);
	n = htonl((uint32_t)marker);
	memcpy(*buf, &n, sizeof n);
	if (stdio_frame_append(f, buf, size, &used, 0, what, err) == -1)
		return (-1);
	if (marker == EMBER_GROUP) {
		if (stdio_read(f, &n, sizeof n) != 1) {
			xasprintf(err, "standard input: a group is cut short");
			return (-1);
		}
		if ((count = (int32_t)ntohl(n)) < 0) {
			xasprintf(err, "standard input: a group of %d values",
			    count);
			return (-1);
		}
		stdio_grow(buf, size, used + 4);
		memcpy(*buf + used, &n, sizeof n);
		used += 4;
	}
	while (count-- > 0)
		if (stdio_frame_append(f, buf, size, &used, 1, what, err) == -1)
			return (-1);
	if (keyed_get(*buf, used, STDIO_MAX_RECORD, r, &got) != 1 ||
	    got != used) {
		xasprintf(err, "standard input: a bad %s", what);
		return (-1);
	}
	return (1);
}

/*
 * Read one record, plain or keyed, into *buf (grown as needed): 1 with *r
 * set, 0 at the end of input, -1 with *err on a broken frame.
 */
static int
stdio_next(FILE *f, char **buf, size_t *size, struct record *r, char **err)
{
	uint32_t	n;
	int32_t		len;
	int		rc;

	if ((rc = stdio_read(f, &n, sizeof n)) != 1) {
		if (rc == -1)
			xasprintf(err, "standard input: a frame's length is "
			    "cut short");
		return (rc);
	}
	len = (int32_t)ntohl(n);
	r->kind = PLAN_KIND_RECORD;
	r->key = NULL;
	r->klen = 0;
	if (len == EMBER_PAIR || len == EMBER_GROUP)
		return (stdio_next_keyed(f, len, buf, size, r, err));
	if (len == EMBER_NULL) {
		r->data = NULL;
		r->len = 0;
		r->null = 1;
		return (1);
	}
	if (len < 0) {
		xasprintf(err, "standard input: bad frame length %d", len);
		return (-1);
	}
	stdio_grow(buf, size, (size_t)len + 1);
	if (stdio_read(f, *buf, (size_t)len) != 1) {
		xasprintf(err, "standard input: a record of %d bytes is cut "
		    "short", len);
		return (-1);
	}
	r->data = *buf;
	r->len = (size_t)len;
	r->null = 0;
	return (1);
}

/* Parse the plan text; NULL with *err naming the field.  A stage's plan
 * (its source the shuffle of a wide op, as emberd gives a stage's tasks)
 * says what kind of records come in after that op. */
static struct plan *
stdio_plan(const char *text, char **err)
{
	json_error_t	 jerr;
	json_t		*j;
	struct plan	*plan;

	if ((j = json_loads(text, JSON_ALLOW_NUL, &jerr)) == NULL) {
		xasprintf(err, "plan: %s", jerr.text);
		return (NULL);
	}
	if (plan_parse_stage(j, &plan, err) == -1)
		plan = NULL;
	json_decref(j);
	return (plan);
}

/* Push every input record through the chain, then finish it. */
static int
stdio_pump(struct chain *chain, FILE *in, char **err)
{
	struct record	 r = { NULL, 0, 0, 0, NULL, 0 };
	char		*buf = NULL;
	size_t		 size = 0;
	int		 rc;

	while ((rc = stdio_next(in, &buf, &size, &r, err)) == 1) {
		rc = chain_push(chain, &r);
		if (rc == OP_FAIL)
			break;
		if (rc == OP_STOP) {
			rc = 0;
			break;
		}
	}
	free(buf);
	if (rc == -1 && *err != NULL)
		return (-1);
	if (rc == OP_FAIL || chain_finish(chain) == OP_FAIL) {
		*err = xstrdup(chain_error(chain) != NULL ?
		    chain_error(chain) : "operation failed");
		return (-1);
	}
	return (0);
}

/*
 * A udf or a pipe's command may print on fd 1: keep the record stream on
 * a descriptor of its own and point fd 1 at standard error, as emberd's
 * fork-server sends what a job prints to its log.
 */
static FILE *
stdio_private_output(void)
{
	FILE	*out;
	int	 fd;

	if ((fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3)) == -1 ||
	    dup2(STDERR_FILENO, STDOUT_FILENO) == -1 ||
	    (out = fdopen(fd, "w")) == NULL)
		return (NULL);
	setvbuf(out, NULL, _IOFBF, STDIO_BUFFER);
	return (out);
}

/*
 * Hold broadcast "ID=PATH" as a worker holds one of emberd's: the file is
 * mapped, its set of lines built on first use.  The path is the caller's
 * own (Spark's executor gives a memfd as /proc/self/fd/N), opened with
 * the caller's rights.  0, or -1 with *err.
 */
static int
stdio_hold_broadcast(const char *arg, char **err)
{
	struct taskdesc_broadcast	 b = { .add = 1, .fd = -1,
					     .index_fd = -1 };
	struct stat			 st;
	const char			*path;
	char				*end;

	errno = 0;
	b.id = strtoll(arg, &end, 10);
	if (end == arg || *end != '=' || errno != 0 || b.id < 0) {
		xasprintf(err, "--broadcast %s: expected ID=PATH", arg);
		return (-1);
	}
	path = end + 1;
	if ((b.fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY)) == -1 ||
	    fstat(b.fd, &st) == -1) {
		xasprintf(err, "broadcast %" PRId64 ": %s: %s", b.id, path,
		    strerror(errno));
		if (b.fd != -1)
			close(b.fd);
		return (-1);
	}
	b.size = st.st_size;
	return (held_apply(&b, 1, err));
}

/* Run partition of plan_text's ops over standard input. */
int
stdio_chain_main(const char *plan_text, int partition, int check_only,
    char *const *broadcasts, size_t nbroadcasts)
{
	struct stdio_sink	*sink;
	struct plan		*plan;
	struct chain		*chain;
	FILE			*out;
	char			*err = NULL;
	size_t			 i;
	int			 rc;

	if ((plan = stdio_plan(plan_text, &err)) == NULL) {
		fprintf(stderr, "PLAN_INVALID: %s\n", err);
		free(err);
		return (1);
	}
	if (plan_check_resources(plan, &err) == -1) {
		fprintf(stderr, "PLAN_INVALID: %s\n", err);
		free(err);
		plan_free(plan);
		return (1);
	}
	if (check_only) {
		plan_free(plan);
		return (0);
	}
	for (i = 0; i < nbroadcasts; i++) {
		if (stdio_hold_broadcast(broadcasts[i], &err) == -1) {
			fprintf(stderr, "partition %d: %s\n", partition, err);
			free(err);
			held_clear();
			plan_free(plan);
			return (1);
		}
	}
	if ((out = stdio_private_output()) == NULL) {
		fprintf(stderr, "standard output: %s\n", strerror(errno));
		plan_free(plan);
		return (1);
	}
	setvbuf(stdin, NULL, _IOFBF, STDIO_BUFFER);
	sink = xcalloc(1, sizeof *sink);
	sink->op.push = stdio_sink_push_cb;
	sink->op.finish = stdio_sink_finish_cb;
	sink->op.free = stdio_sink_free_cb;
	sink->out = out;
	if ((chain = chain_create(plan, partition, NULL, &sink->op,
	    &err)) == NULL)
		rc = -1;
	else {
		rc = stdio_pump(chain, stdin, &err);
		chain_free(chain);
	}
	/* END_OF_DATA_SECTION: the reader knows the partition is whole. */
	if (rc == 0 && (stdio_put_int(out, EMBER_END_OF_DATA_SECTION) == -1 ||
	    fflush(out) == EOF)) {
		xasprintf(&err, "standard output: %s", strerror(errno));
		rc = -1;
	}
	if (rc == -1) {
		fprintf(stderr, "partition %d: %s\n", partition, err);
		free(err);
	}
	fclose(out);
	plan_free(plan);
	held_clear();
	return (rc == 0 ? 0 : 1);
}
