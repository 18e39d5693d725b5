/*
 * emberd: the driver daemon.  Reads the conf, opens the socket, starts the
 * fork-server and runs the event loop until SIGTERM or SIGINT has drained
 * the running operations.
 */
#include <sys/types.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "checkpoint.h"
#include "commit.h"
#include "connection.h"
#include "emberd.h"
#include "fslink.h"
#include "heap.h"
#include "httpd.h"
#include "helper.h"
#include "keeper.h"
#include "listener.h"
#include "limit.h"
#include "localdir.h"
#include "log.h"
#include "operation.h"
#include "parser.h"
#include "pool.h"
#include "proctitle.h"
#include "savelog.h"
#include "scheduler.h"
#include "session.h"
#include "service.h"
#include "shufflefs.h"
#include "userdb.h"
#include "xmalloc.h"

struct event_base	*ember_base;
struct conf		 ember_conf;
struct ember_counters	 ember_counters;
int			 ember_draining;
uint64_t		 ember_started_ms;

static const char	*ember_conf_path;	/* for SIGHUP */
static char		**ember_sets;
static int		 ember_nsets;

static struct event	*ember_sigterm, *ember_sigint, *ember_sighup;
static struct event	*ember_sigchld, *ember_grace, *ember_drain;
static struct event	*ember_flushed;

/* How long interrupted clients have to take their last frame. */
#define EMBER_FLUSH_MS	2000

uint64_t
ember_now_ms(void)
{
	return (ember_now_ns() / 1000000);
}

uint64_t
ember_now_ns(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ((uint64_t)ts.tv_sec * 1000000000 + (uint64_t)ts.tv_nsec);
}

int
ember_workers_max(void)
{
	static int	cpus;
	long		n;

	if (ember_conf.workers_max > 0)
		return ((int)ember_conf.workers_max);
	/* glibc reads /sys for this on every call: ask once. */
	if (cpus == 0) {
		n = sysconf(_SC_NPROCESSORS_ONLN);
		cpus = n > 0 ? (int)n : 1;
	}
	return (cpus);
}

int
ember_workers_total(void)
{
	int64_t	max = ember_workers_max(), total = ember_conf.workers_max_total;

	if (total == 0)
		total = max * 2;
	return ((int)(total > max ? total : max));
}

const char *
ember_local_dir(void)
{
	return (localdir_path());
}

/* During a drain: once no operation is left, flush and close every
 * connection, then stop the loop. */
static void
ember_drain_cb(evutil_socket_t fd, short events, void *arg)
{
	(void)fd; (void)events; (void)arg;
	if (operation_count() > 0)
		return;
	if (connection_close_flushed() > 0)
		return;		/* back here when the last one is closed */
	/* Detached operations end now; a save among them is undone (as
	 * its user) before emberd exits, within the grace period. */
	operation_interrupt_all("emberd is shutting down");
	if (commit_pending() > 0)
		return;		/* back here when the last one is undone */
	if (checkpoint_drain() > 0)
		return;		/* the local checkpoints' files are going */
	log_info("drained: no operation left, exiting");
	event_base_loopexit(ember_base, NULL);
}

/* Called as operations and connections end; runs the drain check from the
 * loop, never underneath the caller. */
void
ember_check_drained(void)
{
	if (ember_draining)
		event_active(ember_drain, 0, 1);
}

/* The interrupted clients' SHUTTING_DOWN frames had their time. */
static void
ember_flushed_cb(evutil_socket_t fd, short events, void *arg)
{
	(void)fd; (void)events; (void)arg;
	log_info("exiting with %zu connection(s) not flushed",
	    connection_close_flushed());
	event_base_loopexit(ember_base, NULL);
}

/*
 * Grace period over: interrupt what is still running.  Each interrupted
 * client gets SHUTTING_DOWN (an error reply, or a stream's error frame);
 * emberd exits once those are written, or after EMBER_FLUSH_MS for clients
 * that do not read.
 */
static void
ember_grace_cb(evutil_socket_t fd, short events, void *arg)
{
	struct timeval	tv = { EMBER_FLUSH_MS / 1000,
			    (EMBER_FLUSH_MS % 1000) * 1000 };

	(void)fd; (void)events; (void)arg;
	log_warn("shutdown grace period over: interrupting %zu operation(s)",
	    operation_count());
	operation_interrupt_all("emberd is shutting down");
	connection_shutdown();
	ember_flushed = evtimer_new(ember_base, ember_flushed_cb, NULL);
	evtimer_add(ember_flushed, &tv);
	ember_check_drained();
}

