#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#if defined(__SSE2__) && defined(__x86_64__)
#include <emmintrin.h>
#include <immintrin.h>
#endif

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicase.h>
#include <unistr.h>

#include "held.h"
#include "log.h"
#include "ops.h"
#include "output.h"
#include "pipe.h"
#include "plan.h"
#include "python.h"
#include "udf.h"
#include "xmalloc.h"

/* The most a regex may use of the JIT's stack, for a pattern that
 * backtracks a lot over a long record. */
#define OPS_JIT_STACK	(4 * 1024 * 1024)

struct chain {
	struct op	*head;
	struct output	*out;		/* NULL: the mode sends no records */
	char		*error;
	int64_t		 dropped;
	int		 partition;
	int		 stopped;
	int		 halted;	/* emberd stopped the task */
	uint32_t	 pushed;
	int64_t		 lines;		/* the head's count of a block, or -1 */
};

/* The output is ticked (a stale batch sent, a stop looked for) once per
 * this many records from the source: a power of two. */
#define CHAIN_TICK	1024

/* filter contains: keep records holding a substring. */
struct ops_contains {
	struct op	 op;
	const char	*needle;	/* the plan's, which outlives the op */
	size_t		 len;
};

/* The longest literal a regex filter looks for before it matches. */
#define OPS_LITERAL_MAX	64

/* filter regex: the plan's compiled pattern, and what a match needs; and
 * a literal every match holds, if the pattern shows one, which a block of
 * lines is searched for before any line of it is matched. */
struct ops_regex {
	struct op		 op;
	const pcre2_code	*code;
	pcre2_match_data	*md;
	pcre2_match_context	*mc;
	pcre2_jit_stack		*stack;
	int			 jit;
	char			 lit[OPS_LITERAL_MAX];
	size_t			 litlen;
	size_t			 pick;		/* its rarest byte */
};

/* filter in_broadcast: the worker's set of the broadcast's lines. */
struct ops_broadcast {
	struct op			 op;
	const struct held_set	*set;
	int64_t				 id;
};

/* map upper, lower, trim, field, json; flat_map split. */
struct ops_map {
	struct op	 op;
	const struct plan_op *p;
	char		*scratch;
	size_t		 size;
};

/* key_by: the plan's picks, and a regex's match data. */
struct ops_key_by {
	struct op		 op;
	const struct plan_op	*p;
	pcre2_match_data	*md;
};

/* sample: Bernoulli, from a generator seeded by seed and partition. */
struct ops_sample {
	struct op	 op;
	double		 fraction;
	uint64_t	 s[4];
};

/* limit: records passed so far. */
struct ops_limit {
	struct op	 op;
	int64_t		 limit;
	int64_t		 passed;
};

/* The output, or NULL. */
struct output *
chain_output(struct chain *chain)
{
	return (chain->out);
}

/* Take an allocated message as the error; the first error wins. */
int
op_fail_take(struct op *op, char *message)
{
	struct chain	*chain = op->chain;

	if (chain->error == NULL)
		chain->error = message;
	else
		free(message);
	return (OP_FAIL);
}

/* Fail the chain with a formatted message. */
int
op_fail(struct op *op, const char *fmt, ...)
{
	va_list	 ap;
	char	*message;

	va_start(ap, fmt);
	xvasprintf(&message, fmt, ap);
	va_end(ap);
	return (op_fail_take(op, message));
}

/* Count a record an op dropped as unusable. */
void
op_drop(struct op *op)
{
	op->chain->dropped++;
}

/* Pass finish() on to the next op. */
static int
ops_finish_next_cb(struct op *op)
{
	return (op->next->finish(op->next));
}

/* Free an op that owns nothing else. */
static void
ops_free_cb(struct op *op)
{
	free(op);
}

/* Keep a record if it holds the substring; a null holds none. */
static int
ops_contains_push_cb(struct op *op, const struct record *r)
{
	struct ops_contains	*f = (struct ops_contains *)op;

	if (r->null)
		return (OP_OK);
	if (f->len == 1) {
		if (memchr(r->data, f->needle[0], r->len) == NULL)
			return (OP_OK);
	} else if (f->len != 0 &&
	    memmem(r->data, r->len, f->needle, f->len) == NULL)
		return (OP_OK);
	return (op_next(op, r));
}

