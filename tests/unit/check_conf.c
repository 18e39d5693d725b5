/* Tests for common/conf.c: defaults, value types, files, --set, dump. */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf.h"
#include "suites.h"

#define CONF_DIR_TEMPLATE "/tmp/ember-check-conf-XXXXXX"

static char	 conf_dir[sizeof CONF_DIR_TEMPLATE];
static char	*conf_files[16];
static size_t	 conf_nfiles;

/* Make the directory the test files go in. */
static void
conf_setup(void)
{
	memcpy(conf_dir, CONF_DIR_TEMPLATE, sizeof conf_dir);
	ck_assert_ptr_nonnull(mkdtemp(conf_dir));
	conf_nfiles = 0;
}

/* Remove the test files and their directory. */
static void
conf_teardown(void)
{
	size_t	i;

	for (i = 0; i < conf_nfiles; i++) {
		unlink(conf_files[i]);
		free(conf_files[i]);
	}
	rmdir(conf_dir);
}

/* Write a conf file; returns its path. */
static const char *
conf_write(const char *name, const char *text)
{
	FILE	*f;
	char	*path;

	ck_assert_uint_lt(conf_nfiles, sizeof conf_files / sizeof *conf_files);
	ck_assert_int_ne(asprintf(&path, "%s/%s", conf_dir, name), -1);
	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	ck_assert_int_ge(fputs(text, f), 0);
	ck_assert_int_eq(fclose(f), 0);
	conf_files[conf_nfiles++] = path;
	return (path);
}

/* Load text as a conf file and expect the error want (with PATH: first). */
static void
conf_expect_file_error(const char *text, const char *want)
{
	struct conf	 conf;
	const char	*path;
	char		*err = NULL, *full;

	path = conf_write("bad.conf", text);
	conf_init(&conf);
	ck_assert_int_eq(conf_load_file(&conf, path, &err), -1);
	ck_assert_int_ne(asprintf(&full, "%s:%s", path, want), -1);
	ck_assert_str_eq(err, full);
	free(full);
	free(err);
	conf_free(&conf);
	unlink(path);
	free(conf_files[--conf_nfiles]);
}

/* Set one key and expect it to fail with want. */
static void
conf_expect_set_error(const char *assignment, const char *want)
{
	struct conf	 conf;
	char		*err = NULL;

	conf_init(&conf);
	ck_assert_msg(conf_set(&conf, assignment, &err) == -1,
	    "\"%s\" was accepted", assignment);
	ck_assert_str_eq(err, want);
	free(err);
	conf_free(&conf);
}

START_TEST(test_conf_defaults)
{
	struct conf	conf;

	conf_init(&conf);
	ck_assert_str_eq(conf.daemon_socket, "/run/ember/emberd.sock");
	ck_assert_int_eq(conf.daemon_socket_mode, 0660);
	ck_assert_str_eq(conf.daemon_socket_group, "");
	ck_assert_str_eq(conf.daemon_log_level, "info");
	ck_assert_str_eq(conf.daemon_log_format, "text");
	ck_assert_str_eq(conf.daemon_worker_path, "");
	ck_assert_int_eq(conf.daemon_max_frame, 16 * 1024 * 1024);
	ck_assert_int_eq(conf.daemon_max_connections_per_uid, 64);
	ck_assert_int_eq(conf.daemon_max_connections, 0);
	ck_assert_int_eq(conf.daemon_request_timeout, 30000);
	ck_assert_int_eq(conf.daemon_idle_timeout, 600000);
	ck_assert_int_eq(conf.daemon_max_input_per_uid, 64 * 1024 * 1024);
	ck_assert_int_eq(conf.daemon_max_sessions_per_uid, 256);
	ck_assert_int_eq(conf.daemon_max_sessions, 16384);
	ck_assert_int_eq(conf.daemon_max_operations_per_uid, 64);
	ck_assert_int_eq(conf.daemon_max_results_per_uid, 512 * 1024 * 1024);
	ck_assert_int_eq(conf.daemon_max_broadcasts_per_uid, 64);
	ck_assert_int_eq(conf.daemon_shutdown_grace, 10000);
	ck_assert_int_eq(conf.workers_max, 0);
	ck_assert_int_eq(conf.workers_fork_backoff, 1000);
	ck_assert_int_eq(conf.stream_buffer, 1024 * 1024);
	ck_assert_int_eq(conf.stream_retry_buffer, 1024 * 1024);
	ck_assert_int_eq(conf.stream_max_duration, 5 * 60 * 1000);
	ck_assert_int_eq(conf.stream_max_bytes, 1024 * 1024 * 1024);
	ck_assert_int_eq(conf.operation_detached_timeout, 5 * 60 * 1000);
	ck_assert_int_eq(conf.operation_maintenance_interval, 30 * 1000);
	ck_assert_int_eq(conf.operation_tombstones, 1024);
	ck_assert_int_eq(conf.session_timeout, 5 * 60 * 1000);
	conf_free(&conf);
	ck_assert_ptr_null(conf.daemon_socket);
}
END_TEST

