/*
 * Tests for common/bindex.c: a broadcast's set index answers as the set
 * of its lines does, on real files, and refuses or bounds a corrupt one.
 */
#include <sys/stat.h>

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bindex.h"
#include "suites.h"
#include "xmalloc.h"

/* The header's fields, at their offsets. */
#define OFF_VERSION	8
#define OFF_BYTES	16
#define OFF_NSLOTS	24
#define OFF_LINES	32
#define OFF_DISTINCT	40
#define OFF_MAX_PROBE	48

/* A line of a reference set. */
struct ref_line {
	const char	*p;
	size_t		 len;
};

/* Order lines as memcmp, the shorter first on a tie. */
static int
ref_cmp(const void *a, const void *b)
{
	const struct ref_line	*x = a, *y = b;
	size_t			 n = x->len < y->len ? x->len : y->len;
	int			 c;

	if ((c = memcmp(x->p, y->p, n)) != 0)
		return (c);
	return ((x->len > y->len) - (x->len < y->len));
}

/* The reference set: the lines of bytes, sorted; their number in *n. */
static struct ref_line *
ref_build(const char *bytes, size_t len, size_t *n)
{
	struct ref_line	*r = NULL;
	const char	*p = bytes, *end = bytes + len, *nl;
	size_t		 cap = 0;

	*n = 0;
	while (p < end) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (*n == cap) {
			cap = cap == 0 ? 1024 : cap * 2;
			r = xreallocarray(r, cap, sizeof *r);
		}
		r[*n].p = p;
		r[(*n)++].len = (size_t)((nl != NULL ? nl : end) - p);
		p = nl != NULL ? nl + 1 : end;
	}
	if (*n > 0)
		qsort(r, *n, sizeof *r, ref_cmp);
	return (r);
}

/* Is data one of the reference's lines? */
static int
ref_contains(const struct ref_line *r, size_t n, const char *data,
    size_t len)
{
	struct ref_line	key = { data, len };

	if (n == 0 || memchr(data, '\n', len) != NULL)
		return (0);
	return (bsearch(&key, r, n, sizeof *r, ref_cmp) != NULL);
}

/* Build the index of bytes, in memory aligned as a mapping is; its size
 * in *size. */
static void *
ix_build(const char *bytes, size_t len, size_t *size,
    struct bindex_stats *st)
{
	size_t	lines;
	void	*out;

	*size = bindex_size(bytes, len, &lines);
	ck_assert_uint_gt(*size, 0);
	ck_assert_int_eq(posix_memalign(&out, 64, *size), 0);
	memset(out, 0, *size);
	bindex_build(bytes, len, lines, out, *size, st);
	return (out);
}

/* Open an index that must hold. */
static struct bindex *
ix_open(const void *ix, size_t size, const char *bytes, size_t len)
{
	struct bindex	*b;
	char		*err;

	b = bindex_open(ix, size, bytes, len, &err);
	if (b == NULL)
		ck_abort_msg("bindex_open: %s", err);
	return (b);
}

/* Read a file of the source tree; its bytes, allocated. */
static char *
ix_read(const char *name, size_t *len)
{
	const char	*src = getenv("EMBER_SRCDIR");
	struct stat	 sb;
	char		*path, *buf;
	int		 fd;

	xasprintf(&path, "%s/%s", src != NULL ? src : ".", name);
	fd = open(path, O_RDONLY);
	ck_assert_msg(fd != -1, "%s", path);
	ck_assert_int_eq(fstat(fd, &sb), 0);
	buf = xmalloc((size_t)sb.st_size + 1);
	ck_assert_int_eq(read(fd, buf, (size_t)sb.st_size), sb.st_size);
	close(fd);
	free(path);
	*len = (size_t)sb.st_size;
	return (buf);
}

/*
 * Every line of bytes, every line cut short, grown and with a '\r'
 * added, and a few that are not there: the index answers as the
 * reference set does.
 */
