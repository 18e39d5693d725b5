/*
 * Tests for common/shuffle_file.c and shuffle_writer.c: entries written
 * and read back (records, pairs, groups, NUL bytes, nulls, empty buckets,
 * 1 MB keys), sorting (stable, numeric, descending), spilling (the same
 * file as without), combining, a corrupt or truncated file refused, the
 * merge's ties, seek and the boundaries of a sort.
 */
#include <sys/stat.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shuffle_file.h"
#include "suites.h"
#include "xmalloc.h"

#define SH_TEMPLATE	"/tmp/ember-check-shuffle-XXXXXX"

static char	sh_path[] = SH_TEMPLATE;
static int	sh_dir = -1;

static void
sh_setup(void)
{
	memcpy(sh_path, SH_TEMPLATE, sizeof sh_path);
	ck_assert_ptr_nonnull(mkdtemp(sh_path));
	sh_dir = open(sh_path, O_RDONLY|O_DIRECTORY);
	ck_assert_int_ne(sh_dir, -1);
}

/* Remove the directory, which must hold only the files tests made. */
static void
sh_teardown(void)
{
	DIR		*d;

	d = fdopendir(openat(sh_dir, ".", O_RDONLY|O_DIRECTORY));
	struct dirent	*de;

	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d)) != NULL)
		if (de->d_name[0] != '.' || (strcmp(de->d_name, ".") != 0 &&
		    strcmp(de->d_name, "..") != 0))
			unlinkat(sh_dir, de->d_name, 0);
	closedir(d);
	close(sh_dir);
	ck_assert_int_eq(rmdir(sh_path), 0);
}

/* The names in the directory, for what is left behind. */
static int
sh_count_files(void)
{
	DIR		*d;

	d = fdopendir(openat(sh_dir, ".", O_RDONLY|O_DIRECTORY));
	struct dirent	*de;
	int		 n = 0;

	while ((de = readdir(d)) != NULL)
		n += strcmp(de->d_name, ".") != 0 &&
		    strcmp(de->d_name, "..") != 0;
	closedir(d);
	return (n);
}

/* A pair of strings. */
static struct shuffle_entry
pair(const char *k, const char *v)
{
	struct shuffle_entry	e;

	memset(&e, 0, sizeof e);
	e.kind = SHUFFLE_KIND_PAIR;
	e.key = k;
	e.klen = strlen(k);
	e.value = v;
	e.vlen = v == NULL ? 0 : strlen(v);
	e.vnull = v == NULL;
	return (e);
}

/* A writer, failing the test if it cannot be made. */
static struct shuffle_writer *
writer(const char *name, int buckets, enum shuffle_order order, int desc,
    size_t memory, shuffle_combine_fn fn)
{
	struct shuffle_writer	*w;
	char			*err = NULL;

	w = shuffle_writer_create(sh_dir, name, buckets, order, desc, memory,
	    fn, NULL, &err);
	ck_assert_msg(w != NULL, "%s", err);
	return (w);
}

static void
add(struct shuffle_writer *w, int bucket, struct shuffle_entry e)
{
	char	*err = NULL;

	ck_assert_msg(shuffle_writer_add(w, bucket, &e, &err) == 0, "%s", err);
}

static int64_t
commit(struct shuffle_writer *w)
{
	int64_t	 bytes = -1;
	char	*err = NULL;

	ck_assert_msg(shuffle_writer_commit(w, &bytes, &err) == 0, "%s", err);
	shuffle_writer_free(w);
	return (bytes);
}

static struct shuffle_reader *
reader(const char *name, int bucket)
{
	struct shuffle_reader	*r;
	char			*err = NULL;

	r = shuffle_reader_open(sh_dir, name, bucket, &err);
	ck_assert_msg(r != NULL, "%s", err);
	return (r);
}

/* Read the next entry, which must be there. */
static struct shuffle_entry
next(struct shuffle_reader *r)
{
	struct shuffle_entry	e;
	char			*err = NULL;

	ck_assert_msg(shuffle_reader_next(r, &e, &err) == 1, "%s",
	    err != NULL ? err : "end");
	return (e);
}

/* Check the end of the bucket. */
static void
end(struct shuffle_reader *r)
{
	struct shuffle_entry	e;
	char			*err = NULL;

	ck_assert_msg(shuffle_reader_next(r, &e, &err) == 0, "%s",
	    err != NULL ? err : "not at end");
}

/* A value's bytes as a number. */
static long
num(const char *p, size_t n)
{
	char	b[32];

	ck_assert_uint_lt(n, sizeof b);
	memcpy(b, p, n);
	b[n] = '\0';
	return (strtol(b, NULL, 10));
}

static void
eq_bytes(const char *p, size_t n, const char *q, size_t m)
{
	ck_assert_uint_eq(n, m);
	ck_assert(n == 0 || memcmp(p, q, n) == 0);
}