START_TEST(test_conf_duration)
{
	static const struct {
		const char	*text;
		int64_t		 ms;
	} good[] = {
		{ "500ms", 500 }, { "0ms", 0 }, { "30s", 30000 },
		{ "5m", 300000 }, { "1h", 3600000 }, { "7", 7000 }, { "0", 0 },
		{ "9223372036854775807ms", INT64_MAX },
	};
	static const char *const bad[] = {
		"", "ms", "-1s", "+1s", " 1s", "5x", "5 s", "1.5s", "s5", "5sec",
		"5S", "1d", "9223372036854775807h", "9223372036854775807",
		"99999999999999999999ms",
	};
	size_t	 i;
	int64_t	 ms;

	for (i = 0; i < sizeof good / sizeof *good; i++) {
		ms = -1;
		ck_assert_msg(conf_parse_duration(good[i].text, &ms) == 0,
		    "\"%s\" refused", good[i].text);
		ck_assert_int_eq(ms, good[i].ms);
	}
	for (i = 0; i < sizeof bad / sizeof *bad; i++) {
		ms = 12345;
		ck_assert_msg(conf_parse_duration(bad[i], &ms) == -1,
		    "\"%s\" accepted", bad[i]);
		ck_assert_int_eq(ms, 12345);
	}
}
END_TEST

START_TEST(test_conf_size)
{
	static const struct {
		const char	*text;
		int64_t		 bytes;
	} good[] = {
		{ "4096", 4096 }, { "0", 0 }, { "64k", 65536 },
		{ "64K", 65536 }, { "64kb", 65536 }, { "64KB", 65536 },
		{ "16m", 16 << 20 }, { "16M", 16 << 20 }, { "1g", 1 << 30 },
		{ "8589934591g", INT64_C(8589934591) << 30 },
	};
	static const char *const bad[] = {
		"", "k", "-1", "+1", " 1k", "1t", "1kbb", "1kx", "1.5m", "1 m",
		"1b", "8589934591g0", "8589934592g",
		"99999999999999999999",
	};
	size_t	 i;
	int64_t	 bytes;

	for (i = 0; i < sizeof good / sizeof *good; i++) {
		bytes = -1;
		ck_assert_msg(conf_parse_size(good[i].text, &bytes) == 0,
		    "\"%s\" refused", good[i].text);
		ck_assert_int_eq(bytes, good[i].bytes);
	}
	for (i = 0; i < sizeof bad / sizeof *bad; i++) {
		bytes = 12345;
		ck_assert_msg(conf_parse_size(bad[i], &bytes) == -1,
		    "\"%s\" accepted", bad[i]);
		ck_assert_int_eq(bytes, 12345);
	}
}
END_TEST

START_TEST(test_conf_key_is_size)
{
	/* Sizes by their type in the table, whatever the name says. */
	ck_assert(conf_key_is_size("daemon.max_spool_per_uid"));
	ck_assert(conf_key_is_size("daemon.max_checkpoint_bytes"));
	ck_assert(conf_key_is_size("stream.retry_buffer"));
	ck_assert(conf_key_is_size("workers.max_memory"));
	ck_assert(!conf_key_is_size("daemon.max_operations_per_uid"));
	ck_assert(!conf_key_is_size("daemon.max_checkpoints"));
	ck_assert(!conf_key_is_size("workers.task_timeout"));
	ck_assert(!conf_key_is_size("daemon.socket"));
	ck_assert(!conf_key_is_size("daemon.no_such_key"));
	ck_assert(!conf_key_is_size("max_spool"));
	ck_assert(!conf_key_is_size(""));
	ck_assert(!conf_key_is_size(".max_spool"));
	ck_assert(!conf_key_is_size(
	    "a_section_name_much_longer_than_any_real_one_xxxxxxxxxxxxxxxxxxxx"
	    ".max_spool"));
}
END_TEST