static void
ix_compare(const char *bytes, size_t len)
{
	struct bindex_stats	 st;
	struct ref_line		*r;
	struct bindex		*b;
	const char		*p = bytes, *end = bytes + len, *nl;
	char			 buf[4096];
	void			*ix;
	size_t			 size, n, distinct = 0, i, l;

	ix = ix_build(bytes, len, &size, &st);
	b = ix_open(ix, size, bytes, len);
	r = ref_build(bytes, len, &n);
	for (i = 0; i < n; i++)
		distinct += i == 0 || ref_cmp(&r[i - 1], &r[i]) != 0;
	ck_assert_uint_eq(bindex_count(b), distinct);
	ck_assert_uint_eq(st.distinct, distinct);
	ck_assert_uint_eq(st.lines, n);
	while (p < end) {
		nl = memchr(p, '\n', (size_t)(end - p));
		l = (size_t)((nl != NULL ? nl : end) - p);
		ck_assert_int_eq(bindex_contains(b, p, l), 1);
		if (l > 0)
			ck_assert_int_eq(bindex_contains(b, p, l - 1),
			    ref_contains(r, n, p, l - 1));
		if (l + 2 <= sizeof buf) {
			memcpy(buf, p, l);
			buf[l] = '\r';
			ck_assert_int_eq(bindex_contains(b, buf, l + 1),
			    ref_contains(r, n, buf, l + 1));
			buf[l] = 'x';
			ck_assert_int_eq(bindex_contains(b, buf, l + 1),
			    ref_contains(r, n, buf, l + 1));
		}
		p = nl != NULL ? nl + 1 : end;
	}
	ck_assert_int_eq(bindex_contains(b, "no such line, surely", 20),
	    ref_contains(r, n, "no such line, surely", 20));
	ck_assert_int_eq(bindex_contains(b, "a\nb", 3), 0);
	free(r);
	bindex_close(b);
	free(ix);
}

START_TEST(test_real_files)
{
	static const char *const files[] = { "docs/design.md",
	    "docs/protocol.md", "common/bindex.c", "Makefile.am",
	    "conf/ember.conf" };
	size_t	i, len;
	char	*bytes;

	for (i = 0; i < sizeof files / sizeof *files; i++) {
		bytes = ix_read(files[i], &len);
		ix_compare(bytes, len);
		/* Without its last newline, and with only part of it. */
		ix_compare(bytes, len - 1);
		ix_compare(bytes, len / 3);
		free(bytes);
	}
}
END_TEST

START_TEST(test_numbers)
{
	char	*bytes;
	size_t	 len = 0, i, n = 200000;

	bytes = xmalloc(n * 8);
	for (i = 0; i < n; i++)		/* each number twice */
		len += (size_t)sprintf(bytes + len, "%zu\n", (i * 7) % (n / 2));
	ix_compare(bytes, len);
	free(bytes);
}
END_TEST

START_TEST(test_edges)
{
	ix_compare("", 0);
	ix_compare("\n", 1);
	ix_compare("\n\n\n", 3);
	ix_compare("a", 1);
	ix_compare("a\r\nb\n\nc", 7);
	ix_compare("x\0y\n\0\n", 6);
}
END_TEST

/* Set a 64-bit header field. */
static void
ix_set(void *ix, size_t off, uint64_t v)
{
	memcpy((char *)ix + off, &v, sizeof v);
}

/* The index must be refused with an error holding what. */
static void
ix_refused(const void *ix, size_t size, const char *bytes, size_t len,
    const char *what)
{
	struct bindex	*b;
	char		*err;

	b = bindex_open(ix, size, bytes, len, &err);
	ck_assert_ptr_null(b);
	ck_assert_msg(strstr(err, what) != NULL, "\"%s\" not in \"%s\"",
	    what, err);
	free(err);
}

START_TEST(test_corrupt_header)
{
	static const char	 bytes[] = "alpha\nbeta\ngamma\n";
	struct bindex_stats	 st;
	size_t			 len = sizeof bytes - 1, size;
	void			*ix, *copy;

	ix = ix_build(bytes, len, &size, &st);
	ck_assert_int_eq(posix_memalign(&copy, 64, size + 8), 0);
#define FRESH()	memcpy(copy, ix, size)

	FRESH();
	ix_refused(copy, BINDEX_HEADER - 1, bytes, len,
	    "shorter than its header");
	FRESH();
	((char *)copy)[0] = 'X';
	ix_refused(copy, size, bytes, len, "not an index");
	FRESH();
	((char *)copy)[OFF_VERSION] = 9;
	bindex_stamp(copy);
	ix_refused(copy, size, bytes, len, "version");
	FRESH();
	((char *)copy)[OFF_LINES] ^= 1;
	ix_refused(copy, size, bytes, len, "checksum");
	FRESH();
	ix_refused(copy, size, bytes, len - 1, "another size");
	FRESH();
	ix_refused(copy, size - 8, bytes, len, "slots do not fill it");
	ix_refused(copy, size + 8, bytes, len, "slots do not fill it");
	ix_refused(copy, size - 3, bytes, len, "slots do not fill it");
	FRESH();
	ix_set(copy, OFF_NSLOTS, 0);
	bindex_stamp(copy);
	ix_refused(copy, BINDEX_HEADER, bytes, len, "slots do not fill it");
	FRESH();
	ix_set(copy, OFF_LINES, len + 2);
	bindex_stamp(copy);
	ix_refused(copy, size, bytes, len, "counts do not add up");
	FRESH();
	ix_set(copy, OFF_DISTINCT, (size - BINDEX_HEADER) / 8);
	bindex_stamp(copy);
	ix_refused(copy, size, bytes, len, "counts do not add up");
	FRESH();
	ix_set(copy, OFF_MAX_PROBE, (size - BINDEX_HEADER) / 8);
	bindex_stamp(copy);
	ix_refused(copy, size, bytes, len, "counts do not add up");
	FRESH();
	ix_refused((char *)copy + 4, size, bytes, len, "misaligned");
	FRESH();
	ix_set(copy, OFF_BYTES, UINT64_MAX);
	bindex_stamp(copy);
	ix_refused(copy, size, bytes, len, "another size");
#undef FRESH
	free(copy);
	free(ix);
}
END_TEST