/* Keep a record if the regex matches somewhere in it; a null never does. */
static int
ops_regex_push_cb(struct op *op, const struct record *r)
{
	struct ops_regex	*x = (struct ops_regex *)op;
	PCRE2_UCHAR		 message[256];
	PCRE2_SPTR		 subject;
	int			 rc;

	if (r->null)
		return (OP_OK);
	/* An empty record may have a NULL pointer; PCRE2 wants one. */
	subject = r->data != NULL ? (PCRE2_SPTR)r->data : (PCRE2_SPTR)"";
	if (x->jit)
		rc = pcre2_jit_match(x->code, subject, r->len, 0, 0, x->md,
		    x->mc);
	else
		rc = pcre2_match(x->code, subject, r->len, 0, 0, x->md, x->mc);
	if (rc >= 0)
		return (op_next(op, r));
	if (rc == PCRE2_ERROR_NOMATCH)
		return (OP_OK);
	pcre2_get_error_message(rc, message, sizeof message);
	return (op_fail(op, "filter regex: %s", (char *)message));
}

/* How rare a byte is in text, roughly: higher is rarer. */
static int
ops_byte_rarity(unsigned char c)
{
	static const char	 common[] = " etaoinshrdlcumwfgypbvkjxqz";
	const char		*p;

	if (c >= 'a' && c <= 'z' && (p = strchr(common, c)) != NULL)
		return ((int)(p - common));
	if (c == ' ')
		return (0);
	if (c >= '0' && c <= '9')
		return (20);
	if (c >= 'A' && c <= 'Z')
		return (28);
	return (30);
}

/* Can c stand for itself in a pattern, outside a class? */
static int
ops_is_plain(unsigned char c)
{
	return ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') ||
	    (c != '\0' && strchr("_ ,-/:=@!\"'<>%&~;", c) != NULL));
}

/*
 * The literal every match of a pattern starts with, or 0 bytes: the plain
 * characters at its start, after any assertions that take no characters
 * (\b, \B, ^), but for the last one if a quantifier follows it.  Any
 * alternation, group or escape at the start, or an option that changes
 * what a character matches, and there is none: a literal must never be
 * missed where the pattern matches.
 */
static size_t
ops_regex_literal(const pcre2_code *code, const char *pat, size_t len,
    char *lit, size_t size)
{
	uint32_t	options, type, unit;
	size_t		i = 0, n = 0;

	if (pcre2_pattern_info(code, PCRE2_INFO_ALLOPTIONS, &options) != 0 ||
	    (options & (PCRE2_CASELESS | PCRE2_EXTENDED |
	    PCRE2_EXTENDED_MORE | PCRE2_LITERAL)) != 0)
		return (0);
	if (memchr(pat, '|', len) != NULL)
		return (0);
	for (;;) {
		if (i + 1 < len && pat[i] == '\\' &&
		    (pat[i + 1] == 'b' || pat[i + 1] == 'B'))
			i += 2;
		else if (i < len && pat[i] == '^')
			i++;
		else
			break;
	}
	while (i + n < len && n < size &&
	    ops_is_plain((unsigned char)pat[i + n]))
		n++;
	if (i + n < len && strchr("*+?{", pat[i + n]) != NULL && n > 0)
		n--;
	if (n == 0)
		return (0);
	memcpy(lit, pat + i, n);
	/* PCRE2 agrees where it knows a first character. */
	if (pcre2_pattern_info(code, PCRE2_INFO_FIRSTCODETYPE, &type) == 0 &&
	    type == 1 &&
	    (pcre2_pattern_info(code, PCRE2_INFO_FIRSTCODEUNIT, &unit) != 0 ||
	    unit != (unsigned char)lit[0]))
		return (0);
	return (n);
}

/* Find the regex's literal in [p, end): the search runs on its rarest
 * byte.  NULL if it is not there. */
static const char *
ops_regex_find(const struct ops_regex *x, const char *p, const char *end)
{
	const char	*s, *last, *h;

	if ((size_t)(end - p) < x->litlen)
		return (NULL);
	s = p + x->pick;
	last = end - (x->litlen - x->pick);	/* the byte's last place */
	while (s <= last) {
		h = memchr(s, x->lit[x->pick], (size_t)(last - s) + 1);
		if (h == NULL)
			return (NULL);
		if (memcmp(h - x->pick, x->lit, x->litlen) == 0)
			return (h - x->pick);
		s = h + 1;
	}
	return (NULL);
}

/* Match the lines of a block that hold the regex's literal; the others
 * cannot match. */
static int
ops_regex_lines_cb(struct op *op, const char *data, size_t len, size_t *used)
{
	struct ops_regex	*x = (struct ops_regex *)op;
	const char		*p = data, *end = data + len, *hit, *ls, *le;
	struct record		 r = { NULL, 0, 0, 0, NULL, 0 };
	int			 rc;

	while ((hit = ops_regex_find(x, p, end)) != NULL) {
		ls = hit > p ? memrchr(p, '\n', (size_t)(hit - p)) : NULL;
		ls = ls != NULL ? ls + 1 : p;
		/* A block ends a line, unless the file was cut under a
		 * mapping as it was read: then the source fails the task. */
		if ((le = memchr(hit, '\n', (size_t)(end - hit))) == NULL)
			le = end;
		r.data = ls;
		r.len = (size_t)(le - ls);
		p = le < end ? le + 1 : end;
		if ((rc = ops_regex_push_cb(op, &r)) != OP_OK) {
			*used = (size_t)(p - data);
			return (rc);
		}
		if (p == end)
			break;
	}
	*used = len;
	return (OP_OK);
}