/* SIGTERM or SIGINT: stop accepting, let operations finish, then exit. */
static void
ember_signal_drain_cb(evutil_socket_t sig, short events, void *arg)
{
	struct timeval	tv;

	(void)events; (void)arg;
	if (ember_draining) {
		log_info("second SIG%s: exiting now", sigabbrev_np((int)sig));
		operation_interrupt_all("emberd is shutting down");
		event_base_loopexit(ember_base, NULL);
		return;
	}
	log_info("SIG%s: draining (grace %lldms)", sigabbrev_np((int)sig),
	    (long long)ember_conf.daemon_shutdown_grace);
	ember_draining = 1;
	service_stopping();
	listener_stop();
	tv.tv_sec = ember_conf.daemon_shutdown_grace / 1000;
	tv.tv_usec = (ember_conf.daemon_shutdown_grace % 1000) * 1000;
	ember_grace = evtimer_new(ember_base, ember_grace_cb, NULL);
	evtimer_add(ember_grace, &tv);
	ember_check_drained();
}

/*
 * SIGHUP: read the conf file and the --set overrides again.  Everything
 * but the socket, its mode and group, the worker path, the pidfile, the
 * local directory and the log format applies to what starts from now on;
 * those need a restart.  A broken file changes nothing.
 */
static void
ember_signal_hup_cb(evutil_socket_t sig, short events, void *arg)
{
	struct conf	 fresh, old;
	char		*err;
	int64_t		 shuffle;
	int		 i;
	enum log_level	 level;

	(void)sig; (void)events; (void)arg;
	service_reloading();
	conf_init(&fresh);
	if (ember_conf_path != NULL &&
	    conf_load_file(&fresh, ember_conf_path, &err) == -1)
		goto fail;
	for (i = 0; i < ember_nsets; i++) {
		if (conf_set(&fresh, ember_sets[i], &err) == -1)
			goto fail;
	}
	if (strcmp(fresh.daemon_socket, ember_conf.daemon_socket) != 0 ||
	    fresh.daemon_socket_mode != ember_conf.daemon_socket_mode ||
	    strcmp(fresh.daemon_socket_group,
	    ember_conf.daemon_socket_group) != 0 ||
	    strcmp(fresh.daemon_worker_path,
	    ember_conf.daemon_worker_path) != 0 ||
	    strcmp(fresh.daemon_pidfile, ember_conf.daemon_pidfile) != 0 ||
	    strcmp(fresh.daemon_local_dir, ember_conf.daemon_local_dir) != 0 ||
	    strcmp(fresh.daemon_log_format, ember_conf.daemon_log_format) != 0 ||
	    fresh.daemon_shuffle_mounts != ember_conf.daemon_shuffle_mounts)
		log_warn("SIGHUP: daemon.socket, socket_mode, socket_group, "
		    "worker_path, pidfile, local_dir, log_format and "
		    "shuffle_mounts change on restart only; keeping the old "
		    "ones");
	free(fresh.daemon_socket);
	fresh.daemon_socket = xstrdup(ember_conf.daemon_socket);
	fresh.daemon_socket_mode = ember_conf.daemon_socket_mode;
	free(fresh.daemon_socket_group);
	fresh.daemon_socket_group = xstrdup(ember_conf.daemon_socket_group);
	free(fresh.daemon_worker_path);
	fresh.daemon_worker_path = xstrdup(ember_conf.daemon_worker_path);
	free(fresh.daemon_pidfile);
	fresh.daemon_pidfile = xstrdup(ember_conf.daemon_pidfile);
	free(fresh.daemon_local_dir);
	fresh.daemon_local_dir = xstrdup(ember_conf.daemon_local_dir);
	free(fresh.daemon_log_format);
	fresh.daemon_log_format = xstrdup(ember_conf.daemon_log_format);
	fresh.daemon_shuffle_mounts = ember_conf.daemon_shuffle_mounts;
	shuffle = ember_conf.daemon_max_shuffle_per_uid;
	old = ember_conf;
	ember_conf = fresh;
	conf_free(&old);
	log_level_from_string(ember_conf.daemon_log_level, &level);
	log_set_level(level);
	log_info("SIGHUP: conf reloaded (workers.max %d)", ember_workers_max());
	httpd_reload();
	if (ember_conf.daemon_max_shuffle_per_uid != shuffle)
		shufflefs_reload();	/* the live mounts' size too */
	scheduler_kick();
	service_reloaded();
	return;
fail:
	log_error("SIGHUP: %s; keeping the running conf", err);
	free(err);
	conf_free(&fresh);
	service_reloaded();
}

