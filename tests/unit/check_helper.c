/*
 * worker/helper.c: one request in, one reply out, over a socketpair, with
 * descriptors both ways (common/fdpass.c's fd_send_many, fd_recv_many).
 */
#include <sys/socket.h>

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "fdpass.h"
#include "frame.h"
#include "helper.h"
#include "hmsg.h"
#include "protocol.h"
#include "suites.h"
#include "xmalloc.h"

/* Send a request frame with nfds descriptors, run the helper on the other
 * end, and return its reply (the descriptors it passed in fds). */
static json_t *
helper_exchange(const char *text, const int *in, size_t nin, int *fds,
    size_t *nfds, int *rc)
{
	unsigned char	*buf, hdr[4];
	json_error_t	 je;
	json_t		*reply;
	size_t		 len = strlen(text), got = 0;
	int		 sv[2], overflow = 0;
	int32_t		 n;
	ssize_t		 r;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	buf = malloc(len + 4);
	be32_put(buf, (int32_t)len);
	memcpy(buf + 4, text, len);
	ck_assert_int_eq(fd_send_many(sv[0], buf, len + 4, in, nin),
	    (ssize_t)(len + 4));
	free(buf);
	*rc = helper_main(sv[1]);
	close(sv[1]);

	*nfds = 0;
	while (got < 4) {
		r = fd_recv_many(sv[0], hdr + got, 4 - got, fds,
		    HELPER_MAX_FDS, nfds, &overflow);
		ck_assert_int_gt(r, 0);
		got += (size_t)r;
	}
	n = be32_get(hdr);
	ck_assert_int_gt(n, 0);
	buf = malloc((size_t)n);
	for (got = 0; got < (size_t)n; got += (size_t)r) {
		r = fd_recv_many(sv[0], buf + got, (size_t)n - got, fds,
		    HELPER_MAX_FDS, nfds, &overflow);
		ck_assert_int_gt(r, 0);
	}
	ck_assert_int_eq(overflow, 0);
	close(sv[0]);
	reply = json_loadb((char *)buf, (size_t)n, 0, &je);
	free(buf);
	ck_assert_ptr_nonnull(reply);
	return (reply);
}

START_TEST(test_helper_plan_check_files)
{
	char		 dir[] = "/tmp/check_helper.XXXXXX", path[64], req[256];
	json_t		*reply, *files;
	size_t		 nfds;
	int		 fds[HELPER_MAX_FDS], fd, rc;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/a.txt", dir);
	fd = open(path, O_WRONLY | O_CREAT, 0644);
	ck_assert_int_eq(write(fd, "one\ntwo\n", 8), 8);
	close(fd);
	snprintf(req, sizeof req, "{\"verb\":\"plan_check\",\"args\":{\"plan\":"
	    "{\"source\":{\"text\":{\"paths\":[\"%s/*.txt\"]}}}}}", dir);
	reply = helper_exchange(req, NULL, 0, fds, &nfds, &rc);
	ck_assert_int_eq(rc, 0);
	ck_assert_uint_eq(nfds, 0);
	ck_assert(json_is_true(json_object_get(reply, "ok")));
	files = json_object_get(json_object_get(reply, "reply"), "files");
	ck_assert_uint_eq(json_array_size(files), 1);
	ck_assert_str_eq(json_string_value(json_object_get(
	    json_array_get(files, 0), "path")), path);
	ck_assert_int_eq(json_integer_value(json_object_get(
	    json_array_get(files, 0), "size")), 8);
	json_decref(reply);

	/* What is wrong with the files is the verb's answer, not a failure. */
	snprintf(req, sizeof req, "{\"verb\":\"plan_check\",\"args\":{\"plan\":"
	    "{\"source\":{\"text\":{\"paths\":[\"%s/none\"]}}}}}", dir);
	reply = helper_exchange(req, NULL, 0, fds, &nfds, &rc);
	ck_assert_int_eq(rc, 0);
	ck_assert(json_is_true(json_object_get(reply, "ok")));
	ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(
	    json_object_get(reply, "reply"), "error")),
	    "plan.source.text.paths[0]: "));
	json_decref(reply);
	unlink(path);
	rmdir(dir);
}
END_TEST