/* Free a regex filter; the pattern is the plan's. */
static void
ops_regex_free_cb(struct op *op)
{
	struct ops_regex	*x = (struct ops_regex *)op;

	pcre2_match_data_free(x->md);
	pcre2_match_context_free(x->mc);
	pcre2_jit_stack_free(x->stack);
	free(x);
}

/* Make a regex filter: JIT-compile the plan's pattern once, if the JIT is
 * there (compiling again for the next task is a no-op). */
static struct op *
ops_regex_create(const struct plan_op *p)
{
	struct ops_regex	*x;
	size_t			 i;

	x = xcalloc(1, sizeof *x);
	x->op.push = ops_regex_push_cb;
	x->op.finish = ops_finish_next_cb;
	x->op.free = ops_regex_free_cb;
	x->code = p->regex;
	if ((x->md = pcre2_match_data_create(1, NULL)) == NULL ||
	    (x->mc = pcre2_match_context_create(NULL)) == NULL)
		fatalx("pcre2: out of memory");
	x->litlen = ops_regex_literal(p->regex, p->arg, p->arglen, x->lit,
	    sizeof x->lit);
	if (x->litlen > 0) {
		for (i = 1; i < x->litlen; i++)
			if (ops_byte_rarity((unsigned char)x->lit[i]) >
			    ops_byte_rarity((unsigned char)x->lit[x->pick]))
				x->pick = i;
		x->op.push_lines = ops_regex_lines_cb;
	}
	x->jit = pcre2_jit_compile(p->regex, PCRE2_JIT_COMPLETE) == 0;
	if (x->jit) {
		x->stack = pcre2_jit_stack_create(32 * 1024, OPS_JIT_STACK,
		    NULL);
		if (x->stack == NULL)
			fatalx("pcre2: out of memory");
		pcre2_jit_stack_assign(x->mc, NULL, x->stack);
	}
	return (&x->op);
}

/* Keep a record if it is one of the broadcast's lines. */
static int
ops_broadcast_push_cb(struct op *op, const struct record *r)
{
	struct ops_broadcast	*b = (struct ops_broadcast *)op;
	int			 rc;

	if (r->null || (rc = held_set_contains(b->set, r->data, r->len)) == 0)
		return (OP_OK);
	if (rc == -1)
		return (op_fail(op, "filter in_broadcast %" PRId64 ": its "
		    "index is corrupt: a slot points past its bytes", b->id));
	return (op_next(op, r));
}

/* Grow a map's scratch buffer to hold len bytes. */
static char *
ops_map_scratch(struct ops_map *m, size_t len)
{
	if (len > m->size) {
		free(m->scratch);
		m->size = len < 256 ? 256 : len;
		m->scratch = xmalloc(m->size);
	}
	return (m->scratch);
}

/* Grow the scratch buffer to hold used + more bytes, keeping the first used. */
static char *
ops_map_reserve(struct ops_map *m, size_t used, size_t more)
{
	if (used + more > m->size) {
		m->size = used + more < 256 ? 256 : (used + more) * 2;
		m->scratch = xrealloc(m->scratch, m->size);
	}
	return (m->scratch + used);
}

/*
 * map upper or lower: Unicode full case mapping (libunistring, as Python's
 * str.upper: "straße" -> "STRASSE") on the record's valid UTF-8, with any
 * byte that is not valid UTF-8 passed through as it is.  All ASCII takes
 * a loop of its own.
 */