/* A file's bytes. */
static char *
slurp(const char *name, size_t *len)
{
	struct stat	 st;
	char		*p;
	int		 fd = openat(sh_dir, name, O_RDONLY);

	ck_assert_int_ne(fd, -1);
	ck_assert_int_eq(fstat(fd, &st), 0);
	p = xmalloc((size_t)st.st_size + 1);
	ck_assert_int_eq(read(fd, p, (size_t)st.st_size), st.st_size);
	close(fd);
	*len = (size_t)st.st_size;
	return (p);
}

static void
spew(const char *name, const char *p, size_t len)
{
	int	fd = openat(sh_dir, name, O_WRONLY|O_CREAT|O_TRUNC, 0600);

	ck_assert_int_ne(fd, -1);
	ck_assert_int_eq(write(fd, p, len), (ssize_t)len);
	close(fd);
}

START_TEST(test_round_trip)
{
	struct shuffle_writer	*w;
	struct shuffle_reader	*r;
	struct shuffle_entry	 e, rec, grp;
	static const char	 nul[] = "a\0b";
	static const char	 vals[] = "\0\0\0\002hi\xff\xff\xff\xfb";
	char			*big;
	int64_t			 bytes;
	struct stat		 st;

	big = xmalloc(1 << 20);
	memset(big, 'k', 1 << 20);
	big[7] = '\0';
	w = writer("f", 4, SHUFFLE_ORDER_NONE, 0, 1 << 20, NULL);
	memset(&rec, 0, sizeof rec);
	rec.kind = SHUFFLE_KIND_RECORD;
	rec.key = nul;
	rec.klen = 3;
	add(w, 0, rec);
	rec.key = NULL;
	rec.klen = 0;
	rec.knull = 1;
	add(w, 0, rec);
	add(w, 1, pair("k", NULL));
	e = pair("", "");
	e.key = big;
	e.klen = 1 << 20;
	add(w, 1, e);
	add(w, 1, pair("after", "big"));
	memset(&grp, 0, sizeof grp);
	grp.kind = SHUFFLE_KIND_GROUP;
	grp.key = "g";
	grp.klen = 1;
	grp.value = vals;
	grp.vlen = sizeof vals - 1;
	add(w, 3, grp);
	bytes = commit(w);
	ck_assert_int_eq(fstatat(sh_dir, "f", &st, 0), 0);
	ck_assert_int_eq(bytes, st.st_size);
	ck_assert_int_eq(sh_count_files(), 1);

	r = reader("f", 0);
	ck_assert_int_eq(shuffle_reader_buckets(r), 4);
	ck_assert_int_eq(shuffle_reader_count(r), 2);
	e = next(r);
	ck_assert_int_eq(e.kind, SHUFFLE_KIND_RECORD);
	eq_bytes(e.key, e.klen, nul, 3);
	ck_assert(!e.knull);
	e = next(r);
	ck_assert(e.knull);
	end(r);
	shuffle_reader_free(r);
	r = reader("f", 1);
	e = next(r);
	ck_assert_int_eq(e.kind, SHUFFLE_KIND_PAIR);
	eq_bytes(e.key, e.klen, "k", 1);
	ck_assert(e.vnull);
	e = next(r);
	eq_bytes(e.key, e.klen, big, 1 << 20);
	ck_assert(!e.vnull);
	ck_assert_uint_eq(e.vlen, 0);
	e = next(r);
	eq_bytes(e.key, e.klen, "after", 5);
	eq_bytes(e.value, e.vlen, "big", 3);
	end(r);
	shuffle_reader_free(r);
	r = reader("f", 2);
	ck_assert_int_eq(shuffle_reader_count(r), 0);
	end(r);
	shuffle_reader_free(r);
	r = reader("f", 3);
	e = next(r);
	ck_assert_int_eq(e.kind, SHUFFLE_KIND_GROUP);
	eq_bytes(e.value, e.vlen, vals, sizeof vals - 1);
	end(r);
	shuffle_reader_free(r);
	free(big);
}
END_TEST

START_TEST(test_refused)
{
	struct shuffle_writer	*w;
	char			*err = NULL;
	struct shuffle_entry	 e = pair("x", "1");

	ck_assert_ptr_null(shuffle_writer_create(sh_dir, "f", 0,
	    SHUFFLE_ORDER_NONE, 0, 0, NULL, NULL, &err));
	free(err);
	ck_assert_ptr_null(shuffle_writer_create(sh_dir, "../f", 1,
	    SHUFFLE_ORDER_NONE, 0, 0, NULL, NULL, &err));
	free(err);
	ck_assert_ptr_null(shuffle_reader_open(sh_dir, "../f", 0, &err));
	free(err);
	err = NULL;
	w = writer("f", 2, SHUFFLE_ORDER_KEY_NUMERIC, 0, 0, NULL);
	ck_assert_int_eq(shuffle_writer_add(w, 0, &e, &err), -1);
	ck_assert_ptr_nonnull(strstr(err, "not a number"));
	free(err);
	err = NULL;
	e = pair("1", "1");
	ck_assert_int_eq(shuffle_writer_add(w, 2, &e, &err), -1);
	free(err);
	shuffle_writer_free(w);
	ck_assert_int_eq(sh_count_files(), 0);
	ck_assert_ptr_null(shuffle_reader_open(sh_dir, "f", 0, &err));
	ck_assert_ptr_nonnull(strstr(err, "shuffle file f: "));
	free(err);
}
END_TEST