/* SIGCHLD: emberd's children are the fork-servers, one per pool (the
 * workers are theirs): reap those that exited. */
static void
ember_signal_chld_cb(evutil_socket_t sig, short events, void *arg)
{
	(void)sig; (void)events; (void)arg;
	fslink_reap();
}

static void
ember_usage(FILE *f)
{
	fprintf(f,
	    "usage: emberd [-f] [-c FILE] [--set section.key=value ...]\n"
	    "       emberd --dump-conf [-c FILE] [--set ...]\n"
	    "  -c, --conf FILE   read the conf file (default %s/ember.conf,\n"
	    "                    if it exists)\n"
	    "  -s, --set K=V     override one conf key, e.g. --set workers.max=4\n"
	    "  -f, --foreground  stay in the foreground, log to stderr\n"
	    "      --dump-conf   print the effective conf and exit\n"
	    "  -V, --version     print the version and exit\n",
	    EMBER_SYSCONFDIR);
}

/* Read the conf file then apply every --set, in order. */
static void
ember_load_conf(const char *path, char **sets, int nsets)
{
	char	*err;
	int	 i;

	conf_init(&ember_conf);
	if (path == NULL && access(EMBER_SYSCONFDIR "/ember.conf", F_OK) == 0)
		path = EMBER_SYSCONFDIR "/ember.conf";
	ember_conf_path = path;
	if (path != NULL && conf_load_file(&ember_conf, path, &err) == -1) {
		fprintf(stderr, "emberd: %s\n", err);
		exit(2);
	}
	for (i = 0; i < nsets; i++) {
		if (conf_set(&ember_conf, sets[i], &err) == -1) {
			fprintf(stderr, "emberd: --set %s\n", err);
			exit(2);
		}
	}
}