START_TEST(test_helper_bad_requests)
{
	static const char *const bad[] = {
		"{\"verb\":\"format_disk\",\"args\":{}}",
		"{\"verb\":\"plan_check\"}",
		"{\"verb\":\"plan_check\",\"args\":{\"plan\":{},\"x\":1}}",
		"{\"verb\":\"plan_check\",\"args\":{},\"more\":1}",
	};
	json_t	*reply;
	size_t	 i, nfds;
	int	 fds[HELPER_MAX_FDS], p[2], rc;

	signal(SIGPIPE, SIG_IGN);
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		/* A descriptor passed along is closed, not leaked. */
		ck_assert_int_eq(pipe(p), 0);
		reply = helper_exchange(bad[i], &p[0], 1, fds, &nfds, &rc);
		close(p[0]);
		ck_assert_int_eq(rc, 0);
		ck_assert(json_is_false(json_object_get(reply, "ok")));
		ck_assert(json_is_string(json_object_get(reply, "error")));
		json_decref(reply);
		/* The helper's copy is closed: the pipe has no reader. */
		ck_assert_int_eq(write(p[1], "x", 1), -1);
		close(p[1]);
	}
}
END_TEST

START_TEST(test_helper_no_request)
{
	int	sv[2];

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	close(sv[0]);
	ck_assert_int_eq(helper_main(sv[1]), 1);
	close(sv[1]);
}
END_TEST

/* Decode reply text to a request of verb into *r: NULL, or the error
 * (allocated).  *r's json_t members point into *msg. */
static char *
hmsg_reply_read(const char *text, enum hmsg_verb verb, json_t **msg,
    struct hmsg_reply *r)
{
	const char	*refused;
	char		*err = NULL;

	if (hmsg_reply_decode(text, strlen(text), verb, msg, r, &refused,
	    &err) == 0) {
		ck_assert_ptr_null(err);
		return (NULL);
	}
	ck_assert_ptr_nonnull(err);
	return (err);
}

/* Decode reply text to a request of verb: 0 or -1, as hmsg_reply_decode. */
static int
hmsg_reply(const char *text, enum hmsg_verb verb, const char **error)
{
	struct hmsg_reply	 r;
	json_t			*msg;
	char			*err;

	err = hmsg_reply_read(text, verb, &msg, &r);
	free(err);
	json_decref(msg);
	*error = NULL;		/* it pointed into msg */
	return (err == NULL ? 0 : -1);
}

START_TEST(test_hmsg_envelopes)
{
	enum hmsg_verb	 verb;
	json_t		*args = json_pack("{s:i}", "max", 5), *req, *got;
	const char	*error;
	char		*text, *err = NULL;
	size_t		 len;

	/* A request goes through whole, by its verb's name. */
	text = hmsg_request_encode(HMSG_BROADCAST_READ, args, &len);
	ck_assert_int_eq(hmsg_request_decode(text, len, &req, &verb, &got,
	    &err), 0);
	ck_assert_int_eq(verb, HMSG_BROADCAST_READ);
	ck_assert(json_equal(got, args));
	json_decref(req);
	free(text);
	json_decref(args);
	ck_assert_int_eq(hmsg_verb_find("broadcast_read"), HMSG_BROADCAST_READ);
	ck_assert_int_eq(hmsg_verb_find("format_disk"), -1);
	text = "{\"verb\":\"format_disk\",\"args\":{}}";
	ck_assert_int_eq(hmsg_request_decode(text, strlen(text), &req, &verb,
	    &got, &err), -1);
	ck_assert_str_eq(err, "unknown verb \"format_disk\"");
	free(err);
	json_decref(req);

	/* Replies: the verb's fields, or an error, and nothing else. */
	ck_assert_int_eq(hmsg_reply("{\"ok\":true,\"reply\":{\"size\":3}}",
	    HMSG_BROADCAST_READ, &error), 0);
	ck_assert_int_eq(hmsg_reply("{\"ok\":true,\"reply\":{\"error\":"
	    "\"gone\",\"over\":9}}", HMSG_BROADCAST_READ, &error), 0);
	ck_assert_int_eq(hmsg_reply("{\"ok\":false,\"error\":\"no\"}",
	    HMSG_RELEASE, &error), 0);
	/* A field the verb does not answer with. */
	ck_assert_int_eq(hmsg_reply("{\"ok\":true,\"reply\":{\"size\":3}}",
	    HMSG_RELEASE, &error), -1);
	ck_assert_int_eq(hmsg_reply("{\"ok\":true,\"reply\":{},\"x\":1}",
	    HMSG_RELEASE, &error), -1);
	ck_assert_int_eq(hmsg_reply("{\"ok\":true}", HMSG_RELEASE, &error),
	    -1);
	ck_assert_int_eq(hmsg_reply("{\"ok\":false}", HMSG_RELEASE, &error),
	    -1);
	ck_assert_int_eq(hmsg_reply("{\"ok\":true,\"reply\":{\"error\":1}}",
	    HMSG_RELEASE, &error), -1);
	ck_assert_int_eq(hmsg_reply("[]", HMSG_RELEASE, &error), -1);
	text = hmsg_reply_encode_error("bad", &len);
	ck_assert_str_eq(text, "{\"ok\":false,\"error\":\"bad\"}");
	free(text);
}
END_TEST