/* A numeric file's key that is no number is named in the error. */
START_TEST(test_not_a_number_named)
{
	struct shuffle_writer	*w;
	struct shuffle_entry	 e = pair("12x\n", "1");
	char			*err = NULL;

	w = writer("f", 1, SHUFFLE_ORDER_KEY_NUMERIC, 0, 0, NULL);
	add(w, 0, pair("12", "1"));
	ck_assert_int_eq(shuffle_writer_add(w, 0, &e, &err), -1);
	ck_assert_msg(strstr(err, "\"12x?\" is not a number") != NULL, "%s",
	    err);
	free(err);
	shuffle_writer_free(w);
}
END_TEST

/* A FIFO planted where a map file should be: an error, not a hang. */
/* Read text as a number: its kind, int64 and double. */
static int
sh_number(const char *text, int64_t *i, double *d)
{
	*i = 0;
	*d = 0;
	return (shuffle_number_parse(text, strlen(text), i, d));
}

START_TEST(test_number_parse)
{
	int64_t	i;
	double	d;

	/* Integers, the short ones read without strtoll, as it would. */
	ck_assert_int_eq(sh_number("+5", &i, &d), 1);
	ck_assert_int_eq(i, 5);
	ck_assert_int_eq(sh_number("-0", &i, &d), 1);
	ck_assert_int_eq(i, 0);
	ck_assert_int_eq(sh_number("007", &i, &d), 1);
	ck_assert_int_eq(i, 7);
	ck_assert_int_eq(sh_number("-999999999999999999", &i, &d), 1);
	ck_assert_int_eq(i, -999999999999999999LL);
	ck_assert_int_eq(sh_number("9223372036854775807", &i, &d), 1);
	ck_assert_int_eq(i, INT64_MAX);
	ck_assert_int_eq(sh_number("-9223372036854775808", &i, &d), 1);
	ck_assert_int_eq(i, INT64_MIN);
	/* Past int64: a double. */
	ck_assert_int_eq(sh_number("9223372036854775808", &i, &d), 2);
	ck_assert_double_eq(d, 9223372036854775808.0);
	ck_assert_int_eq(sh_number("1.5", &i, &d), 2);
	ck_assert_double_eq(d, 1.5);
	ck_assert_int_eq(sh_number("-1e3", &i, &d), 2);
	ck_assert_double_eq(d, -1000.0);
	/* Not numbers. */
	ck_assert_int_eq(sh_number("+", &i, &d), 0);
	ck_assert_int_eq(sh_number("-", &i, &d), 0);
	ck_assert_int_eq(sh_number("1-2", &i, &d), 0);
	ck_assert_int_eq(sh_number(" 1", &i, &d), 0);
	ck_assert_int_eq(sh_number("1 ", &i, &d), 0);
	ck_assert_int_eq(sh_number("+-1", &i, &d), 0);
	ck_assert_int_eq(sh_number("0x10", &i, &d), 0);
	ck_assert_int_eq(sh_number("inf", &i, &d), 0);
	ck_assert_int_eq(sh_number("1e999", &i, &d), 0);
	ck_assert_int_eq(shuffle_number_parse("12", 0, &i, &d), 0);
}
END_TEST

START_TEST(test_fifo_refused)
{
	char	*err = NULL;

	ck_assert_int_eq(mkfifoat(sh_dir, "f", 0600), 0);
	ck_assert_ptr_null(shuffle_reader_open(sh_dir, "f", 0, &err));
	ck_assert_ptr_nonnull(strstr(err, "shuffle file f: "));
	free(err);
}
END_TEST

/* Write n pairs of keys key(i) and values i into bucket i % buckets. */
static void
fill(struct shuffle_writer *w, int n, int buckets, int keys)
{
	char	k[32], v[32];
	int	i;

	for (i = 0; i < n; i++) {
		snprintf(k, sizeof k, "key%d", (i * 7919) % keys);
		snprintf(v, sizeof v, "%d", i);
		add(w, i % buckets, pair(k, v));
	}
}

/* Check a bucket is sorted by key bytes, equal keys in value order. */
static int64_t
check_sorted(const char *name, int bucket, int desc)
{
	struct shuffle_reader	*r = reader(name, bucket);
	struct shuffle_entry	 e;
	char			 last[64] = "", *err = NULL;
	long			 lastv = -1, v;
	int64_t			 n = 0;
	int			 c, rc;

	while ((rc = shuffle_reader_next(r, &e, &err)) == 1) {
		ck_assert_uint_lt(e.klen, sizeof last);
		v = num(e.value, e.vlen);
		if (n > 0) {
			c = shuffle_key_compare(SHUFFLE_ORDER_KEY, desc, last,
			    strlen(last), e.key, e.klen);
			ck_assert_int_le(c, 0);
			if (c == 0)
				ck_assert_int_gt(v, lastv);
		}
		memcpy(last, e.key, e.klen);
		last[e.klen] = '\0';
		lastv = v;
		n++;
	}
	ck_assert_msg(rc == 0, "%s", err);
	ck_assert_int_eq(n, shuffle_reader_count(r));
	shuffle_reader_free(r);
	return (n);
}

