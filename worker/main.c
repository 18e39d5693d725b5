#include <sys/socket.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "forkserver.h"
#include "log.h"
#include "plan.h"
#include "proctitle.h"
#include "protocol.h"
#include "stdio_chain.h"
#include "xmalloc.h"

static __attribute__((noreturn)) void	main_usage(void);

/* Print the usage and fail. */
static void
main_usage(void)
{
	fprintf(stderr,
	    "usage: ember-worker --fork-server [--log-level LEVEL] "
	    "[--user UID:GID]\n"
	    "                    [--preload PATH]... "
	    "[--python-preload MODULE]...\n"
	    "                    [--memory-limit BYTES] "
	    "[--nproc-limit COUNT]\n"
	    "                    [--bind-now]\n"
	    "       ember-worker --stdio --plan JSON [--partition N] "
	    "[--check]\n"
	    "                    [--broadcast ID=PATH]...\n"
	    "       ember-worker --version\n"
	    "The fork-server is started by emberd, with its control "
	    "socket on fd %d.\n", FORKSERVER_FD);
	exit(2);
}

/* Parse a decimal number from s up to max, ending at *end (or at the end
 * of s if end is NULL): 0, or -1 if it is not one. */
static int
main_number(const char *s, uintmax_t max, uintmax_t *out, char **end)
{
	char	*e;

	if (*s < '0' || *s > '9')
		return (-1);
	errno = 0;
	*out = strtoumax(s, &e, 10);
	if (errno != 0 || *out > max || (end == NULL && *e != '\0'))
		return (-1);
	if (end != NULL)
		*end = e;
	return (0);
}

/* Parse --user UID:GID. */
static void
main_user(const char *arg, struct forkserver_options *o)
{
	uintmax_t	 uid, gid;
	char		*colon;

	if (main_number(arg, (uid_t)-1 - 1, &uid, &colon) == -1 ||
	    *colon != ':' ||
	    main_number(colon + 1, (gid_t)-1 - 1, &gid, NULL) == -1) {
		fprintf(stderr, "ember-worker: --user %s: expected UID:GID\n",
		    arg);
		main_usage();
	}
	o->drop = 1;
	o->uid = (uid_t)uid;
	o->gid = (gid_t)gid;
}