/* A hostile helper's replies, each refused with the field it got wrong. */
static const struct {
	enum hmsg_verb	 verb;
	const char	*reply;
	const char	*err;
} hmsg_hostile[] = {
	{ HMSG_PLAN_CHECK, "{}", "reply.udfs: missing" },
	{ HMSG_PLAN_CHECK, "{\"udfs\":\"x\"}",
	    "reply.udfs: expected an array" },
	{ HMSG_PLAN_CHECK, "{\"udfs\":[1]}",
	    "reply.udfs[0]: expected an object" },
	{ HMSG_PLAN_CHECK, "{\"udfs\":[{\"deterministic\":1}]}",
	    "reply.udfs[0].deterministic: expected true or false" },
	{ HMSG_PLAN_CHECK, "{\"udfs\":[{\"deterministic\":true,\"x\":1}]}",
	    "reply.udfs[0].x: unknown field" },
	{ HMSG_PLAN_CHECK, "{\"udfs\":[],\"files\":[{\"path\":\"a\","
	    "\"size\":-1}]}", "reply.files[0].size: must be 0 or more" },
	{ HMSG_PLAN_CHECK, "{\"udfs\":[],\"files\":[{\"path\":7,"
	    "\"size\":1}]}", "reply.files[0].path: expected a string" },
	{ HMSG_PLAN_CHECK, "{\"udfs\":[],\"files\":{}}",
	    "reply.files: expected an array" },
	{ HMSG_PLAN_CHECK, "{\"udfs\":[],\"nested\":[1]}",
	    "reply.nested[0]: expected an array or null" },
	{ HMSG_PLAN_CHECK, "{\"udfs\":[],\"nested\":[[{\"path\":\"a\"}]]}",
	    "reply.nested[0][0].size: missing" },
	{ HMSG_PLAN_CHECK, "{\"udfs\":[],\"plan\":{}}",
	    "reply.plan: unknown field" },
	{ HMSG_SAVE_BEGIN, "{}", "reply.ids: missing" },
	{ HMSG_SAVE_BEGIN, "{\"ids\":[]}", "reply.ids: expected an object" },
	{ HMSG_SAVE_BEGIN, "{\"ids\":{\"target_dev\":\"1\",\"target_ino\":1,"
	    "\"task_dev\":1,\"task_ino\":1}}",
	    "reply.ids.target_dev: expected an integer" },
	{ HMSG_SAVE_BEGIN, "{\"ids\":{\"target_dev\":1,\"target_ino\":1,"
	    "\"task_dev\":1}}", "reply.ids.task_ino: missing" },
	{ HMSG_SAVE_BEGIN, "{\"ids\":{\"target_dev\":1,\"target_ino\":1,"
	    "\"task_dev\":1,\"task_ino\":1,\"path\":\"/etc\"}}",
	    "reply.ids.path: unknown field" },
	{ HMSG_BROADCAST_READ, "{}", "reply.size: missing" },
	{ HMSG_BROADCAST_READ, "{\"size\":\"3\"}",
	    "reply.size: expected an integer" },
	{ HMSG_BROADCAST_READ, "{\"size\":-1}",
	    "reply.size: must be 0 or more" },
	{ HMSG_BROADCAST_READ, "{\"size\":1.5}",
	    "reply.size: expected an integer" },
	{ HMSG_BROADCAST_READ, "{\"error\":\"x\",\"over\":\"9\"}",
	    "reply.over: expected an integer" },
	{ HMSG_BROADCAST_READ, "{\"error\":\"x\",\"over\":-9}",
	    "reply.over: must be 0 or more" },
	{ HMSG_BROADCAST_INDEX, "{\"size\":8,\"lines\":2,\"distinct\":2}",
	    "reply.ms: missing" },
	{ HMSG_BROADCAST_INDEX, "{\"size\":8,\"lines\":\"2\",\"distinct\":2,"
	    "\"ms\":1}", "reply.lines: expected an integer" },
	{ HMSG_BROADCAST_INDEX, "{\"size\":8,\"lines\":2,\"distinct\":-2,"
	    "\"ms\":1}", "reply.distinct: must be 0 or more" },
	{ HMSG_BROADCAST_INDEX, "{\"error\":\"big\",\"over\":[]}",
	    "reply.over: expected an integer" },
	{ HMSG_RELEASE, "{\"size\":3}", "reply.size: unknown field" },
	{ HMSG_RELEASE, "{\"error\":1}", "reply.error: expected a string" },
	{ HMSG_SAVE_COMMIT, "{\"error\":null}",
	    "reply.error: expected a string" },
	{ HMSG_CHECKPOINT_REMOVE, "{\"error\":\"x\",\"failed\":\"a\"}",
	    "reply.failed: expected an array" },
	{ HMSG_CHECKPOINT_REMOVE, "{\"error\":\"x\",\"failed\":[\"a\",1]}",
	    "reply.failed[1]: expected a string" },
	{ HMSG_CHECKPOINT_CLEAN, "{\"removed\":0,\"checkpoints\":[],"
	    "\"sizes\":{},\"refused\":0}", "reply.more: missing" },
	{ HMSG_CHECKPOINT_CLEAN, "{\"removed\":-1,\"checkpoints\":[],"
	    "\"sizes\":{},\"refused\":0,\"more\":0}",
	    "reply.removed: must be 0 or more" },
	{ HMSG_CHECKPOINT_CLEAN, "{\"removed\":0,\"checkpoints\":{},"
	    "\"sizes\":{},\"refused\":0,\"more\":0}",
	    "reply.checkpoints: expected an array" },
	{ HMSG_CHECKPOINT_CLEAN, "{\"removed\":0,\"checkpoints\":[{\"id\":"
	    "\"c\",\"partitions\":1,\"records\":0,\"bytes\":0,\"owner\":0}],"
	    "\"sizes\":{},\"refused\":0,\"more\":0}",
	    "reply.checkpoints[0].owner: unknown field" },
	{ HMSG_CHECKPOINT_CLEAN, "{\"removed\":0,\"checkpoints\":[{\"id\":"
	    "\"c\",\"partitions\":\"1\",\"records\":0,\"bytes\":0}],"
	    "\"sizes\":{},\"refused\":0,\"more\":0}",
	    "reply.checkpoints[0].partitions: expected an integer" },
	{ HMSG_CHECKPOINT_CLEAN, "{\"removed\":0,\"checkpoints\":[],"
	    "\"sizes\":{\"c\":\"9\"},\"refused\":0,\"more\":0}",
	    "reply.sizes.c: expected an integer" },
	{ HMSG_CHECKPOINT_CLEAN, "{\"removed\":0,\"checkpoints\":[],"
	    "\"sizes\":{\"c\":-9},\"refused\":0,\"more\":0}",
	    "reply.sizes.c: must be 0 or more" },
	{ HMSG_CHECKPOINT_PLAN, "{}", "reply.plan: missing" },
	{ HMSG_CHECKPOINT_PLAN, "{\"plan\":[]}",
	    "reply.plan: expected an object" },
	{ HMSG_CHECKPOINT_PLAN, "{\"plan\":{},\"files\":[[]]}",
	    "reply.files[0]: expected an object" },
};