START_TEST(test_sorted_stable)
{
	struct shuffle_writer	*w;

	w = writer("f", 3, SHUFFLE_ORDER_KEY, 0, 1 << 20, NULL);
	fill(w, 30000, 3, 100);
	commit(w);
	ck_assert_int_eq(check_sorted("f", 0, 0) + check_sorted("f", 1, 0) +
	    check_sorted("f", 2, 0), 30000);
	w = writer("d", 1, SHUFFLE_ORDER_KEY, 1, 1 << 20, NULL);
	fill(w, 5000, 1, 50);
	commit(w);
	ck_assert_int_eq(check_sorted("d", 0, 1), 5000);
}
END_TEST

START_TEST(test_spill_same_file)
{
	struct shuffle_writer	*w;
	char			*a, *b;
	size_t			 alen, blen;
	int			 order;

	for (order = SHUFFLE_ORDER_NONE; order <= SHUFFLE_ORDER_KEY; order++) {
		w = writer("big", 5, order, 0, 1 << 30, NULL);
		fill(w, 100000, 5, 3000);
		commit(w);
		w = writer("small", 5, order, 0, 1, NULL);
		fill(w, 100000, 5, 3000);
		ck_assert_int_gt(shuffle_writer_spills(w), 10);
		commit(w);
		a = slurp("big", &alen);
		b = slurp("small", &blen);
		ck_assert_uint_eq(alen, blen);
		ck_assert_msg(memcmp(a, b, alen) == 0, "order %d", order);
		free(a);
		free(b);
		ck_assert_int_eq(sh_count_files(), 2);
	}
	ck_assert_int_eq(check_sorted("small", 4, 0), 20000);
	/* Abandoned after spilling: nothing left behind. */
	w = writer("gone", 5, SHUFFLE_ORDER_KEY, 0, 1, NULL);
	fill(w, 20000, 5, 3000);
	ck_assert_int_gt(shuffle_writer_spills(w), 1);
	shuffle_writer_free(w);
	ck_assert_int_eq(sh_count_files(), 2);
}
END_TEST

/* Groups, null values and records mixed, through spills: what is read
 * back is what was written, in order. */
START_TEST(test_kinds_spill)
{
	struct shuffle_writer	*w;
	struct shuffle_reader	*r;
	struct shuffle_entry	 e, g;
	unsigned char		 vals[64];
	char			 k[32];
	int			 i, n = 30000;

	w = writer("f", 2, SHUFFLE_ORDER_KEY, 0, 1, NULL);
	for (i = 0; i < n; i++) {
		snprintf(k, sizeof k, "%06d", i);
		memset(&g, 0, sizeof g);
		g.key = k;
		g.klen = 6;
		if (i % 3 == 0) {
			g.kind = SHUFFLE_KIND_GROUP;
			/* Two values: the key, and a null. */
			vals[0] = vals[1] = vals[2] = 0;
			vals[3] = 6;
			memcpy(vals + 4, k, 6);
			memcpy(vals + 10, "\xff\xff\xff\xfb", 4);
			g.value = (const char *)vals;
			g.vlen = 14;
		} else if (i % 3 == 1) {
			g.kind = SHUFFLE_KIND_PAIR;
			g.vnull = 1;
		} else
			g.kind = SHUFFLE_KIND_RECORD;
		add(w, i % 2, g);
	}
	ck_assert_int_gt(shuffle_writer_spills(w), 2);
	commit(w);
	r = reader("f", 1);
	for (i = 1; i < n; i += 2) {
		snprintf(k, sizeof k, "%06d", i);
		e = next(r);
		eq_bytes(e.key, e.klen, k, 6);
		ck_assert_int_eq(e.kind, i % 3 == 0 ? SHUFFLE_KIND_GROUP :
		    i % 3 == 1 ? SHUFFLE_KIND_PAIR : SHUFFLE_KIND_RECORD);
		if (e.kind == SHUFFLE_KIND_GROUP) {
			ck_assert_uint_eq(e.vlen, 14);
			ck_assert(memcmp(e.value + 4, k, 6) == 0);
		}
		if (e.kind == SHUFFLE_KIND_PAIR)
			ck_assert(e.vnull);
	}
	end(r);
	shuffle_reader_free(r);
}
END_TEST

static int	sum_cb(void *, const struct shuffle_entry *,
		    const struct shuffle_entry *, struct shuffle_entry *,
		    char **);

/* Spills come as often as the entries fill the memory, not at every
 * add once combine's table has grown past it. */