/* Slots that point past the bytes make the lookups that meet them fail,
 * never read there. */
START_TEST(test_corrupt_slots)
{
	static const char	 bytes[] = "alpha\nbeta\ngamma\n";
	struct bindex_stats	 st;
	struct bindex		*b;
	uint64_t		*slots, s;
	size_t			 len = sizeof bytes - 1, size, i, nslots;
	void			*ix;

	ix = ix_build(bytes, len, &size, &st);
	slots = (uint64_t *)((char *)ix + BINDEX_HEADER);
	nslots = (size - BINDEX_HEADER) / 8;
	for (i = 0; i < nslots; i++) {
		if ((s = slots[i]) != 0)	/* same tag, far offset */
			slots[i] = (UINT64_C(0xffffffffff) << 24) |
			    (s & 0xffffff);
	}
	b = ix_open(ix, size, bytes, len);
	ck_assert_int_eq(bindex_contains(b, "alpha", 5), -1);
	ck_assert_int_eq(bindex_contains(b, "gamma", 5), -1);
	/* A slot of a tag alone: offset 0 minus one. */
	for (i = 0; i < nslots; i++) {
		if ((s = slots[i]) != 0)
			slots[i] = s & 0xffffff;
	}
	ck_assert_int_eq(bindex_contains(b, "beta", 4), -1);
	bindex_close(b);
	free(ix);
}
END_TEST

/* A table with no empty slot and the longest probe allowed: every lookup
 * ends after nslots probes. */
START_TEST(test_full_table_ends)
{
	static const char	 bytes[] = "alpha\nbeta\n";
	struct bindex_stats	 st;
	struct bindex		*b;
	uint64_t		*slots;
	size_t			 len = sizeof bytes - 1, size, i, nslots;
	void			*ix;

	ix = ix_build(bytes, len, &size, &st);
	slots = (uint64_t *)((char *)ix + BINDEX_HEADER);
	nslots = (size - BINDEX_HEADER) / 8;
	for (i = 0; i < nslots; i++)	/* line 0, a tag never matching */
		slots[i] = (UINT64_C(1) << 24) | (i + 7);
	ix_set(ix, OFF_MAX_PROBE, nslots - 1);
	bindex_stamp(ix);
	b = ix_open(ix, size, bytes, len);
	ck_assert_int_le(bindex_contains(b, "alpha", 5), 1);
	ck_assert_int_le(bindex_contains(b, "nothing", 7), 1);
	bindex_close(b);
	free(ix);
}
END_TEST

/*
 * An empty broadcast comes as no mapping at all: the index of an empty
 * line, its header changed to index no bytes (and restamped), still
 * reads nothing there.
 */
START_TEST(test_no_bytes)
{
	struct bindex_stats	 st;
	struct bindex		*b;
	size_t			 size;
	void			*ix;

	ix = ix_build("\n", 1, &size, &st);
	ix_set(ix, OFF_BYTES, 0);
	bindex_stamp(ix);
	b = ix_open(ix, size, NULL, 0);
	ck_assert_int_eq(bindex_contains(b, "", 0), 1);
	ck_assert_int_eq(bindex_contains(b, "x", 1), 0);
	bindex_close(b);
	free(ix);
}
END_TEST

/* The set index's suite. */
Suite *
bindex_suite(void)
{
	Suite	*s;
	TCase	*tc;

	s = suite_create("bindex");

	tc = tcase_create("answers");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_real_files);
	tcase_add_test(tc, test_numbers);
	tcase_add_test(tc, test_edges);
	suite_add_tcase(s, tc);

	tc = tcase_create("corrupt");
	tcase_add_test(tc, test_corrupt_header);
	tcase_add_test(tc, test_corrupt_slots);
	tcase_add_test(tc, test_full_table_ends);
	tcase_add_test(tc, test_no_bytes);
	suite_add_tcase(s, tc);

	return (s);
}