static void
ops_map_case(struct ops_map *m, const struct record *r, struct record *out,
    int upper)
{
	const uint8_t	*p = (const uint8_t *)r->data, *end = p + r->len, *bad;
	uint8_t		*mapped;
	size_t		 i, used = 0, n;
	char		*s;

	for (i = 0; i < r->len && p[i] < 0x80; i++)
		;
	if (i == r->len) {
		s = ops_map_scratch(m, r->len);
		for (i = 0; i < r->len; i++) {
			char c = r->data[i];
			if (upper)
				s[i] = (c >= 'a' && c <= 'z') ? c - 'a' + 'A' : c;
			else
				s[i] = (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c;
		}
		out->data = s;
		out->len = r->len;
		return;
	}
	while (p < end) {
		if ((bad = u8_check(p, (size_t)(end - p))) == NULL)
			bad = end;
		if (bad > p) {
			mapped = (upper ? u8_toupper : u8_tolower)(p,
			    (size_t)(bad - p), NULL, NULL, NULL, &n);
			if (mapped == NULL)
				fatal("u8_to%s", upper ? "upper" : "lower");
			memcpy(ops_map_reserve(m, used, n), mapped, n);
			used += n;
			free(mapped);
			p = bad;
		}
		if (p < end) {
			/* One byte that starts no valid character, as it is. */
			*ops_map_reserve(m, used, 1) = (char)*p++;
			used++;
		}
	}
	out->data = m->scratch;
	out->len = used;
}

/* Is c ASCII whitespace? */
static int
ops_is_space(char c)
{
	return (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
	    c == '\f');
}

/* Find sep in [p, end); NULL if it is not there. */
static const char *
ops_find(const char *p, const char *end, const char *sep, size_t seplen)
{
	if (seplen == 1)
		return (memchr(p, sep[0], (size_t)(end - p)));
	return (memmem(p, (size_t)(end - p), sep, seplen));
}

/* Count the fields of a record split by sep. */
static int64_t
ops_count_fields(const struct record *r, const char *sep, size_t seplen)
{
	const char	*p = r->data, *end = r->data + r->len, *s;
	int64_t		 n = 1;

	while ((s = ops_find(p, end, sep, seplen)) != NULL) {
		n++;
		p = s + seplen;
	}
	return (n);
}

/* The index-th field of a record split by sep: 0 if there is none. */
static int
ops_field(const char *sep, size_t seplen, int64_t index,
    const struct record *r, struct record *out)
{
	const char	*p, *end, *s;
	int64_t		 i;

	out->len = 0;
	if (r->len == 0)
		return (index == 0 || index == -1);
	if (index < 0) {
		index += ops_count_fields(r, sep, seplen);
		if (index < 0)
			return (0);
	}
	p = r->data;
	end = r->data + r->len;
	for (i = 0; i < index; i++) {
		if ((s = ops_find(p, end, sep, seplen)) == NULL)
			return (0);
		p = s + seplen;
	}
	if ((s = ops_find(p, end, sep, seplen)) == NULL)
		s = end;
	out->data = p;
	out->len = (size_t)(s - p);
	return (1);
}

/* Is a json path segment an array index? */
static int
ops_is_index(const char *s, size_t len, size_t *index)
{
	size_t	i, v = 0;

	if (len == 0 || len > 9)
		return (0);
	for (i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return (0);
		v = v * 10 + (size_t)(s[i] - '0');
	}
	*index = v;
	return (1);
}

/* map json: the value at the plan's dotted path; 0 if the record is not
 * JSON or lacks the path.  Jansson keeps a value's bytes in its own
 * buffers, so the result is copied to scratch before the record is freed. */
static int
ops_map_json(struct ops_map *m, const struct record *r, struct record *out)
{
	const char	*path = m->p->arg, *seg, *dot;
	json_t		*root, *v;
	char		 key[256], *big = NULL;
	size_t		 seglen, index, need;
	int		 found = 0;

	root = json_loadb(r->data != NULL ? r->data : "", r->len,
	    JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
	if (root == NULL)
		return (0);
	v = root;
	for (seg = path; v != NULL; seg = dot + 1) {
		dot = strchr(seg, '.');
		seglen = dot != NULL ? (size_t)(dot - seg) : strlen(seg);
		if (json_is_object(v)) {
			if (seglen < sizeof key) {
				memcpy(key, seg, seglen);
				key[seglen] = '\0';
				v = json_object_get(v, key);
			} else {
				big = xstrndup(seg, seglen);
				v = json_object_get(v, big);
				free(big);
			}
		} else if (json_is_array(v) && ops_is_index(seg, seglen, &index))
			v = json_array_get(v, index);
		else
			v = NULL;
		if (dot == NULL)
			break;
	}
	if (v == NULL)
		goto out;
	found = 1;
	*out = (struct record){ NULL, 0, 0, 0, NULL, 0 };
	if (json_is_null(v))
		out->null = 1;
	else if (json_is_string(v)) {
		out->len = json_string_length(v);
		out->data = ops_map_scratch(m, out->len);
		if (out->len > 0)
			memcpy(m->scratch, json_string_value(v), out->len);
	} else {
		need = json_dumpb(v, m->scratch, m->size,
		    JSON_COMPACT | JSON_ENCODE_ANY);
		if (need > m->size) {
			ops_map_scratch(m, need);
			need = json_dumpb(v, m->scratch, m->size,
			    JSON_COMPACT | JSON_ENCODE_ANY);
		}
		out->data = m->scratch;
		out->len = need;
	}
out:
	json_decref(root);
	return (found);
}

/* Transform a record with a map; maps pass a null through unchanged. */
static int
ops_map_push_cb(struct op *op, const struct record *r)
{
	struct ops_map	*m = (struct ops_map *)op;
	struct record	 out = *r;

	if (r->null)
		return (op_next(op, r));
	switch (m->p->type) {
	case PLAN_OP_MAP_UPPER:
	case PLAN_OP_MAP_LOWER:
		ops_map_case(m, r, &out, m->p->type == PLAN_OP_MAP_UPPER);
		break;
	case PLAN_OP_MAP_TRIM:
		while (out.len > 0 && ops_is_space(out.data[0])) {
			out.data++;
			out.len--;
		}
		while (out.len > 0 && ops_is_space(out.data[out.len - 1]))
			out.len--;
		break;
	case PLAN_OP_MAP_FIELD:
		/* Empty where there is no such field. */
		ops_field(m->p->arg, m->p->arglen, m->p->index, r, &out);
		break;
	case PLAN_OP_MAP_JSON:
		if (!ops_map_json(m, r, &out)) {
			op_drop(op);
			return (OP_OK);
		}
		break;
	default:
		fatalx("%s: not a map: %d", __func__, m->p->type);
	}
	return (op_next(op, &out));
}

/* Pick key_by's key or value from a record: 0 if it has none. */
static int
ops_pick(struct ops_key_by *k, const struct plan_pick *pick,
    const struct record *r, const char **data, size_t *len)
{
	struct record	 out = *r;
	PCRE2_SIZE	*ov;
	PCRE2_SPTR	 subject;
	int		 rc;

	if (pick->whole) {
		*data = r->data;
		*len = r->len;
		return (1);
	}
	if (pick->regex == NULL) {
		if (!ops_field(pick->sep, pick->seplen, pick->index, r, &out))
			return (0);
		*data = out.data;
		*len = out.len;
		return (1);
	}
	subject = r->data != NULL ? (PCRE2_SPTR)r->data : (PCRE2_SPTR)"";
	rc = pcre2_match(pick->regex, subject, r->len, 0, 0, k->md, NULL);
	if (rc == PCRE2_ERROR_NOMATCH)
		return (0);
	if (rc < 0)
		return (-1);
	ov = pcre2_get_ovector_pointer(k->md);
	if (pick->group >= rc || ov[2 * pick->group] == PCRE2_UNSET)
		return (0);
	*data = r->data == NULL ? "" : r->data + ov[2 * pick->group];
	*len = ov[2 * pick->group + 1] - ov[2 * pick->group];
	return (1);
}

/* key_by: a record to a pair; one without the key or value (or null) is
 * dropped. */
static int
ops_key_by_push_cb(struct op *op, const struct record *r)
{
	struct ops_key_by	*k = (struct ops_key_by *)op;
	struct record		 out = { NULL, 0, 0, PLAN_KIND_PAIR, NULL,
				     0 };
	int			 rc;

	if (r->null) {
		op_drop(op);
		return (OP_OK);
	}
	if ((rc = ops_pick(k, &k->p->key, r, &out.key, &out.klen)) == 1)
		rc = ops_pick(k, &k->p->value, r, &out.data, &out.len);
	if (rc == -1)
		return (op_fail(op, "key_by: the regex failed"));
	if (rc == 0) {
		op_drop(op);
		return (OP_OK);
	}
	if (out.key == NULL)
		out.key = "";
	return (op_next(op, &out));
}

/* key_by of the whole record as key and value, of a block of pieces:
 * the next op takes them as pairs in one call (a piece is never null,
 * so none is dropped). */
static int
ops_key_by_pieces_cb(struct op *op, const char *data, size_t len, char sep)
{
	return (op->next->push_pair_pieces(op->next, data, len, sep));
}

/* Free a key_by op; its patterns are the plan's. */
static void
ops_key_by_free_cb(struct op *op)
{
	struct ops_key_by	*k = (struct ops_key_by *)op;

	pcre2_match_data_free(k->md);
	free(k);
}

/* Make a key_by op. */
static struct op *
ops_key_by_create(const struct plan_op *p)
{
	struct ops_key_by	*k;

	k = xcalloc(1, sizeof *k);
	k->op.push = ops_key_by_push_cb;
	k->op.finish = ops_finish_next_cb;
	k->op.free = ops_key_by_free_cb;
	k->p = p;
	/* Room for the larger group either pick names. */
	if ((k->md = pcre2_match_data_create(256, NULL)) == NULL)
		fatalx("pcre2: out of memory");
	return (&k->op);
}

/* map key, map value: a pair or group to a plain record. */
static int
ops_map_kv_push_cb(struct op *op, const struct record *r)
{
	struct ops_map	*m = (struct ops_map *)op;
	struct record	 out = { NULL, 0, 0, PLAN_KIND_RECORD, NULL, 0 };

	if (r->kind == PLAN_KIND_RECORD)
		return (op_fail(op, "map %s: a plain record",
		    m->p->type == PLAN_OP_MAP_KEY ? "key" : "value"));
	if (m->p->type == PLAN_OP_MAP_KEY) {
		out.data = r->key;
		out.len = r->klen;
	} else {
		out.data = r->data;
		out.len = r->len;
		out.null = r->null;
	}
	return (op_next(op, &out));
}

/* flat_map split: each piece a record, empty ones too (Python's
 * str.split(sep)); a null passes through. */
static int
ops_split_push_cb(struct op *op, const struct record *r)
{
	struct ops_map	*m = (struct ops_map *)op;
	const char	*sep = m->p->arg, *p, *end, *s;
	size_t		 seplen = m->p->arglen;
	struct record	 piece = { NULL, 0, 0, 0, NULL, 0 };
	int		 rc;

	if (r->null)
		return (op_next(op, r));
	p = r->data;
	end = r->data + r->len;
	for (;;) {
		if ((s = p == NULL ? NULL : ops_find(p, end, sep, seplen)) ==
		    NULL)
			s = end;
		piece.data = p;
		piece.len = (size_t)(s - p);
		if ((rc = op_next(op, &piece)) != OP_OK)
			return (rc);
		if (s == end)
			return (OP_OK);
		p = s + seplen;
	}
}

/* flat_map split at one byte, of a block of lines: the next op takes the
 * pieces in one call. */
static int
ops_split_lines_cb(struct op *op, const char *data, size_t len, size_t *used)
{
	struct ops_map	*m = (struct ops_map *)op;

	*used = len;
	return (op->next->push_pieces(op->next, data, len, m->p->arg[0]));
}

/* Free a map op. */
static void
ops_map_free_cb(struct op *op)
{
	struct ops_map	*m = (struct ops_map *)op;

	free(m->scratch);
	free(m);
}

/* One step of splitmix64. */
static uint64_t
ops_splitmix64(uint64_t *x)
{
	uint64_t	z = (*x += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return (z ^ (z >> 31));
}

/* Rotate left. */
static inline uint64_t
ops_rotl(uint64_t x, int k)
{
	return ((x << k) | (x >> (64 - k)));
}

/* The next number of xoshiro256**. */
static inline uint64_t
ops_xoshiro(uint64_t *s)
{
	uint64_t	result = ops_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = ops_rotl(s[3], 45);
	return (result);
}

/* Keep a record with the sample's probability. */
static int
ops_sample_push_cb(struct op *op, const struct record *r)
{
	struct ops_sample	*s = (struct ops_sample *)op;

	/* 53 random bits as a double in [0, 1): fraction 1 keeps all. */
	if ((double)(ops_xoshiro(s->s) >> 11) * 0x1.0p-53 < s->fraction)
		return (op_next(op, r));
	return (OP_OK);
}

/* Make a sample op: the same seed and partition draw the same numbers,
 * whatever worker runs the task. */
static struct op *
ops_sample_create(const struct plan_op *p, int partition)
{
	struct ops_sample	*s;
	uint64_t		 x;
	int			 i;

	s = xcalloc(1, sizeof *s);
	s->op.push = ops_sample_push_cb;
	s->op.finish = ops_finish_next_cb;
	s->op.free = ops_free_cb;
	s->fraction = p->fraction;
	x = (uint64_t)p->seed ^ ((uint64_t)partition * 0x9e3779b97f4a7c15ULL);
	for (i = 0; i < 4; i++)
		s->s[i] = ops_splitmix64(&x);
	return (&s->op);
}

/* Pass the first records; stop the source after the last one. */
static int
ops_limit_push_cb(struct op *op, const struct record *r)
{
	struct ops_limit	*l = (struct ops_limit *)op;
	int			 rc;

	if (l->passed >= l->limit)
		return (OP_STOP);
	l->passed++;
	if ((rc = op_next(op, r)) != OP_OK)
		return (rc);
	return (l->passed >= l->limit ? OP_STOP : OP_OK);
}

/* Make a map-like op that keeps a pointer to its plan op. */
static struct op *
ops_map_create(const struct plan_op *p,
    int (*push)(struct op *, const struct record *))
{
	struct ops_map	*m;

	m = xcalloc(1, sizeof *m);
	m->op.push = push;
	m->op.finish = ops_finish_next_cb;
	m->op.free = ops_map_free_cb;
	m->p = p;
	return (&m->op);
}

/* Make the op for one plan op; NULL with *err if it cannot be made. */
static struct op *
ops_create(const struct plan_op *p, int partition, struct chain *chain,
    char **err)
{
	struct ops_contains	*f;
	struct ops_broadcast	*b;
	struct ops_limit	*l;
	const struct held_set *set;

	switch (p->type) {
	case PLAN_OP_FILTER_CONTAINS:
		f = xcalloc(1, sizeof *f);
		f->op.push = ops_contains_push_cb;
		f->op.finish = ops_finish_next_cb;
		f->op.free = ops_free_cb;
		f->needle = p->arg;
		f->len = p->arglen;
		return (&f->op);
	case PLAN_OP_FILTER_REGEX:
		return (ops_regex_create(p));
	case PLAN_OP_FILTER_BROADCAST:
		if ((set = held_set_get(p->broadcast, err)) == NULL)
			return (NULL);
		b = xcalloc(1, sizeof *b);
		b->op.push = ops_broadcast_push_cb;
		b->op.finish = ops_finish_next_cb;
		b->op.free = ops_free_cb;
		b->set = set;
		b->id = p->broadcast;
		return (&b->op);
	case PLAN_OP_MAP_UPPER:
	case PLAN_OP_MAP_LOWER:
	case PLAN_OP_MAP_TRIM:
	case PLAN_OP_MAP_FIELD:
	case PLAN_OP_MAP_JSON:
		return (ops_map_create(p, ops_map_push_cb));
	case PLAN_OP_FLAT_MAP_SPLIT:
		return (ops_map_create(p, ops_split_push_cb));
	case PLAN_OP_SAMPLE:
		return (ops_sample_create(p, partition));
	case PLAN_OP_LIMIT:
		l = xcalloc(1, sizeof *l);
		l->op.push = ops_limit_push_cb;
		l->op.finish = ops_finish_next_cb;
		l->op.free = ops_free_cb;
		l->limit = p->limit;
		return (&l->op);
	case PLAN_OP_PIPE:
		return (pipe_create(p->arg));
	case PLAN_OP_UDF:
		return (udf_op_create(p, chain, err));
	case PLAN_OP_PYTHON:
		return (python_op_create(p, 1, chain, err));
	case PLAN_OP_KEY_BY:
		return (ops_key_by_create(p));
	case PLAN_OP_MAP_KEY:
	case PLAN_OP_MAP_VALUE:
		return (ops_map_create(p, ops_map_kv_push_cb));
	default:
		/* A keyed op this worker cannot run. */
		xasprintf(err, "%s: not supported by this worker",
		    plan_kind_name(p->in_kind));
		return (NULL);
	}
	fatalx("%s: unknown op type %d", __func__, p->type);
}

/* Build the chain: the plan's ops, then the sink. */
struct chain *
chain_create(const struct plan *plan, int partition, struct output *out,
    struct op *sink, char **err)
{
	struct chain	*chain;
	struct op	*op, *next;
	size_t		 i, first;

	*err = NULL;
	chain = xcalloc(1, sizeof *chain);
	chain->out = out;
	chain->partition = partition;

	sink->next = NULL;
	sink->chain = chain;
	next = sink;
	for (i = plan->nops; i > 0; i = first) {
		/* Consecutive python ops are one stage: records stay Python
		 * objects between them. */
		first = i - 1;
		while (plan->ops[first].type == PLAN_OP_PYTHON && first > 0 &&
		    plan->ops[first - 1].type == PLAN_OP_PYTHON)
			first--;
		if (first < i - 1)
			op = python_op_create(&plan->ops[first], i - first,
			    chain, err);
		else
			op = ops_create(&plan->ops[first], partition, chain,
			    err);
		if (op == NULL) {
			chain->head = next;
			chain_free(chain);
			if (*err == NULL)
				*err = xstrdup("operation failed to start");
			return (NULL);
		}
		op->next = next;
		op->chain = chain;
		if (op->push == ops_key_by_push_cb &&
		    next->push_pair_pieces != NULL &&
		    plan->ops[first].key.whole && plan->ops[first].value.whole)
			op->push_pieces = ops_key_by_pieces_cb;
		if (op->push == ops_split_push_cb && next->push_pieces != NULL &&
		    plan->ops[first].arglen == 1)
			op->push_lines = ops_split_lines_cb;
		next = op;
	}
	chain->head = next;
	return (chain);
}

/* Free a chain and its ops. */
void
chain_free(struct chain *chain)
{
	struct op	*op, *next;

	if (chain == NULL)
		return;
	for (op = chain->head; op != NULL; op = next) {
		next = op->next;
		op->free(op);
	}
	free(chain->error);
	free(chain);
}

/* Push a record from the source. */
int
chain_push(struct chain *chain, const struct record *r)
{
	int	rc;

	char	*err;

	if (chain->stopped)
		return (OP_STOP);
	if (chain->out != NULL && (++chain->pushed & (CHAIN_TICK - 1)) == 0) {
		switch (output_tick(chain->out, &err)) {
		case -1:
			chain->stopped = 1;
			return (op_fail_take(chain->head, err));
		case 1:
			chain->stopped = chain->halted = 1;
			return (OP_STOP);
		}
	}
	rc = chain->head->push(chain->head, r);
	if (rc != OP_OK)
		chain->stopped = 1;
	return (rc);
}

int
chain_halted(const struct chain *chain)
{
	return (chain->halted);
}

/* Does the chain take whole blocks of lines? */
int
chain_takes_lines(const struct chain *chain)
{
	return (chain->head->push_lines != NULL);
}

/* Push a block of whole lines from the source. */
int
chain_push_lines(struct chain *chain, const char *data, size_t len,
    size_t *used, int64_t *lines)
{
	char	*err;
	int	rc;

	*used = 0;
	*lines = 0;
	if (chain->stopped)
		return (OP_STOP);
	/* A block is many records: emberd's stop and the flush of what
	 * has waited are looked at once a block. */
	if (chain->out != NULL) {
		switch (output_tick(chain->out, &err)) {
		case -1:
			chain->stopped = 1;
			return (op_fail_take(chain->head, err));
		case 1:
			chain->stopped = chain->halted = 1;
			return (OP_STOP);
		}
	}
	chain->lines = -1;
	rc = chain->head->push_lines(chain->head, data, len, used);
	*lines = chain->lines >= 0 ? chain->lines :
	    (int64_t)ops_count_byte(data, *used, '\n');
	if (rc != OP_OK)
		chain->stopped = 1;
	return (rc);
}

/* The head counted the lines it took: spare the chain a pass. */
void
chain_lines_taken(struct op *op, size_t lines)
{
	if (op == op->chain->head)
		op->chain->lines = (int64_t)lines;
}

#if defined(__SSE2__) && defined(__x86_64__)
/* Count byte c in [p, p + len) 32 bytes a compare, up to the last whole
 * 32; *done is where it stopped.  For CPUs with AVX2. */
__attribute__((target("avx2"))) static size_t
ops_count_byte_avx2(const char *p, size_t len, char c, size_t *done)
{
	__m256i		 needle = _mm256_set1_epi8(c), acc, sum;
	size_t		 n = 0, i = 0;
	int		 k;

	while (i + 32 <= len) {
		/* Byte counters, summed before any can pass 255. */
		acc = _mm256_setzero_si256();
		for (k = 0; k < 255 && i + 32 <= len; k++, i += 32)
			acc = _mm256_sub_epi8(acc, _mm256_cmpeq_epi8(needle,
			    _mm256_loadu_si256((const __m256i *)(p + i))));
		sum = _mm256_sad_epu8(acc, _mm256_setzero_si256());
		n += (size_t)_mm256_extract_epi64(sum, 0) +
		    (size_t)_mm256_extract_epi64(sum, 1) +
		    (size_t)_mm256_extract_epi64(sum, 2) +
		    (size_t)_mm256_extract_epi64(sum, 3);
	}
	*done = i;
	return (n);
}
#endif

/* How many times byte c is in [p, p + len). */
size_t
ops_count_byte(const char *p, size_t len, char c)
{
	size_t		 n = 0, i = 0;
#if defined(__SSE2__) && defined(__x86_64__)
	__m128i		 needle = _mm_set1_epi8(c), acc, sum;
	int		 k;

	if (__builtin_cpu_supports("avx2"))
		n = ops_count_byte_avx2(p, len, c, &i);
	while (i + 16 <= len) {
		/* Byte counters, summed before any can pass 255. */
		acc = _mm_setzero_si128();
		for (k = 0; k < 255 && i + 16 <= len; k++, i += 16)
			acc = _mm_sub_epi8(acc, _mm_cmpeq_epi8(needle,
			    _mm_loadu_si128((const __m128i *)(p + i))));
		sum = _mm_sad_epu8(acc, _mm_setzero_si128());
		n += (size_t)_mm_cvtsi128_si64(sum) +
		    (size_t)_mm_extract_epi16(sum, 4);
	}
#endif
	for (; i < len; i++)
		n += p[i] == c;
	return (n);
}

/* Finish the chain once the source has ended. */
int
chain_finish(struct chain *chain)
{
	int	rc;

	rc = chain->head->finish(chain->head);
	if (rc == OP_FAIL)
		return (rc);
	if (chain->error != NULL)
		return (OP_FAIL);
	return (OP_OK);
}

/* The partition the chain runs. */
int
chain_partition(const struct chain *chain)
{
	return (chain->partition);
}

/* Records the ops dropped. */
int64_t
chain_dropped(const struct chain *chain)
{
	return (chain->dropped);
}

/* The chain's error, or NULL. */
const char *
chain_error(const struct chain *chain)
{
	return (chain->error);
}