START_TEST(test_spills_bounded)
{
	struct shuffle_writer	*w;
	int			 mb;

	for (mb = 1; mb <= 4; mb *= 2) {
		w = writer("f", 1, SHUFFLE_ORDER_KEY, 0, (size_t)mb << 20,
		    sum_cb);
		fill(w, 200000, 1, 200000);
		ck_assert_msg(shuffle_writer_spills(w) < 40 / mb,
		    "%d MiB: %d spills", mb, shuffle_writer_spills(w));
		shuffle_writer_free(w);
	}
}
END_TEST

static char	sum_buf[32];

/* Add two values as integers. */
static int
sum_cb(void *arg, const struct shuffle_entry *a, const struct shuffle_entry *b,
    struct shuffle_entry *out, char **err)
{
	long	x = num(a->value, a->vlen), y = num(b->value, b->vlen);

	(void)arg;
	if (b->vlen == 3 && memcmp(b->value, "bad", 3) == 0) {
		*err = xstrdup("bad value");
		return (-1);
	}
	*out = *a;
	out->vlen = (size_t)snprintf(sum_buf, sizeof sum_buf, "%ld", x + y);
	out->value = sum_buf;
	return (0);
}

/* Check a combined file: keys key0..key(keys-1) once each, summing to
 * what fill gave them. */
static void
check_sums(const char *name, int n, int keys)
{
	struct shuffle_reader	*r = reader(name, 0);
	struct shuffle_entry	 e;
	long			*want = xcalloc((size_t)keys, sizeof *want);
	long			 got;
	int			 i, k, seen = 0;
	char			 kb[32];

	for (i = 0; i < n; i++)
		want[(i * 7919) % keys] += i;
	while (seen < keys) {
		e = next(r);
		snprintf(kb, sizeof kb, "%.*s", (int)e.klen, e.key);
		k = atoi(kb + 3);
		got = num(e.value, e.vlen);
		ck_assert_int_eq(got, want[k]);
		seen++;
	}
	end(r);
	shuffle_reader_free(r);
	free(want);
}

/* A file's bytes. */
static char *
sh_file(const char *name, size_t *len)
{
	struct stat	 st;
	char		*buf;
	int		 fd;

	ck_assert_int_ne(fd = openat(sh_dir, name, O_RDONLY), -1);
	ck_assert_int_eq(fstat(fd, &st), 0);
	buf = xmalloc((size_t)st.st_size + 1);
	ck_assert_int_eq(read(fd, buf, (size_t)st.st_size), st.st_size);
	close(fd);
	*len = (size_t)st.st_size;
	return (buf);
}

START_TEST(test_unique_keys)
{
	struct shuffle_writer	*w;
	struct shuffle_reader	*r;
	struct shuffle_entry	 a = pair("key1", "1");
	struct shuffle_entry	 b = pair("key1", "2"), e;
	char			*err = NULL, *x, *y;
	size_t			 xlen, ylen;

	/* Each key once: the file is the one combine would write. */
	w = writer("u", 1, SHUFFLE_ORDER_KEY, 0, 1 << 20, sum_cb);
	shuffle_writer_unique_keys(w);
	fill(w, 1000, 1, 1000);
	commit(w);
	w = writer("c", 1, SHUFFLE_ORDER_KEY, 0, 1 << 20, sum_cb);
	fill(w, 1000, 1, 1000);
	commit(w);
	check_sums("u", 1000, 1000);
	x = sh_file("u", &xlen);
	y = sh_file("c", &ylen);
	ck_assert_uint_eq(xlen, ylen);
	ck_assert_mem_eq(x, y, xlen);
	free(x);
	free(y);
	/* Once something was added, it still combines. */
	w = writer("n", 1, SHUFFLE_ORDER_KEY, 0, 1 << 20, sum_cb);
	ck_assert_int_eq(shuffle_writer_add(w, 0, &a, &err), 0);
	shuffle_writer_unique_keys(w);
	ck_assert_int_eq(shuffle_writer_add(w, 0, &b, &err), 0);
	commit(w);
	r = reader("n", 0);
	e = next(r);
	ck_assert_int_eq(num(e.value, e.vlen), 3);
	ck_assert_int_eq(shuffle_reader_next(r, &e, &err), 0);
	shuffle_reader_free(r);
}
END_TEST

START_TEST(test_combine)
{
	struct shuffle_writer	*w;
	struct shuffle_entry	 e = pair("key1", "bad");
	char			*err = NULL;

	w = writer("f", 1, SHUFFLE_ORDER_KEY, 0, 1 << 20, sum_cb);
	fill(w, 50000, 1, 1000);
	commit(w);
	check_sums("f", 50000, 1000);
	w = writer("s", 1, SHUFFLE_ORDER_KEY, 0, 1, sum_cb);
	fill(w, 50000, 1, 1000);
	commit(w);
	check_sums("s", 50000, 1000);
	ck_assert_int_eq(check_sorted("s", 0, 0), 1000);

	w = writer("e", 1, SHUFFLE_ORDER_KEY, 0, 1, sum_cb);
	fill(w, 10, 1, 5);
	ck_assert_int_eq(shuffle_writer_add(w, 0, &e, &err), -1);
	ck_assert_ptr_nonnull(strstr(err, "bad value"));
	free(err);
	shuffle_writer_free(w);
	ck_assert_ptr_null(shuffle_writer_create(sh_dir, "n", 1,
	    SHUFFLE_ORDER_NONE, 0, 0, sum_cb, NULL, &err));
	free(err);
}
END_TEST