/* Read the command line: -1 to go on, else the exit status. */
static int
ember_parse_args(int argc, char **argv, const char **conf_path,
    int *foreground, int *dump)
{
	static const struct option longopts[] = {
		{ "conf", required_argument, NULL, 'c' },
		{ "set", required_argument, NULL, 's' },
		{ "foreground", no_argument, NULL, 'f' },
		{ "dump-conf", no_argument, NULL, 'D' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	int	ch;

	while ((ch = getopt_long(argc, argv, "c:s:fVh", longopts, NULL)) != -1) {
		switch (ch) {
		case 'c':
			*conf_path = optarg;
			break;
		case 's':
			ember_sets = xreallocarray(ember_sets,
			    (size_t)ember_nsets + 1, sizeof *ember_sets);
			ember_sets[ember_nsets++] = optarg;
			break;
		case 'f':
			*foreground = 1;
			break;
		case 'D':
			*dump = 1;
			break;
		case 'V':
			printf("emberd %s\n", PACKAGE_VERSION);
			return (0);
		case 'h':
			ember_usage(stdout);
			return (0);
		default:
			ember_usage(stderr);
			return (2);
		}
	}
	if (optind != argc) {
		ember_usage(stderr);
		return (2);
	}
	return (-1);
}

/* Make the event loop and its signal events. */
static void
ember_open_loop(void)
{
	signal(SIGPIPE, SIG_IGN);
	/*
	 * Worker output arrives in batches of up to 512 KiB and leaves once the
	 * client took it.  glibc would mmap and unmap each such buffer, or
	 * trim the heap after each, faulting the pages in again every time:
	 * keep them in the heap.
	 */
	mallopt(M_MMAP_THRESHOLD, 4 * 1024 * 1024);
	mallopt(M_TRIM_THRESHOLD, 64 * 1024 * 1024);
	if ((ember_base = event_base_new()) == NULL)
		fatalx("event_base_new failed");
	ember_started_ms = ember_now_ms();
	ember_drain = event_new(ember_base, -1, 0, ember_drain_cb, NULL);

	/* Signals first: once the socket exists, a SIGTERM must drain. */
	ember_sigterm = evsignal_new(ember_base, SIGTERM, ember_signal_drain_cb,
	    NULL);
	ember_sigint = evsignal_new(ember_base, SIGINT, ember_signal_drain_cb,
	    NULL);
	ember_sighup = evsignal_new(ember_base, SIGHUP, ember_signal_hup_cb,
	    NULL);
	ember_sigchld = evsignal_new(ember_base, SIGCHLD, ember_signal_chld_cb,
	    NULL);
	evsignal_add(ember_sigterm, NULL);
	evsignal_add(ember_sigint, NULL);
	evsignal_add(ember_sighup, NULL);
	evsignal_add(ember_sigchld, NULL);
	heap_start();
}

/* Undo a start that failed: the socket, the local directory, the pidfile. */
static void
ember_failed_start(void)
{
	httpd_stop();
	listener_stop();
	localdir_close(1);
	service_exit();
}

/*
 * Open the socket, the pidfile, the local directory, then detach (without
 * -f), then the scheduler and the pools: what can fail is checked while a
 * failure still reaches the terminal.
 */
static int
ember_start(int foreground, enum log_level level, enum log_format format)
{
	if (listener_start() == -1)
		return (-1);
	if (service_open_pidfile(foreground) == -1 ||
	    localdir_open() == -1 || httpd_start() == -1 ||
	    fslink_init() == -1) {
		ember_failed_start();
		return (-1);
	}
	/* Before anything uses LOCALDIR/shuffle. */
	shuffle_start();
	if (!foreground) {
		service_detach();
		log_open("emberd", level, format, 1);
	}
	shufflefs_log();
	connection_init();
	scheduler_init();
	helper_init();
	if (pool_init() == -1) {
		scheduler_free();
		ember_failed_start();
		return (-1);
	}
	operation_maintenance_start();
	checkpoint_init();
	shuffle_clean_stale();
	savelog_open();
	/* Last: the start's own lookups wait, before the loop runs. */
	userdb_start();
	service_started(geteuid() != 0);
	return (0);
}

/* Free in reverse order of creation, so valgrind stays clean. */
static void
ember_stop(void)
{
	httpd_stop();
	listener_stop();
	operation_interrupt_all("emberd is shutting down");
	connection_close_all();
	parser_shutdown();
	session_close_all();
	checkpoint_shutdown();
	operation_maintenance_stop();
	commit_free_all();
	savelog_close();
	helper_shutdown();
	shuffle_shutdown();
	pool_shutdown();
	scheduler_free();
	userdb_stop();
	localdir_close(1);
	service_exit();
	if (ember_grace != NULL)
		event_free(ember_grace);
	if (ember_flushed != NULL)
		event_free(ember_flushed);
	event_free(ember_drain);
	heap_stop();
	event_free(ember_sigchld);
	event_free(ember_sighup);
	event_free(ember_sigint);
	event_free(ember_sigterm);
	event_base_free(ember_base);
}

int
main(int argc, char **argv)
{
	const char	*conf_path = NULL;
	int		 foreground = 0, dump = 0, rc;
	enum log_level	 level;
	enum log_format	 format;

	proctitle_init(argc, argv);
	/* jansson's hash seed, set before the parser's threads make objects
	 * (connection_init). */
	json_object_seed(0);
	if ((rc = ember_parse_args(argc, argv, &conf_path, &foreground,
	    &dump)) != -1)
		return (rc);
	ember_load_conf(conf_path, ember_sets, ember_nsets);
	if (dump) {
		conf_dump(&ember_conf, stdout, ember_workers_max(),
		    limit_total(LIMIT_CONNECTIONS));
		conf_free(&ember_conf);
		free(ember_sets);
		return (0);
	}

	log_level_from_string(ember_conf.daemon_log_level, &level);
	log_format_from_string(ember_conf.daemon_log_format, &format);
	/* Until it has detached, emberd's errors go to the terminal. */
	log_open("emberd", level, format, 0);
	if (!foreground)
		service_absolute_paths();
	else
		keeper_start();
	ember_open_loop();
	if (ember_start(foreground, level, format) == -1)
		return (1);
	event_base_dispatch(ember_base);

	ember_stop();
	log_info("emberd exited");
	conf_free(&ember_conf);
	free(ember_sets);
	return (service_failed() ? 1 : 0);
}
