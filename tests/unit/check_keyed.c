/*
 * Tests for worker/keyed.c and output_keyed: pairs and groups encoded as
 * a batch and a checkpoint hold them, decoded back from every cut, sent
 * to emberd in batches its check accepts, and written as save's lines.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frame.h"
#include "keyed.h"
#include "ops.h"
#include "output.h"
#include "plan.h"
#include "protocol.h"
#include "suites.h"
#include "wmsg.h"

/* A group's values "a", null, "" as frames. */
static const char	keyed_values[] = "\0\0\0\1a" "\xff\xff\xff\xfb"
			    "\0\0\0\0";
#define KEYED_VALUES_LEN	(sizeof keyed_values - 1)

/* A pair ("k\0y", "val"). */
static struct record
keyed_pair(void)
{
	return ((struct record){ "val", 3, 0, PLAN_KIND_PAIR, "k\0y", 3 });
}

/* A group ("g", ["a", null, ""]). */
static struct record
keyed_group(void)
{
	return ((struct record){ keyed_values, KEYED_VALUES_LEN, 0,
	    PLAN_KIND_GROUP, "g", 1 });
}

/* Encode r, decode it from every cut, and compare. */
static void
keyed_round_trip(const struct record *r)
{
	unsigned char	 buf[256];
	struct record	 got;
	size_t		 size = keyed_size(r), cut, used;

	ck_assert_uint_le(size, sizeof buf);
	keyed_put(buf, r);
	for (cut = 0; cut < size; cut++) {
		ck_assert_int_eq(keyed_get((char *)buf, cut, 1000, &got,
		    &used), 0);
		ck_assert_uint_gt(used, cut);
		ck_assert_uint_le(used, size);
	}
	ck_assert_int_eq(keyed_get((char *)buf, size + 3, 1000, &got, &used),
	    1);
	ck_assert_uint_eq(used, size);
	ck_assert_int_eq(got.kind, r->kind);
	ck_assert_uint_eq(got.klen, r->klen);
	ck_assert_mem_eq(got.key, r->key, r->klen);
	ck_assert_int_eq(got.null, r->null);
	ck_assert_uint_eq(got.len, r->len);
	if (r->len > 0)
		ck_assert_mem_eq(got.data, r->data, r->len);
}

START_TEST(test_keyed_round_trip)
{
	struct record	pair = keyed_pair(), group = keyed_group();
	struct record	nullv = { NULL, 0, 1, PLAN_KIND_PAIR, "", 0 };
	struct record	empty = { NULL, 0, 0, PLAN_KIND_GROUP, "e", 1 };

	keyed_round_trip(&pair);
	keyed_round_trip(&group);
	keyed_round_trip(&nullv);
	keyed_round_trip(&empty);
	ck_assert_int_eq(keyed_count(&group), 3);
	ck_assert_int_eq(keyed_count(&empty), 0);
	ck_assert_uint_eq(keyed_size(&pair), 8 + 3 + 4 + 3);
}
END_TEST

START_TEST(test_keyed_plain_and_corrupt)
{
	unsigned char	 buf[64];
	struct record	 got;
	size_t		 used;

	/* A plain record and a null decode as they always have. */
	be32_put(buf, 2);
	memcpy(buf + 4, "ab", 2);
	ck_assert_int_eq(keyed_get((char *)buf, 6, 100, &got, &used), 1);
	ck_assert_int_eq(got.kind, PLAN_KIND_RECORD);
	ck_assert_uint_eq(used, 6);
	ck_assert_int_eq(keyed_get((char *)buf, 5, 100, &got, &used), 0);
	ck_assert_uint_eq(used, 6);
	ck_assert_int_eq(keyed_get((char *)buf, 6, 1, &got, &used), -1);
	be32_put(buf, EMBER_NULL);
	ck_assert_int_eq(keyed_get((char *)buf, 4, 100, &got, &used), 1);
	ck_assert_int_eq(got.null, 1);
	/* A null key, a negative count, a marker where a value is. */
	be32_put(buf, EMBER_PAIR);
	be32_put(buf + 4, EMBER_NULL);
	ck_assert_int_eq(keyed_get((char *)buf, 16, 100, &got, &used), -1);
	be32_put(buf, EMBER_GROUP);
	be32_put(buf + 4, 0);
	be32_put(buf + 8, -1);
	ck_assert_int_eq(keyed_get((char *)buf, 16, 100, &got, &used), -1);
	be32_put(buf, EMBER_PAIR);
	be32_put(buf + 8, EMBER_GROUP);
	ck_assert_int_eq(keyed_get((char *)buf, 16, 100, &got, &used), -1);
	/* A key longer than a frame may be. */
	be32_put(buf + 4, 101);
	ck_assert_int_eq(keyed_get((char *)buf, 16, 100, &got, &used), -1);
	be32_put(buf, -9);
	ck_assert_int_eq(keyed_get((char *)buf, 16, 100, &got, &used), -1);
}
END_TEST