START_TEST(test_numeric)
{
	static const char	*keys[] = { "10", "-3", "2.5", "1e3", "2", "-0",
	    "0", "9223372036854775807", "-1.5", "2" };
	static const char	*want[] = { "-3", "-1.5", "-0", "0", "2", "2",
	    "2.5", "10", "1e3", "9223372036854775807" };
	struct shuffle_writer	*w;
	struct shuffle_reader	*r;
	struct shuffle_entry	 e;
	size_t			 i, n = sizeof keys / sizeof keys[0];
	int			 desc;

	for (desc = 0; desc <= 1; desc++) {
		w = writer("f", 1, SHUFFLE_ORDER_KEY_NUMERIC, desc, 0, NULL);
		for (i = 0; i < n; i++)
			add(w, 0, pair(keys[i], keys[i]));
		commit(w);
		r = reader("f", 0);
		ck_assert_int_eq(shuffle_reader_order(r),
		    SHUFFLE_ORDER_KEY_NUMERIC);
		ck_assert_int_eq(shuffle_reader_descending(r), desc);
		for (i = 0; i < n; i++) {
			const char *k = want[desc ? n - 1 - i : i];

			/* Equal numbers keep their arrival order. */
			if (desc && strcmp(k, "-0") == 0)
				k = "0";
			else if (desc && strcmp(k, "0") == 0)
				k = "-0";
			e = next(r);
			eq_bytes(e.key, e.klen, k, strlen(k));
		}
		end(r);
		shuffle_reader_free(r);
	}
}
END_TEST

/* Write a file of n pairs in one ordered bucket. */
static void
make_ordered(const char *name, int n, size_t memory)
{
	struct shuffle_writer	*w = writer(name, 1, SHUFFLE_ORDER_KEY, 0,
	    memory, NULL);

	fill(w, n, 1, n);
	commit(w);
}

/* Read a whole bucket: 0, or -1 with *err. */
static int
read_all(const char *name, int bucket, char **err)
{
	struct shuffle_reader	*r;
	struct shuffle_entry	 e;
	int			 rc;

	if ((r = shuffle_reader_open(sh_dir, name, bucket, err)) == NULL)
		return (-1);
	while ((rc = shuffle_reader_next(r, &e, err)) == 1)
		continue;
	shuffle_reader_free(r);
	return (rc);
}

START_TEST(test_corrupt_byte)
{
	char	*p, *err = NULL;
	size_t	 len, i;

	make_ordered("f", 20000, 1 << 20);
	p = slurp("f", &len);
	/* Any byte of the data: a CRC error at the latest. */
	for (i = 0; i < len; i += len / 97 + 1) {
		p[i] ^= 0x20;
		spew("g", p, len);
		p[i] ^= 0x20;
		ck_assert_msg(read_all("g", 0, &err) == -1, "byte %zu", i);
		ck_assert_ptr_nonnull(strstr(err, "shuffle file g: "));
		free(err);
		err = NULL;
	}
	/* A byte of an entry's value: the block's CRC. */
	p[100] ^= 1;
	spew("g", p, len);
	ck_assert_int_eq(read_all("g", 0, &err), -1);
	ck_assert_msg(strstr(err, "CRC mismatch") != NULL, "%s", err);
	free(err);
	free(p);
}
END_TEST

START_TEST(test_truncated)
{
	char	*p, *err = NULL;
	size_t	 len, cut;

	make_ordered("f", 3000, 1 << 20);
	p = slurp("f", &len);
	for (cut = 0; cut < len; cut += cut < 64 ? 1 : 509) {
		spew("g", p, cut);
		ck_assert_msg(read_all("g", 0, &err) == -1, "cut %zu", cut);
		free(err);
		err = NULL;
	}
	/* The file shortened under an open reader. */
	spew("g", p, len);
	{
		struct shuffle_reader	*r = reader("g", 0);
		struct shuffle_entry	 e;
		int			 fd = openat(sh_dir, "g", O_WRONLY);
		int			 rc;

		ck_assert_int_eq(ftruncate(fd, (off_t)len / 2), 0);
		close(fd);
		while ((rc = shuffle_reader_next(r, &e, &err)) == 1)
			continue;
		ck_assert_int_eq(rc, -1);
		ck_assert_msg(strstr(err, "short") != NULL, "%s", err);
		free(err);
		shuffle_reader_free(r);
	}
	free(p);
}
END_TEST

