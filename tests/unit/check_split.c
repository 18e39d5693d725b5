/*
 * A property test of the text source's splitter (worker/source.c): for
 * many random files, with empty lines, long lines, CRLF, with and without
 * a final newline, and every partition count from 1 to 64, the records of
 * all partitions in order are the files' lines, each exactly once.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops.h"
#include "plan.h"
#include "source.h"
#include "suites.h"

#define SPLIT_DIR_TEMPLATE "/tmp/ember-check-split-XXXXXX"

/* One file of the test: its bytes, and where its lines are. */
struct split_file {
	char	*path;
	char	*data;
	size_t	 len;
};

/* A sink that checks each record against the next expected line. */
struct split_check {
	struct op		 op;
	const struct split_file	*files;
	size_t			 nfiles;
	size_t			 file, pos;	/* where the next line starts */
	int64_t			 records;
	int			 partitions, partition;
};

static char	split_dir[sizeof SPLIT_DIR_TEMPLATE];

/* A small generator, so that a failing case can be run again. */
static uint64_t
split_random(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return (*s);
}

/* Move to the next file with a line left. */
static void
split_check_skip(struct split_check *c)
{
	while (c->file < c->nfiles && c->pos >= c->files[c->file].len) {
		c->file++;
		c->pos = 0;
	}
}

/* The record must be the next line. */
static int
split_check_push_cb(struct op *op, const struct record *r)
{
	struct split_check	*c = (struct split_check *)op;
	const struct split_file	*f;
	const char		*nl;
	size_t			 len;

	split_check_skip(c);
	if (c->file == c->nfiles)
		ck_abort_msg("%d partitions, partition %d: a record after the "
		    "last line", c->partitions, c->partition);
	f = &c->files[c->file];
	nl = memchr(f->data + c->pos, '\n', f->len - c->pos);
	len = nl != NULL ? (size_t)(nl - f->data) - c->pos : f->len - c->pos;
	if (r->null || r->len != len ||
	    (len != 0 && memcmp(r->data, f->data + c->pos, len) != 0))
		ck_abort_msg("%d partitions, partition %d: record %lld is %zu "
		    "bytes, want the %zu bytes at %zu of file %zu",
		    c->partitions, c->partition, (long long)c->records, r->len,
		    len, c->pos, c->file);
	c->pos += len + 1;
	c->records++;
	return (OP_OK);
}

/* A block of whole lines: each must be the next line. */
static int
split_check_lines_cb(struct op *op, const char *data, size_t len,
    size_t *used)
{
	struct record	 r = { NULL, 0, 0, 0, NULL, 0 };
	const char	*p = data, *end = data + len, *nl;

	if (len == 0 || data[len - 1] != '\n')
		ck_abort_msg("a block of %zu bytes that does not end a line",
		    len);
	while (p < end) {
		nl = memchr(p, '\n', (size_t)(end - p));
		r.data = p;
		r.len = (size_t)(nl - p);
		split_check_push_cb(op, &r);
		p = nl + 1;
	}
	*used = len;
	return (OP_OK);
}

/* Nothing to finish. */
static int
split_check_finish_cb(__attribute__((unused)) struct op *op)
{
	return (OP_OK);
}

/* Owned by the test. */
static void
split_check_free_cb(__attribute__((unused)) struct op *op)
{
}

/* Make a random file: lines of random lengths, some empty, some long,
 * some ending in CR; a final newline or not. */
static void
split_make_file(struct split_file *f, uint64_t *seed, int n, size_t longest)
{
	size_t	size = 0, len, i;
	FILE	*fp;
	int	 line;

	f->data = NULL;
	f->len = 0;
	for (line = 0; line < n; line++) {
		switch (split_random(seed) % 8) {
		case 0:
			len = 0;
			break;
		case 1:
			len = (size_t)(split_random(seed) % longest);
			break;
		default:
			len = (size_t)(split_random(seed) % 40);
			break;
		}
		if (f->len + len + 2 > size) {
			size = (f->len + len + 2) * 2;
			f->data = realloc(f->data, size);
			ck_assert_ptr_nonnull(f->data);
		}
		for (i = 0; i < len; i++)
			f->data[f->len++] = (char)(' ' + split_random(seed) % 90);
		if (split_random(seed) % 6 == 0)
			f->data[f->len++] = '\r';
		f->data[f->len++] = '\n';
	}
	/* Half the files lose their final newline. */
	if (f->len > 0 && split_random(seed) % 2 == 0)
		f->len--;
	ck_assert_int_ne(asprintf(&f->path, "%s/f%llu", split_dir,
	    (unsigned long long)(*seed % 1000000000)), -1);
	ck_assert_ptr_nonnull(fp = fopen(f->path, "w"));
	if (f->len > 0)		/* f->data is NULL for an empty file */
		ck_assert_uint_eq(fwrite(f->data, 1, f->len, fp), f->len);
	ck_assert_int_eq(fclose(fp), 0);
}

/* Count the lines of a file as the splitter must see them. */
static int64_t
split_count_lines(const struct split_file *f)
{
	int64_t	n = 0;
	size_t	i;

	for (i = 0; i < f->len; i++)
		n += f->data[i] == '\n';
	if (f->len > 0 && f->data[f->len - 1] != '\n')
		n++;
	return (n);
}

/* Check one partition count over the files, a line a push or in blocks
 * of lines. */