/* Check how we were started and run the fork-server. */
int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "fork-server", no_argument, NULL, 'F' },
		{ "bind-now", no_argument, NULL, 'B' },
		{ "log-level", required_argument, NULL, 'l' },
		{ "memory-limit", required_argument, NULL, 'm' },
		{ "nproc-limit", required_argument, NULL, 'n' },
		{ "preload", required_argument, NULL, 'p' },
		{ "python-preload", required_argument, NULL, 'P' },
		{ "user", required_argument, NULL, 'u' },
		{ "version", no_argument, NULL, 'V' },
		{ "stdio", no_argument, NULL, 's' },
		{ "plan", required_argument, NULL, 'j' },
		{ "partition", required_argument, NULL, 'i' },
		{ "check", no_argument, NULL, 'c' },
		{ "broadcast", required_argument, NULL, 'b' },
		{ NULL, 0, NULL, 0 }
	};
	struct forkserver_options	 o;
	enum log_level			 level = LOG_LEVEL_INFO;
	uintmax_t			 limit;
	int				 ch, forkserver = 0, type, rc;
	int				 stdio = 0, check = 0;
	char				*plan = NULL, **broadcasts = NULL;
	size_t				 nbroadcasts = 0;
	uintmax_t			 partition = 0;
	socklen_t			 len = sizeof type;
	size_t				 i;

	/* Before getopt permutes argv; the title goes over its strings. */
	proctitle_init(argc, argv);

	memset(&o, 0, sizeof o);
	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 'F':
			forkserver = 1;
			break;
		case 'B':
			/* emberd's, read by the dynamic linker as we started:
			 * the jobs' commands start without it. */
			if (unsetenv("LD_BIND_NOW") == -1)
				fatal("unsetenv");
			break;
		case 'l':
			if (log_level_from_string(optarg, &level) == -1) {
				fprintf(stderr, "ember-worker: unknown log "
				    "level: %s\n", optarg);
				main_usage();
			}
			break;
		case 'm':
			if (main_number(optarg, UINT64_MAX, &limit,
			    NULL) == -1) {
				fprintf(stderr, "ember-worker: --memory-limit "
				    "%s: expected bytes\n", optarg);
				main_usage();
			}
			o.memory_limit = limit;
			break;
		case 'n':
			if (main_number(optarg, UINT64_MAX, &limit,
			    NULL) == -1) {
				fprintf(stderr, "ember-worker: --nproc-limit "
				    "%s: expected a count\n", optarg);
				main_usage();
			}
			o.nproc_limit = limit;
			break;
		case 'p':
			/* Copied: the title will overwrite optarg. */
			o.preload = xreallocarray(o.preload, o.npreload + 1,
			    sizeof *o.preload);
			o.preload[o.npreload++] = xstrdup(optarg);
			break;
		case 'P':
			o.pypreload = xreallocarray(o.pypreload,
			    o.npypreload + 1, sizeof *o.pypreload);
			o.pypreload[o.npypreload++] = xstrdup(optarg);
			break;
		case 'u':
			main_user(optarg, &o);
			break;
		case 's':
			stdio = 1;
			break;
		case 'j':
			plan = xstrdup(optarg);	/* as --preload's */
			break;
		case 'i':
			if (main_number(optarg, PLAN_MAX_PARTITIONS - 1,
			    &partition, NULL) == -1) {
				fprintf(stderr, "ember-worker: --partition "
				    "%s: expected a partition index\n",
				    optarg);
				main_usage();
			}
			break;
		case 'c':
			check = 1;
			break;
		case 'b':
			/* Copied, as --preload's. */
			broadcasts = xreallocarray(broadcasts, nbroadcasts + 1,
			    sizeof *broadcasts);
			broadcasts[nbroadcasts++] = xstrdup(optarg);
			break;
		case 'V':
			printf("ember-worker %s (protocol %d, worker "
			    "protocol %d)\n", PACKAGE_VERSION,
			    EMBER_PROTOCOL_VERSION,
			    EMBER_WORKER_PROTOCOL_VERSION);
			return (0);
		default:
			main_usage();
		}
	}
	if (optind != argc || forkserver == stdio || (stdio && plan == NULL) ||
	    (!stdio && nbroadcasts > 0))
		main_usage();
	/* Another engine's executor runs the ops: no emberd, no fork-server. */
	if (stdio) {
		log_open("ember-worker", level, LOG_FORMAT_TEXT, 0);
		rc = stdio_chain_main(plan, (int)partition, check,
		    broadcasts, nbroadcasts);
		free(plan);
		for (i = 0; i < nbroadcasts; i++)
			free(broadcasts[i]);
		free(broadcasts);
		return (rc);
	}

	/* Our stderr is a pipe emberd reads: it stamps and formats each line. */
	log_open("ember-worker", level, LOG_FORMAT_RELAYED, 0);
	if (getsockopt(FORKSERVER_FD, SOL_SOCKET, SO_TYPE, &type, &len) == -1 ||
	    type != SOCK_SEQPACKET)
		fatalx("fd %d is not a SOCK_SEQPACKET socket: start me from "
		    "emberd", FORKSERVER_FD);
	if (fcntl(FORKSERVER_FD, F_SETFD, FD_CLOEXEC) == -1)
		fatal("fcntl");
	rc = forkserver_main(FORKSERVER_FD, &o);

	for (i = 0; i < o.npreload; i++)
		free(o.preload[i]);
	free(o.preload);
	for (i = 0; i < o.npypreload; i++)
		free(o.pypreload[i]);
	free(o.pypreload);
	return (rc);
}