START_TEST(test_hmsg_hostile_replies)
{
	struct hmsg_reply	 r;
	json_t			*msg;
	char			*err, *text;

	xasprintf(&text, "{\"ok\":true,\"reply\":%s}",
	    hmsg_hostile[_i].reply);
	err = hmsg_reply_read(text, hmsg_hostile[_i].verb, &msg, &r);
	ck_assert_msg(err != NULL, "%s: %s accepted",
	    hmsg_verb_name(hmsg_hostile[_i].verb), hmsg_hostile[_i].reply);
	ck_assert_str_eq(err, hmsg_hostile[_i].err);
	free(err);
	free(text);
	json_decref(msg);
}
END_TEST

/* Each verb's reply read into its struct, typed. */
START_TEST(test_hmsg_typed_replies)
{
	struct hmsg_reply	 r;
	json_t			*msg;

	ck_assert_ptr_null(hmsg_reply_read("{\"ok\":true,\"reply\":{\"files\":"
	    "[{\"path\":\"/a\",\"size\":3}],\"udfs\":[{\"deterministic\":"
	    "true}],\"nested\":[null,[]]}}", HMSG_PLAN_CHECK, &msg, &r));
	ck_assert_int_eq(r.verb, HMSG_PLAN_CHECK);
	ck_assert_ptr_null(r.error);
	ck_assert_int_eq(json_array_size(r.u.plan_check.files), 1);
	ck_assert_int_eq(json_array_size(r.u.plan_check.udfs), 1);
	ck_assert_int_eq(json_array_size(r.u.plan_check.nested), 2);
	json_decref(msg);

	/* A verb's own failure needs none of its fields. */
	ck_assert_ptr_null(hmsg_reply_read("{\"ok\":true,\"reply\":{\"error\":"
	    "\"plan.source: no\"}}", HMSG_PLAN_CHECK, &msg, &r));
	ck_assert_str_eq(r.error, "plan.source: no");
	ck_assert_ptr_null(r.u.plan_check.udfs);
	json_decref(msg);

	ck_assert_ptr_null(hmsg_reply_read("{\"ok\":true,\"reply\":{\"ids\":"
	    "{\"target_dev\":1,\"target_ino\":2,\"task_dev\":3,\"task_ino\":"
	    "4}}}", HMSG_SAVE_BEGIN, &msg, &r));
	ck_assert_int_eq(json_object_size(r.u.save_begin.ids), 4);
	json_decref(msg);

	ck_assert_ptr_null(hmsg_reply_read("{\"ok\":true,\"reply\":{\"size\":"
	    "3}}", HMSG_BROADCAST_READ, &msg, &r));
	ck_assert_int_eq(r.u.broadcast_read.size, 3);
	ck_assert_int_eq(r.u.broadcast_read.over, 0);
	json_decref(msg);
	ck_assert_ptr_null(hmsg_reply_read("{\"ok\":true,\"reply\":{\"error\":"
	    "\"big\",\"over\":9}}", HMSG_BROADCAST_READ, &msg, &r));
	ck_assert_str_eq(r.error, "big");
	ck_assert_int_eq(r.u.broadcast_read.over, 9);
	json_decref(msg);

	ck_assert_ptr_null(hmsg_reply_read("{\"ok\":true,\"reply\":{\"size\":"
	    "8,\"lines\":3,\"distinct\":2,\"ms\":1}}", HMSG_BROADCAST_INDEX,
	    &msg, &r));
	ck_assert_int_eq(r.u.broadcast_index.size, 8);
	ck_assert_int_eq(r.u.broadcast_index.distinct, 2);
	json_decref(msg);

	ck_assert_ptr_null(hmsg_reply_read("{\"ok\":true,\"reply\":{\"error\":"
	    "\"busy\",\"failed\":[\"c\"]}}", HMSG_CHECKPOINT_REMOVE, &msg,
	    &r));
	ck_assert_str_eq(json_string_value(json_array_get(
	    r.u.checkpoint_remove.failed, 0)), "c");
	json_decref(msg);

	ck_assert_ptr_null(hmsg_reply_read("{\"ok\":true,\"reply\":{"
	    "\"removed\":2,\"checkpoints\":[{\"id\":\"c\",\"partitions\":1,"
	    "\"records\":0,\"bytes\":5,\"eager\":true,\"pending\":false}],"
	    "\"sizes\":{\"d\":7},\"refused\":1,\"more\":0}}",
	    HMSG_CHECKPOINT_CLEAN, &msg, &r));
	ck_assert_int_eq(r.u.checkpoint_clean.removed, 2);
	ck_assert_int_eq(r.u.checkpoint_clean.refused, 1);
	ck_assert_int_eq(json_array_size(r.u.checkpoint_clean.checkpoints), 1);
	ck_assert_int_eq(json_integer_value(json_object_get(
	    r.u.checkpoint_clean.sizes, "d")), 7);
	json_decref(msg);

	ck_assert_ptr_null(hmsg_reply_read("{\"ok\":true,\"reply\":{\"plan\":"
	    "{\"source\":{}},\"files\":[]}}", HMSG_CHECKPOINT_PLAN, &msg, &r));
	ck_assert(json_is_object(r.u.checkpoint_plan.plan));
	ck_assert_int_eq(json_array_size(r.u.checkpoint_plan.files), 0);
	json_decref(msg);

	ck_assert_ptr_null(hmsg_reply_read("{\"ok\":true,\"reply\":{}}",
	    HMSG_CHECKPOINT_COMMIT, &msg, &r));
	ck_assert_ptr_null(r.error);
	json_decref(msg);
}
END_TEST

Suite *
helper_suite(void)
{
	Suite	*s = suite_create("helper");
	TCase	*tc;

	tc = tcase_create("requests");
	tcase_set_timeout(tc, 5);
	tcase_add_test(tc, test_helper_plan_check_files);
	tcase_add_test(tc, test_helper_bad_requests);
	tcase_add_test(tc, test_helper_no_request);
	suite_add_tcase(s, tc);
	tc = tcase_create("messages");
	tcase_add_test(tc, test_hmsg_envelopes);
	tcase_add_loop_test(tc, test_hmsg_hostile_replies, 0,
	    sizeof hmsg_hostile / sizeof hmsg_hostile[0]);
	tcase_add_test(tc, test_hmsg_typed_replies);
	suite_add_tcase(s, tc);
	return (s);
}