START_TEST(test_merge_ties)
{
	struct shuffle_writer	*w;
	struct shuffle_reader	*r[3];
	struct shuffle_merge	*m;
	struct shuffle_entry	 e;
	char			 name[8], v[8], *err = NULL;
	size_t			 from, lastfrom = 0;
	int			 i, j, n = 0, rc;
	char			 last[8] = "";

	for (i = 0; i < 3; i++) {
		snprintf(name, sizeof name, "m%d", i);
		w = writer(name, 1, SHUFFLE_ORDER_KEY, 0, 0, NULL);
		for (j = 0; j < 20; j++) {
			snprintf(v, sizeof v, "%d", j);
			add(w, 0, pair(j % 2 ? "b" : "a", v));
		}
		commit(w);
		r[i] = reader(name, 0);
	}
	m = shuffle_merge_create(r, 3, SHUFFLE_ORDER_KEY, 0);
	while ((rc = shuffle_merge_next(m, &e, &from, &err)) == 1) {
		if (n > 0 && memcmp(last, e.key, 1) == 0)
			ck_assert_uint_ge(from, lastfrom);
		/* Each file's "a"s, then the next's. */
		ck_assert_int_eq(e.key[0], n < 30 ? 'a' : 'b');
		ck_assert_uint_eq(from, (size_t)(n % 30) / 10);
		memcpy(last, e.key, 1);
		lastfrom = from;
		n++;
	}
	ck_assert_msg(rc == 0, "%s", err);
	ck_assert_int_eq(n, 60);
	shuffle_merge_free(m);
	for (i = 0; i < 3; i++)
		shuffle_reader_free(r[i]);
}
END_TEST

START_TEST(test_seek)
{
	struct shuffle_reader	*r;
	struct shuffle_entry	 e;
	char			 k[32], *err = NULL;
	int			 i, n = 60000;

	/* key0..key59999: over a MB, many blocks. */
	make_ordered("f", n, 1 << 16);
	for (i = 0; i < n; i += 4999) {
		r = reader("f", 0);
		snprintf(k, sizeof k, "key%d", i);
		ck_assert_msg(shuffle_reader_seek(r, k, strlen(k), &err) == 0,
		    "%s", err);
		e = next(r);
		eq_bytes(e.key, e.klen, k, strlen(k));
		shuffle_reader_free(r);
	}
	/* Between keys, before all, after all. */
	r = reader("f", 0);
	ck_assert_int_eq(shuffle_reader_seek(r, "key10000a", 9, &err), 0);
	e = next(r);
	eq_bytes(e.key, e.klen, "key10001", 8);
	ck_assert_int_eq(shuffle_reader_seek(r, "a", 1, &err), 0);
	e = next(r);
	eq_bytes(e.key, e.klen, "key0", 4);
	ck_assert_int_eq(shuffle_reader_seek(r, "z", 1, &err), 0);
	end(r);
	shuffle_reader_free(r);
}
END_TEST

/* The entries of n files' bucket 0 in partition p of bounds. */
static int
count_range(struct shuffle_reader **r, size_t n, struct shuffle_key *b,
    int partitions, int p)
{
	struct shuffle_reader	*x;
	struct shuffle_entry	 e;
	size_t			 i;
	char			*err = NULL;
	int			 c = 0;

	for (i = 0; i < n; i++) {
		x = reader(i == 0 ? "f0" : "f1", 0);
		if (p > 0)
			ck_assert_int_eq(shuffle_reader_seek(x, b[p - 1].key,
			    b[p - 1].len, &err), 0);
		while (shuffle_reader_next(x, &e, &err) == 1) {
			if (p < partitions - 1 &&
			    shuffle_key_compare(SHUFFLE_ORDER_KEY, 0, e.key,
			    e.klen, b[p].key, b[p].len) >= 0)
				break;
			c++;
		}
		shuffle_reader_free(x);
	}
	(void)r;
	return (c);
}

START_TEST(test_boundaries)
{
	struct shuffle_reader	*r[2];
	struct shuffle_key	*b, *b2;
	const struct shuffle_key *s;
	char			*err = NULL;
	size_t			 ns;
	int			 p;

	make_ordered("f0", 40000, 1 << 20);
	make_ordered("f1", 10000, 1 << 20);
	r[0] = reader("f0", 0);
	r[1] = reader("f1", 0);
	ns = shuffle_reader_sample(r[0], &s);
	ck_assert_uint_eq(ns, SHUFFLE_SAMPLE_MAX);
	for (p = 1; p < (int)ns; p++)
		ck_assert_int_le(shuffle_key_compare(SHUFFLE_ORDER_KEY, 0,
		    s[p - 1].key, s[p - 1].len, s[p].key, s[p].len), 0);
	ck_assert_int_eq(shuffle_boundaries(r, 2, 4, SHUFFLE_ORDER_KEY, 0, &b,
	    &err), 0);
	ck_assert_int_eq(shuffle_boundaries(r, 2, 4, SHUFFLE_ORDER_KEY, 0, &b2,
	    &err), 0);
	for (p = 0; p < 3; p++) {
		eq_bytes(b[p].key, b[p].len, b2[p].key, b2[p].len);
		if (p > 0)
			ck_assert_int_lt(shuffle_key_compare(SHUFFLE_ORDER_KEY,
			    0, b[p - 1].key, b[p - 1].len, b[p].key,
			    b[p].len), 0);
	}
	/* The partitions hold about a quarter of the entries each. */
	for (p = 0; p < 4; p++)
		ck_assert_msg(count_range(r, 2, b, 4, p) > 50000 / 4 * 9 / 10 &&
		    count_range(r, 2, b, 4, p) < 50000 / 4 * 11 / 10,
		    "partition %d", p);
	shuffle_boundaries_free(b, 4);
	shuffle_boundaries_free(b2, 4);
	shuffle_reader_free(r[0]);
	shuffle_reader_free(r[1]);
}
END_TEST

