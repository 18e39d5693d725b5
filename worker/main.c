#include <sys/socket.h>

#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "forkserver.h"
#include "log.h"
#include "protocol.h"

static __attribute__((noreturn)) void	main_usage(void);

/* Print the usage and fail. */
static void
main_usage(void)
{
	fprintf(stderr,
	    "usage: ember-worker --fork-server [--log-level LEVEL]\n"
	    "       ember-worker --version\n"
	    "The fork-server is started by emberd, with its control "
	    "socket on fd %d.\n", FORKSERVER_FD);
	exit(2);
}

/* Check how we were started and run the fork-server. */
int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "fork-server", no_argument, NULL, 'F' },
		{ "log-level", required_argument, NULL, 'l' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 }
	};
	enum log_level	level = LOG_LEVEL_INFO;
	int		ch, forkserver = 0, type;
	socklen_t	len = sizeof type;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 'F':
			forkserver = 1;
			break;
		case 'l':
			if (log_level_from_string(optarg, &level) == -1) {
				fprintf(stderr, "ember-worker: unknown log "
				    "level: %s\n", optarg);
				main_usage();
			}
			break;
		case 'V':
			printf("ember-worker %s (protocol %d)\n",
			    PACKAGE_VERSION, EMBER_PROTOCOL_VERSION);
			return (0);
		default:
			main_usage();
		}
	}
	if (optind != argc || !forkserver)
		main_usage();

	log_open("ember-worker", level, LOG_FORMAT_TEXT, 0);
	if (getsockopt(FORKSERVER_FD, SOL_SOCKET, SO_TYPE, &type, &len) == -1 ||
	    type != SOCK_SEQPACKET)
		fatalx("fd %d is not a SOCK_SEQPACKET socket: start me from "
		    "emberd", FORKSERVER_FD);
	if (fcntl(FORKSERVER_FD, F_SETFD, FD_CLOEXEC) == -1)
		fatal("fcntl");
	return (forkserver_main(FORKSERVER_FD));
}
