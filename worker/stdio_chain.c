/*
 * ember-worker --stdio: a plan's op chain as a filter, records in on
 * standard input and out on standard output, in ember's framing (int32
 * big-endian length + bytes, -5 for a null record).  Another engine's
 * executor (Spark's, through mapPartitions) feeds it a partition, so the
 * ops there are the very code emberd's workers run (docs/spark.md).
 */
#include <arpa/inet.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "keyed.h"
#include "ops.h"
#include "plan.h"
#include "protocol.h"
#include "stdio_chain.h"
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

/*
 * Read one record into *buf (grown as needed): 1 with *r set, 0 at the end
 * of input, -1 with *err on a broken frame.
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
	if ((size_t)len + 1 > *size) {
		*size = (size_t)len + 1;
		*buf = xrealloc(*buf, *size);
	}
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

/* Parse the plan text; NULL with *err naming the field. */
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
	if (plan_parse(j, &plan, err) == -1)
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

/* Run partition of plan_text's ops over standard input. */
int
stdio_chain_main(const char *plan_text, int partition, int check_only)
{
	struct stdio_sink	*sink;
	struct plan		*plan;
	struct chain		*chain;
	FILE			*out;
	char			*err = NULL;
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
	return (rc == 0 ? 0 : 1);
}
