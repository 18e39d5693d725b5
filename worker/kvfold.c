#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keyed.h"
#include "kvfold.h"
#include "log.h"
#include "shuffle_file.h"
#include "xmalloc.h"

struct kv_fold {
	enum plan_kv_fn	 fn;
	const char	*sep;
	size_t		 seplen;
	int		 partials;

	int64_t		 n;		/* values folded */
	int		 real;		/* sum, min, max: a double */
	int64_t		 i;
	double		 r;

	char		*buf;		/* concat's, a result's text */
	size_t		 used, size;
};

/* Make a fold. */
struct kv_fold *
kv_fold_create(enum plan_kv_fn fn, const char *sep, size_t seplen,
    int partials)
{
	struct kv_fold	*f;

	f = xcalloc(1, sizeof *f);
	f->fn = fn;
	f->sep = sep;
	f->seplen = seplen;
	f->partials = partials;
	f->size = 64;
	f->buf = xmalloc(f->size);
	return (f);
}

/* Free a fold. */
void
kv_fold_free(struct kv_fold *f)
{
	if (f == NULL)
		return;
	free(f->buf);
	free(f);
}

/* Begin a key. */
void
kv_fold_begin(struct kv_fold *f)
{
	f->n = 0;
	f->real = 0;
	f->i = 0;
	f->r = 0;
	f->used = 0;
}

/* Append bytes to the buffer. */
static void
kv_fold_append(struct kv_fold *f, const char *p, size_t len)
{
	if (f->used + len > f->size) {
		f->size = (f->used + len) * 2;
		f->buf = xrealloc(f->buf, f->size);
	}
	if (len > 0)
		memcpy(f->buf + f->used, p, len);
	f->used += len;
}

/* Fail: the key's value is not a number. */
static int
kv_fold_nan(const char *key, size_t klen, const char *v, size_t vlen,
    int vnull, char **err)
{
	char	k[KEYED_SHOWN], s[KEYED_SHOWN];

	keyed_show(key, klen, k, sizeof k);
	if (vnull)
		xasprintf(err, "reduce_by_key: key \"%s\": value null is not "
		    "a number", k);
	else {
		keyed_show(v, vlen, s, sizeof s);
		xasprintf(err, "reduce_by_key: key \"%s\": value \"%s\" is "
		    "not a number", k, s);
	}
	return (-1);
}

/* Fold a number in, exact while the values are integers that fit. */
static void
kv_fold_number(struct kv_fold *f, int kind, int64_t i, double d)
{
	int64_t	sum;

	if (f->n++ == 0) {
		f->real = kind == 2;
		f->i = i;
		f->r = d;
		return;
	}
	if (!f->real && kind == 1) {
		switch (f->fn) {
		case PLAN_KV_SUM:
		case PLAN_KV_COUNT:
			if (!__builtin_add_overflow(f->i, i, &sum)) {
				f->i = sum;
				return;
			}
			break;	/* on as a real */
		case PLAN_KV_MIN:
			f->i = i < f->i ? i : f->i;
			return;
		case PLAN_KV_MAX:
			f->i = i > f->i ? i : f->i;
			return;
		case PLAN_KV_CONCAT:
			fatalx("%s: concat", __func__);
		}
	}
	if (!f->real) {
		f->real = 1;
		f->r = (double)f->i;
	}
	if (kind == 1)
		d = (double)i;
	if (f->fn == PLAN_KV_MIN)
		f->r = d < f->r ? d : f->r;
	else if (f->fn == PLAN_KV_MAX)
		f->r = d > f->r ? d : f->r;
	else
		f->r += d;
}

/* Fold a value in. */
int
kv_fold_add(struct kv_fold *f, const char *key, size_t klen, const char *v,
    size_t vlen, int vnull, char **err)
{
	int64_t	i = 0;
	double	d = 0;
	int	kind;

	if (f->fn == PLAN_KV_CONCAT) {
		if (f->n++ > 0)
			kv_fold_append(f, f->sep, f->seplen);
		kv_fold_append(f, v, vnull ? 0 : vlen);
		return (0);
	}
	if (f->fn == PLAN_KV_COUNT && !f->partials) {
		kv_fold_number(f, 1, 1, 0);
		return (0);
	}
	if (vnull || (kind = shuffle_number_parse(v, vlen, &i, &d)) == 0)
		return (kv_fold_nan(key, klen, v, vlen, vnull, err));
	kv_fold_number(f, kind, i, d);
	return (0);
}

/* A value alone as a partial: no number is formatted per record. */
int
kv_fold_partial(struct kv_fold *f, const char *key, size_t klen,
    const char *v, size_t vlen, int vnull, const char **out, size_t *outlen,
    char **err)
{
	int64_t	i;
	double	d;

	switch (f->fn) {
	case PLAN_KV_COUNT:
		*out = "1";
		*outlen = 1;
		return (0);
	case PLAN_KV_CONCAT:
		break;
	default:
		if (vnull || shuffle_number_parse(v, vlen, &i, &d) == 0)
			return (kv_fold_nan(key, klen, v, vlen, vnull, err));
		break;
	}
	*out = vnull || v == NULL ? "" : v;
	*outlen = vnull ? 0 : vlen;
	return (0);
}

/* Write a real as the shortest text that reads back the same. */
static int
kv_fold_real(char *buf, size_t size, double r)
{
	int	prec, n = 0;

	for (prec = 15; prec <= 17; prec++) {
		n = snprintf(buf, size, "%.*g", prec, r);
		if (strtod(buf, NULL) == r)
			break;
	}
	return (n);
}

/* Give the key's result. */
void
kv_fold_end(struct kv_fold *f, const char **v, size_t *vlen)
{
	char	num[64];
	int	n;

	if (f->fn != PLAN_KV_CONCAT) {
		if (f->real)
			n = kv_fold_real(num, sizeof num, f->r);
		else
			n = snprintf(num, sizeof num, "%lld", (long long)f->i);
		f->used = 0;
		kv_fold_append(f, num, (size_t)n);
	}
	*v = f->buf;
	*vlen = f->used;
}