START_TEST(test_keyed_text)
{
	struct record	 pair = keyed_pair(), group = keyed_group();
	struct record	 nullv = { NULL, 0, 1, PLAN_KIND_PAIR, "n", 1 };
	char		 buf[64];

	ck_assert_uint_eq(keyed_text_size(&pair), 7);
	keyed_text_put(buf, &pair);
	ck_assert_mem_eq(buf, "k\0y\tval", 7);
	ck_assert_uint_eq(keyed_text_size(&group), 5);
	keyed_text_put(buf, &group);
	ck_assert_mem_eq(buf, "g\ta\t\t", 5);
	ck_assert_uint_eq(keyed_text_size(&nullv), 2);
	keyed_text_put(buf, &nullv);
	ck_assert_mem_eq(buf, "n\t", 2);
}
END_TEST

/* Read a worker's output from fd: check each batch as emberd does and
 * count its records; the payload bytes in *bytes. */
static int32_t
keyed_read_batches(int fd, size_t *bytes)
{
	unsigned char		 hdr[WMSG_BATCH_SIZE], *p;
	struct wmsg		 m;
	struct wmsg_batch	 b;
	const char		*err = NULL;
	int32_t			 records = 0;

	*bytes = 0;
	lseek(fd, 0, SEEK_SET);
	while (read(fd, hdr, sizeof hdr) == (ssize_t)sizeof hdr) {
		ck_assert_int_eq(wmsg_get(hdr, sizeof hdr, &m, &err), 0);
		ck_assert_ptr_nonnull(p = malloc((size_t)m.length + 1));
		ck_assert_int_eq(read(fd, p, (size_t)m.length), m.length);
		wmsg_batch_begin(&b, &m);
		ck_assert_int_eq(wmsg_batch_feed(&b, p, (size_t)m.length,
		    &err), 0);
		ck_assert_int_eq(wmsg_batch_end(&b, &err), 0);
		records += m.records;
		*bytes += (size_t)m.length;
		free(p);
	}
	return (records);
}

START_TEST(test_keyed_output)
{
	char		 path[] = "/tmp/check_keyed.XXXXXX", *big;
	char		*err = NULL;
	struct record	 pair = keyed_pair(), group = keyed_group(), large;
	struct output	*out;
	size_t		 bytes, bigsize = 200 * 1024;
	int		 fd, i;

	ck_assert_int_ne(fd = mkstemp(path), -1);
	unlink(path);
	out = output_create(fd);
	ck_assert_ptr_nonnull(big = malloc(bigsize));
	memset(big, 'x', bigsize);
	/* A pair whose key is larger than the buffer goes alone. */
	large = (struct record){ "v", 1, 0, PLAN_KIND_PAIR, big, bigsize };
	for (i = 0; i < 5000; i++) {
		ck_assert_int_eq(output_keyed(out, &pair, &err), 0);
		ck_assert_int_eq(output_keyed(out, &group, &err), 0);
		ck_assert_int_eq(output_record(out, "r", 1, 0, &err), 0);
	}
	ck_assert_int_eq(output_keyed(out, &large, &err), 0);
	ck_assert_int_eq(output_flush(out, &err), 0);
	ck_assert_int_eq(keyed_read_batches(fd, &bytes), 3 * 5000 + 1);
	ck_assert_uint_eq(bytes, 5000 * (keyed_size(&pair) +
	    keyed_size(&group) + 5) + keyed_size(&large));
	ck_assert_int_eq(output_bytes(out), (int64_t)bytes);
	output_free(out);
	free(big);
	close(fd);
}
END_TEST

START_TEST(test_keyed_random_bytes)
{
	unsigned char	 buf[64];
	struct record	 r;
	size_t		 len, used, i;
	unsigned int	 seed = 1;
	int		 n, rc;
	static const int32_t words[] = { EMBER_PAIR, EMBER_GROUP, EMBER_NULL,
	    0, 1, 2, 3, 5, -1, 60 };

	/* Bytes a checkpoint's owner could write: whatever they are, a
	 * record decoded lies inside them and asks for no more than is
	 * there or what it says it needs. */
	for (n = 0; n < 200000; n++) {
		len = (size_t)rand_r(&seed) % sizeof buf;
		for (i = 0; i + 4 <= len; i += 4)
			be32_put(buf + i, rand_r(&seed) % 3 == 0 ?
			    rand_r(&seed) : words[rand_r(&seed) % 10]);
		rc = keyed_get((char *)buf, len, 16, &r, &used);
		if (rc != 1)
			continue;
		ck_assert_uint_le(used, len);
		if (r.kind != PLAN_KIND_RECORD)
			ck_assert(r.key >= (char *)buf &&
			    r.key + r.klen <= (char *)buf + used);
		if (r.len > 0)
			ck_assert(r.data >= (char *)buf &&
			    r.data + r.len <= (char *)buf + used);
		if (r.kind == PLAN_KIND_GROUP)
			ck_assert_int_ge(keyed_count(&r), 0);
	}
}
END_TEST

Suite *
keyed_suite(void)
{
	Suite	*s = suite_create("keyed");
	TCase	*tc;

	tc = tcase_create("encoding");
	tcase_add_test(tc, test_keyed_round_trip);
	tcase_add_test(tc, test_keyed_plain_and_corrupt);
	tcase_add_test(tc, test_keyed_text);
	tcase_add_test(tc, test_keyed_output);
	tcase_add_test(tc, test_keyed_random_bytes);
	suite_add_tcase(s, tc);
	return (s);
}