static void
split_check_count(struct plan *plan, const struct split_file *files,
    size_t nfiles, int64_t want, int blocks)
{
	struct split_check	 c;
	struct chain		*chain;
	int64_t			 in;
	char			*err = NULL;
	int			 p;

	memset(&c, 0, sizeof c);
	c.op.push = split_check_push_cb;
	if (blocks)
		c.op.push_lines = split_check_lines_cb;
	c.op.finish = split_check_finish_cb;
	c.op.free = split_check_free_cb;
	c.files = files;
	c.nfiles = nfiles;
	c.partitions = plan->partitions;
	for (p = 0; p < plan->partitions; p++) {
		c.partition = p;
		/* Plain tests: each ck_assert writes to the runner. */
		if ((chain = chain_create(plan, p, NULL, &c.op, &err)) == NULL)
			ck_abort_msg("chain_create: %s", err);
		in = 0;
		if (source_run(plan, p, -1, chain, &in, &err) != OP_OK)
			ck_abort_msg("source_run: %s", err);
		chain_free(chain);
		if (in != c.records)
			ck_abort_msg("%d partitions, partition %d: %lld records "
			    "in, %lld pushed", plan->partitions, p,
			    (long long)in, (long long)c.records);
		want -= c.records;
		c.records = 0;
	}
	split_check_skip(&c);
	if (want != 0 || c.file != nfiles)
		ck_abort_msg("%d partitions%s: %lld records too few",
		    plan->partitions, blocks ? " (blocks)" : "",
		    (long long)want);
}

/* Check every partition count from 1 to max over the files, a line a
 * push and in blocks of lines. */
static void
split_check_files(const struct split_file *files, size_t nfiles, int max)
{
	struct plan		 plan;
	struct plan_file	*pf;
	int64_t			 want = 0;
	size_t			 i;
	int			 blocks;

	pf = calloc(nfiles, sizeof *pf);
	for (i = 0; i < nfiles; i++) {
		pf[i].path = files[i].path;
		pf[i].size = (int64_t)files[i].len;
		want += split_count_lines(&files[i]);
	}
	memset(&plan, 0, sizeof plan);
	plan.source = PLAN_SOURCE_TEXT;
	plan.files = pf;
	plan.nfiles = nfiles;
	for (blocks = 0; blocks < 2; blocks++)
		for (plan.partitions = 1; plan.partitions <= max;
		    plan.partitions++)
			split_check_count(&plan, files, nfiles, want, blocks);
	free(pf);
}

/* Remove a test's files. */
static void
split_free_files(struct split_file *files, size_t n)
{
	size_t	i;

	for (i = 0; i < n; i++) {
		unlink(files[i].path);
		free(files[i].path);
		free(files[i].data);
	}
}

/* Make the directory. */
static void
split_setup(void)
{
	memcpy(split_dir, SPLIT_DIR_TEMPLATE, sizeof split_dir);
	ck_assert_ptr_nonnull(mkdtemp(split_dir));
}

/* Remove it. */
static void
split_teardown(void)
{
	rmdir(split_dir);
}

START_TEST(test_split_one_file)
{
	struct split_file	f;
	uint64_t		seed = 0x9e3779b97f4a7c15ULL;
	int			i;

	/* Many small files: every partition boundary lands somewhere
	 * interesting (inside a line, on a newline, between CR and LF). */
	for (i = 0; i < 60; i++) {
		split_make_file(&f, &seed, (int)(split_random(&seed) % 60),
		    200);
		split_check_files(&f, 1, 64);
		split_free_files(&f, 1);
	}
}
END_TEST

START_TEST(test_split_edges)
{
	static const char *const texts[] = { "", "\n", "\n\n", "a", "a\n",
	    "a\nb", "\r\n", "a\r\nb\r\n", "\n\na\n\n" };
	struct split_file	f;
	FILE			*fp;
	size_t			 i;

	for (i = 0; i < sizeof texts / sizeof *texts; i++) {
		f.data = strdup(texts[i]);
		f.len = strlen(texts[i]);
		ck_assert_int_ne(asprintf(&f.path, "%s/edge%zu", split_dir, i),
		    -1);
		ck_assert_ptr_nonnull(fp = fopen(f.path, "w"));
		fwrite(f.data, 1, f.len, fp);
		fclose(fp);
		split_check_files(&f, 1, 16);
		split_free_files(&f, 1);
	}
}
END_TEST

START_TEST(test_split_several_files)
{
	struct split_file	f[5];
	uint64_t		seed = 12345;
	int			round, i, n;

	/* Files laid end to end: partitions span them, and a file without
	 * a final newline does not run into the next. */
	for (round = 0; round < 10; round++) {
		n = 1 + (int)(split_random(&seed) % 5);
		for (i = 0; i < n; i++)
			split_make_file(&f[i], &seed,
			    (int)(split_random(&seed) % 30), 100);
		split_check_files(f, (size_t)n, 64);
		split_free_files(f, (size_t)n);
	}
}
END_TEST

START_TEST(test_split_long_lines)
{
	struct split_file	f;
	uint64_t		seed = 777;

	/* Lines longer than the read buffer (256 KiB) grow it. */
	split_make_file(&f, &seed, 12, 700 * 1024);
	split_check_files(&f, 1, 64);
	split_free_files(&f, 1);
}
END_TEST

/* Build the split suite. */
Suite *
split_suite(void)
{
	Suite	*s = suite_create("split");
	TCase	*tc;

	tc = tcase_create("text");
	tcase_set_timeout(tc, 30);
	tcase_add_checked_fixture(tc, split_setup, split_teardown);
	tcase_add_test(tc, test_split_edges);
	tcase_add_test(tc, test_split_one_file);
	tcase_add_test(tc, test_split_several_files);
	tcase_add_test(tc, test_split_long_lines);
	suite_add_tcase(s, tc);
	return (s);
}
