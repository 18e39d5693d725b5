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

	struct kv_acc	 acc;

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
	memset(&f->acc, 0, sizeof f->acc);
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
void
kv_acc_fold(enum plan_kv_fn fn, struct kv_acc *a, int kind, int64_t i,
    double d)
{
	int64_t	sum;

	if (a->n++ == 0) {
		a->real = kind == 2;
		if (a->real)
			a->v.r = d;
		else
			a->v.i = i;
		return;
	}
	if (!a->real && kind == 1) {
		switch (fn) {
		case PLAN_KV_SUM:
		case PLAN_KV_COUNT:
			if (!__builtin_add_overflow(a->v.i, i, &sum)) {
				a->v.i = sum;
				return;
			}
			break;	/* on as a real */
		case PLAN_KV_MIN:
			a->v.i = i < a->v.i ? i : a->v.i;
			return;
		case PLAN_KV_MAX:
			a->v.i = i > a->v.i ? i : a->v.i;
			return;
		case PLAN_KV_CONCAT:
			fatalx("%s: concat", __func__);
		}
	}
	if (!a->real) {
		a->real = 1;
		a->v.r = (double)a->v.i;
	}
	if (kind == 1)
		d = (double)i;
	if (fn == PLAN_KV_MIN)
		a->v.r = d < a->v.r ? d : a->v.r;
	else if (fn == PLAN_KV_MAX)
		a->v.r = d > a->v.r ? d : a->v.r;
	else
		a->v.r += d;
}

/* Read a value as a number to fold. */
int
kv_fold_read(enum plan_kv_fn fn, int partials, const char *key, size_t klen,
    const char *v, size_t vlen, int vnull, int *kind, int64_t *i, double *d,
    char **err)
{
	if (fn == PLAN_KV_CONCAT)
		fatalx("%s: concat", __func__);
	if (fn == PLAN_KV_COUNT && !partials) {
		*kind = 1;
		*i = 1;
		return (0);
	}
	if (vnull || (*kind = shuffle_number_parse(v, vlen, i, d)) == 0)
		return (kv_fold_nan(key, klen, v, vlen, vnull, err));
	return (0);
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
		if (f->acc.n++ > 0)
			kv_fold_append(f, f->sep, f->seplen);
		kv_fold_append(f, v, vnull ? 0 : vlen);
		return (0);
	}
	if (kv_fold_read(f->fn, f->partials, key, klen, v, vlen, vnull,
	    &kind, &i, &d, err) == -1)
		return (-1);
	kv_acc_fold(f->fn, &f->acc, kind, i, d);
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

/* Write an int64 in decimal, without printf's machinery: the map and
 * reduce sides write one per key. */
static size_t
kv_fold_int(char *buf, int64_t v)
{
	char		 tmp[24];
	uint64_t	 u = v < 0 ? -(uint64_t)v : (uint64_t)v;
	size_t		 n = 0, len = 0;

	do {
		tmp[n++] = (char)('0' + u % 10);
		u /= 10;
	} while (u != 0);
	if (v < 0)
		buf[len++] = '-';
	while (n > 0)
		buf[len++] = tmp[--n];
	return (len);
}

/* Write an accumulator's value. */
size_t
kv_acc_text(const struct kv_acc *a, int keep_real, char *buf, size_t size)
{
	int	n;

	if (size < KV_ACC_TEXT)
		fatalx("%s: %zu bytes", __func__, size);
	if (!a->real)
		return (kv_fold_int(buf, a->v.i));
	n = kv_fold_real(buf, size, a->v.r);
	if (keep_real && strcspn(buf, ".eEn") == (size_t)n) {
		memcpy(buf + n, ".0", 3);
		n += 2;
	}
	return ((size_t)n);
}

/* Give the key's result. */
void
kv_fold_end(struct kv_fold *f, const char **v, size_t *vlen)
{
	char	num[KV_ACC_TEXT];
	size_t	n;

	if (f->fn != PLAN_KV_CONCAT) {
		n = kv_acc_text(&f->acc, 0, num, sizeof num);
		f->used = 0;
		kv_fold_append(f, num, n);
	}
	*v = f->buf;
	*vlen = f->used;
}