START_TEST(test_conf_types)
{
	struct conf	 conf;
	char		*err = NULL;

	conf_init(&conf);
	ck_assert_int_eq(conf_set_key(&conf, "daemon", "socket_mode", "0750",
	    &err), 0);
	ck_assert_int_eq(conf.daemon_socket_mode, 0750);
	ck_assert_int_eq(conf_set_key(&conf, "daemon", "socket_mode", "600",
	    &err), 0);
	ck_assert_int_eq(conf.daemon_socket_mode, 0600);
	ck_assert_int_eq(conf_set_key(&conf, "workers", "max", "12", &err), 0);
	ck_assert_int_eq(conf.workers_max, 12);
	ck_assert_int_eq(conf_set_key(&conf, "workers", "max", "auto", &err),
	    0);
	ck_assert_int_eq(conf.workers_max, 0);
	ck_assert_int_eq(conf_set_key(&conf, "daemon", "shutdown_grace",
	    "250ms", &err), 0);
	ck_assert_int_eq(conf.daemon_shutdown_grace, 250);
	ck_assert_int_eq(conf_set_key(&conf, "daemon", "shutdown_grace", "2m",
	    &err), 0);
	ck_assert_int_eq(conf.daemon_shutdown_grace, 120000);
	ck_assert_int_eq(conf_set_key(&conf, "daemon", "max_frame", "1g",
	    &err), 0);
	ck_assert_int_eq(conf.daemon_max_frame, 1 << 30);
	ck_assert_int_eq(conf_set_key(&conf, "stream", "buffer", "4096", &err),
	    0);
	ck_assert_int_eq(conf.stream_buffer, 4096);
	ck_assert_int_eq(conf_set_key(&conf, "daemon", "max_connections_per_uid",
	    "3", &err), 0);
	ck_assert_int_eq(conf.daemon_max_connections_per_uid, 3);
	ck_assert_int_eq(conf_set_key(&conf, "daemon", "log_level", "debug",
	    &err), 0);
	ck_assert_str_eq(conf.daemon_log_level, "debug");
	ck_assert_int_eq(conf_set_key(&conf, "daemon", "log_format", "json",
	    &err), 0);
	ck_assert_str_eq(conf.daemon_log_format, "json");
	ck_assert_int_eq(conf_set_key(&conf, "daemon", "socket", "/tmp/x.sock",
	    &err), 0);
	ck_assert_str_eq(conf.daemon_socket, "/tmp/x.sock");
	ck_assert_int_eq(conf_set_key(&conf, "daemon", "socket_group", "",
	    &err), 0);
	ck_assert_str_eq(conf.daemon_socket_group, "");
	ck_assert_ptr_null(err);
	conf_free(&conf);
}
END_TEST