/* A numeric, descending file: seek and boundaries in its order. */
START_TEST(test_seek_numeric_descending)
{
	struct shuffle_writer	*w;
	struct shuffle_reader	*r;
	struct shuffle_entry	 e;
	struct shuffle_key	*b;
	char			 k[32], *err = NULL;
	int			 i, n = 60000, p, c[3] = { 0, 0, 0 };

	w = writer("f", 1, SHUFFLE_ORDER_KEY_NUMERIC, 1, 1 << 16, NULL);
	for (i = 0; i < n; i++) {
		snprintf(k, sizeof k, "%d", (i * 7919) % n);
		add(w, 0, pair(k, "v"));
	}
	ck_assert_int_gt(shuffle_writer_spills(w), 0);
	commit(w);
	r = reader("f", 0);
	ck_assert_int_eq(shuffle_reader_seek(r, "30000.5", 7, &err), 0);
	e = next(r);
	eq_bytes(e.key, e.klen, "30000", 5);
	e = next(r);
	eq_bytes(e.key, e.klen, "29999", 5);
	ck_assert_int_eq(shuffle_reader_seek(r, "1e9", 3, &err), 0);
	e = next(r);
	eq_bytes(e.key, e.klen, "59999", 5);
	ck_assert_int_eq(shuffle_reader_seek(r, "-1", 2, &err), 0);
	end(r);
	ck_assert_int_eq(shuffle_boundaries(&r, 1, 3, SHUFFLE_ORDER_KEY_NUMERIC,
	    1, &b, &err), 0);
	shuffle_reader_free(r);
	/* Partition 0 holds the largest keys; each about a third. */
	r = reader("f", 0);
	for (p = 0; p < 3; p++) {
		if (p > 0)
			ck_assert_int_eq(shuffle_reader_seek(r, b[p - 1].key,
			    b[p - 1].len, &err), 0);
		while (shuffle_reader_next(r, &e, &err) == 1) {
			if (p < 2 && shuffle_key_compare(
			    SHUFFLE_ORDER_KEY_NUMERIC, 1, e.key, e.klen,
			    b[p].key, b[p].len) >= 0)
				break;
			if (p == 0)
				ck_assert_int_ge(num(e.key, e.klen), 36000);
			c[p]++;
		}
	}
	for (p = 0; p < 3; p++)
		ck_assert_msg(c[p] > n / 3 * 9 / 10 && c[p] < n / 3 * 11 / 10,
		    "partition %d: %d", p, c[p]);
	shuffle_boundaries_free(b, 3);
	shuffle_reader_free(r);
}
END_TEST

static TCase *
sh_tcase(const char *name)
{
	TCase	*tc = tcase_create(name);

	tcase_add_checked_fixture(tc, sh_setup, sh_teardown);
	tcase_set_timeout(tc, 60);
	return (tc);
}

Suite *
shuffle_suite(void)
{
	Suite	*s = suite_create("shuffle");
	TCase	*tc;

	tc = sh_tcase("round trip");
	tcase_add_test(tc, test_round_trip);
	tcase_add_test(tc, test_refused);
	tcase_add_test(tc, test_not_a_number_named);
	tcase_add_test(tc, test_number_parse);
	tcase_add_test(tc, test_fifo_refused);
	suite_add_tcase(s, tc);

	tc = sh_tcase("order");
	tcase_add_test(tc, test_sorted_stable);
	tcase_add_test(tc, test_numeric);
	tcase_add_test(tc, test_spill_same_file);
	tcase_add_test(tc, test_kinds_spill);
	tcase_add_test(tc, test_spills_bounded);
	tcase_add_test(tc, test_combine);
	tcase_add_test(tc, test_unique_keys);
	suite_add_tcase(s, tc);

	tc = sh_tcase("corrupt");
	tcase_add_test(tc, test_corrupt_byte);
	tcase_add_test(tc, test_truncated);
	suite_add_tcase(s, tc);

	tc = sh_tcase("read");
	tcase_add_test(tc, test_merge_ties);
	tcase_add_test(tc, test_seek);
	tcase_add_test(tc, test_seek_numeric_descending);
	tcase_add_test(tc, test_boundaries);
	suite_add_tcase(s, tc);
	return (s);
}