START_TEST(test_conf_bad_values)
{
	static const struct {
		const char	*assignment;
		const char	*err;
	} bad[] = {
		{ "daemon.socket_mode=0x1ff",
		  "daemon.socket_mode: expected an octal mode such as 0660: "
		  "\"0x1ff\"" },
		{ "daemon.socket_mode=0680",
		  "daemon.socket_mode: expected an octal mode such as 0660: "
		  "\"0680\"" },
		{ "daemon.socket_mode=10000",
		  "daemon.socket_mode: expected an octal mode such as 0660: "
		  "\"10000\"" },
		{ "daemon.socket_mode=-1",
		  "daemon.socket_mode: expected an octal mode such as 0660: "
		  "\"-1\"" },
		{ "daemon.socket_mode=",
		  "daemon.socket_mode: expected an octal mode such as 0660: "
		  "\"\"" },
		{ "workers.max=0",
		  "workers.max: expected a positive whole number or auto: "
		  "\"0\"" },
		{ "workers.max=-2",
		  "workers.max: expected a positive whole number or auto: "
		  "\"-2\"" },
		{ "workers.max=AUTO",
		  "workers.max: expected a positive whole number or auto: "
		  "\"AUTO\"" },
		{ "daemon.max_connections_per_uid=many",
		  "daemon.max_connections_per_uid: expected a whole number: "
		  "\"many\"" },
		{ "daemon.max_connections_per_uid=4x",
		  "daemon.max_connections_per_uid: expected a whole number: "
		  "\"4x\"" },
		{ "daemon.max_connections_per_uid=0",
		  "daemon.max_connections_per_uid: value too small: \"0\"" },
		{ "daemon.max_frame=1023",
		  "daemon.max_frame: value too small: \"1023\"" },
		{ "stream.buffer=1k",
		  "stream.buffer: value too small: \"1k\"" },
		{ "workers.fork_backoff=0",
		  "workers.fork_backoff: value too small: \"0\"" },
		{ "daemon.shutdown_grace=soon",
		  "daemon.shutdown_grace: expected a duration such as 500ms, 30s "
		  "or 5m: \"soon\"" },
		{ "daemon.max_frame=big",
		  "daemon.max_frame: expected a size such as 4096, 64k, 16m or "
		  "1g: \"big\"" },
		{ "daemon.log_level=loud",
		  "daemon.log_level: expected error, warn, info or debug: "
		  "\"loud\"" },
		{ "daemon.log_format=xml",
		  "daemon.log_format: expected text or json: \"xml\"" },
	};
	struct conf	 conf;
	size_t		 i;

	for (i = 0; i < sizeof bad / sizeof *bad; i++)
		conf_expect_set_error(bad[i].assignment, bad[i].err);

	/* A refused value leaves the old one in place. */
	conf_init(&conf);
	ck_assert_int_eq(conf_set(&conf, "daemon.log_level=warn", NULL), 0);
	ck_assert_int_eq(conf_set(&conf, "workers.max=3", NULL), 0);
	{
		char *err = NULL;

		ck_assert_int_eq(conf_set(&conf, "daemon.log_level=x", &err),
		    -1);
		free(err);
		ck_assert_int_eq(conf_set(&conf, "workers.max=0", &err), -1);
		free(err);
	}
	ck_assert_str_eq(conf.daemon_log_level, "warn");
	ck_assert_int_eq(conf.workers_max, 3);
	conf_free(&conf);
}
END_TEST

START_TEST(test_conf_unknown)
{
	conf_expect_set_error("daemon.nope=1", "daemon.nope: unknown key");
	conf_expect_set_error("nope.socket=1", "nope.socket: unknown key");
	conf_expect_set_error("workers.socket=/x",
	    "workers.socket: unknown key");
	conf_expect_set_error("daemon.socket.x=1",
	    "daemon.socket.x: unknown key");
}
END_TEST

START_TEST(test_conf_set)
{
	static const char *const malformed[] = {
		"a=b", ".x=1", "a.=1", "daemon.socket", "", "=", ".=",
		"daemon=a.b", "socket",
	};
	struct conf	 conf;
	char		*err = NULL, *want;
	size_t		 i;

	for (i = 0; i < sizeof malformed / sizeof *malformed; i++) {
		ck_assert_int_ne(asprintf(&want, "\"%s\": expected "
		    "section.key=value", malformed[i]), -1);
		conf_expect_set_error(malformed[i], want);
		free(want);
	}

	conf_init(&conf);
	ck_assert_int_eq(conf_set(&conf, "daemon.socket=/run/a=b.sock", &err),
	    0);
	ck_assert_str_eq(conf.daemon_socket, "/run/a=b.sock");
	ck_assert_int_eq(conf_set(&conf, "daemon.socket_group=", &err), 0);
	ck_assert_str_eq(conf.daemon_socket_group, "");
	ck_assert_int_eq(conf_set(&conf, "workers.max=auto", &err), 0);
	ck_assert_int_eq(conf.workers_max, 0);
	ck_assert_int_eq(conf_set(&conf, "daemon.shutdown_grace=1h", &err), 0);
	ck_assert_int_eq(conf.daemon_shutdown_grace, 3600000);
	ck_assert_ptr_null(err);
	conf_free(&conf);
}
END_TEST

START_TEST(test_conf_file)
{
	struct conf	 conf;
	const char	*path;
	char		*err = NULL;

	path = conf_write("good.conf",
	    "; a comment\n"
	    "# another\n"
	    "\n"
	    "[daemon]\n"
	    "socket = /tmp/ember.sock\n"
	    "socket_mode = 0600\n"
	    "log_level = debug   ; inline comment\n"
	    "log_format=json\n"
	    "shutdown_grace = 2s\n"
	    "\n"
	    "[workers]\n"
	    "max = 6\n"
	    "fork_backoff = 250ms\n"
	    "[stream]\n"
	    "buffer = 64k\n");
	conf_init(&conf);
	ck_assert_int_eq(conf_load_file(&conf, path, &err), 0);
	ck_assert_ptr_null(err);
	ck_assert_str_eq(conf.daemon_socket, "/tmp/ember.sock");
	ck_assert_int_eq(conf.daemon_socket_mode, 0600);
	ck_assert_str_eq(conf.daemon_log_level, "debug");
	ck_assert_str_eq(conf.daemon_log_format, "json");
	ck_assert_int_eq(conf.daemon_shutdown_grace, 2000);
	ck_assert_int_eq(conf.workers_max, 6);
	ck_assert_int_eq(conf.workers_fork_backoff, 250);
	ck_assert_int_eq(conf.stream_buffer, 65536);
	/* Untouched keys keep their defaults. */
	ck_assert_int_eq(conf.daemon_max_frame, 16 * 1024 * 1024);
	conf_free(&conf);
}
END_TEST

START_TEST(test_conf_file_errors)
{
	conf_expect_file_error("socket = /x\n",
	    "1: socket: key outside a [section]");
	conf_expect_file_error("[daemon]\nlog_level = info\n\n"
	    "log_level = loud\n",
	    "4: daemon.log_level: expected error, warn, info or debug: "
	    "\"loud\"");
	conf_expect_file_error("[daemon]\nsocket = /x\nnope = 1\n",
	    "3: daemon.nope: unknown key");
	conf_expect_file_error("[daemon]\n[nope]\nsocket = /x\n",
	    "3: nope.socket: unknown key");
	conf_expect_file_error("[daemon]\nsocket = /x\nthis is not a key\n",
	    "3: syntax error");
	conf_expect_file_error("\n\n[daemon\nsocket = /x\n",
	    "3: syntax error");
	/* The first error is the one reported, whatever its kind. */
	conf_expect_file_error("[daemon]\nworkers max\nlog_level = loud\n",
	    "2: syntax error");
	conf_expect_file_error("[daemon]\nlog_level = loud\nworkers max\n",
	    "2: daemon.log_level: expected error, warn, info or debug: "
	    "\"loud\"");
	conf_expect_file_error("[daemon]\nlog_level = loud\nnope = 1\n",
	    "2: daemon.log_level: expected error, warn, info or debug: "
	    "\"loud\"");
}
END_TEST

START_TEST(test_conf_missing_file)
{
	struct conf	 conf;
	char		*err = NULL, *want, *path;

	ck_assert_int_ne(asprintf(&path, "%s/absent.conf", conf_dir), -1);
	conf_init(&conf);
	ck_assert_int_eq(conf_load_file(&conf, path, &err), -1);
	ck_assert_int_ne(asprintf(&want, "%s: %s", path, strerror(ENOENT)),
	    -1);
	ck_assert_str_eq(err, want);
	free(want);
	free(err);
	free(path);
	conf_free(&conf);
}
END_TEST

/* Dump conf, load the dump into a fresh conf and compare every field. */
static void
conf_check_round_trip(const struct conf *conf)
{
	struct conf	 again;
	const char	*path;
	char		*text = NULL, *err = NULL;
	size_t		 len = 0;
	FILE		*f;

	ck_assert_ptr_nonnull(f = open_memstream(&text, &len));
	conf_dump(conf, f, 3, 448);
	ck_assert_int_eq(fclose(f), 0);
	path = conf_write("dump.conf", text);

	conf_init(&again);
	ck_assert_msg(conf_load_file(&again, path, &err) == 0,
	    "reload: %s\n%s", err, text);
	ck_assert_str_eq(again.daemon_socket, conf->daemon_socket);
	ck_assert_int_eq(again.daemon_socket_mode, conf->daemon_socket_mode);
	ck_assert_str_eq(again.daemon_socket_group, conf->daemon_socket_group);
	ck_assert_str_eq(again.daemon_log_level, conf->daemon_log_level);
	ck_assert_str_eq(again.daemon_log_format, conf->daemon_log_format);
	ck_assert_str_eq(again.daemon_worker_path, conf->daemon_worker_path);
	ck_assert_int_eq(again.daemon_max_frame, conf->daemon_max_frame);
	ck_assert_int_eq(again.daemon_max_connections_per_uid,
	    conf->daemon_max_connections_per_uid);
	ck_assert_int_eq(again.daemon_shutdown_grace,
	    conf->daemon_shutdown_grace);
	ck_assert_int_eq(again.workers_max, conf->workers_max);
	ck_assert_int_eq(again.workers_fork_backoff,
	    conf->workers_fork_backoff);
	ck_assert_int_eq(again.stream_buffer, conf->stream_buffer);
	ck_assert_int_eq(again.daemon_max_result, conf->daemon_max_result);
	ck_assert_int_eq(again.workers_idle_timeout,
	    conf->workers_idle_timeout);
	ck_assert_str_eq(again.daemon_pidfile, conf->daemon_pidfile);
	conf_free(&again);
	free(text);
	unlink(path);
	free(conf_files[--conf_nfiles]);
}

START_TEST(test_conf_dump)
{
	static const char *const sets[] = {
		"daemon.socket=/var/run/e.sock", "daemon.socket_mode=0640",
		"daemon.socket_group=ember", "daemon.log_level=error",
		"daemon.log_format=json", "daemon.worker_path=/opt/ember-worker",
		"daemon.max_frame=3m", "daemon.max_connections_per_uid=9",
		"daemon.shutdown_grace=1500ms", "workers.max=5",
		"workers.fork_backoff=1h", "stream.buffer=1g",
		"daemon.max_result=4097", "workers.idle_timeout=1500ms",
		"daemon.pidfile=/run/e.pid",
	};
	struct conf	 conf;
	char		*text = NULL;
	size_t		 len = 0, i;
	FILE		*f;

	conf_init(&conf);
	conf_check_round_trip(&conf);

	/* The dump of the defaults is an INI file with every section. */
	ck_assert_ptr_nonnull(f = open_memstream(&text, &len));
	conf_dump(&conf, f, 3, 448);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_ptr_nonnull(strstr(text, "[daemon]\n"));
	ck_assert_ptr_nonnull(strstr(text, "\n[workers]\n"));
	ck_assert_ptr_nonnull(strstr(text, "\n[stream]\n"));
	ck_assert_ptr_nonnull(strstr(text, "socket_mode = 0660\n"));
	ck_assert_ptr_nonnull(strstr(text,
	    "max = auto ; 3 here (one per CPU)\n"));
	ck_assert_ptr_nonnull(strstr(text,
	    "max_connections = auto ; 448 here (from RLIMIT_NOFILE)\n"));
	ck_assert_ptr_nonnull(strstr(text, "shutdown_grace = 10s\n"));
	ck_assert_ptr_nonnull(strstr(text, "max_frame = 16m\n"));
	ck_assert_ptr_nonnull(strstr(text, "max_broadcast = 1g\n"));
	ck_assert_ptr_nonnull(strstr(text, "idle_timeout = 1m\n"));
	ck_assert_ptr_nonnull(strstr(text, "task_timeout = 0s\n"));
	free(text);

	for (i = 0; i < sizeof sets / sizeof *sets; i++)
		ck_assert_int_eq(conf_set(&conf, sets[i], NULL), 0);
	conf_check_round_trip(&conf);
	conf_free(&conf);
}
END_TEST

/* Build the conf suite. */
Suite *
conf_suite(void)
{
	Suite	*s = suite_create("conf");
	TCase	*tc;

	tc = tcase_create("defaults");
	tcase_add_test(tc, test_conf_defaults);
	suite_add_tcase(s, tc);

	tc = tcase_create("values");
	tcase_add_test(tc, test_conf_duration);
	tcase_add_test(tc, test_conf_size);
	tcase_add_test(tc, test_conf_key_is_size);
	tcase_add_test(tc, test_conf_types);
	tcase_add_test(tc, test_conf_bad_values);
	tcase_add_test(tc, test_conf_unknown);
	suite_add_tcase(s, tc);

	tc = tcase_create("set");
	tcase_add_test(tc, test_conf_set);
	suite_add_tcase(s, tc);

	tc = tcase_create("file");
	tcase_add_checked_fixture(tc, conf_setup, conf_teardown);
	tcase_add_test(tc, test_conf_file);
	tcase_add_test(tc, test_conf_file_errors);
	tcase_add_test(tc, test_conf_missing_file);
	suite_add_tcase(s, tc);

	tc = tcase_create("dump");
	tcase_add_checked_fixture(tc, conf_setup, conf_teardown);
	tcase_add_test(tc, test_conf_dump);
	suite_add_tcase(s, tc);

	return (s);
}
