/*
 * A fork-server of another build, for test_workers.py: run by emberd
 * (through a script daemon.worker_path names) in place of ember-worker
 * --fork-server, it sends one packet on fd 3, type and id as its
 * arguments say (FS_HELLO with 1 is an ember-worker of before the worker
 * protocol had a version of its own), and then waits for emberd to kill
 * it or go.  It links nothing of ember's: an old build knows nothing of
 * today's headers.
 */
#include <arpa/inet.h>

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int
main(int argc, char **argv)
{
	uint32_t	msg[4];
	char		buf[64];

	if (argc < 3) {
		fprintf(stderr, "usage: fake_forkserver type id [...]\n");
		return (2);
	}
	/* The rest are emberd's options for a real one: ignored. */
	msg[0] = htonl((uint32_t)atoi(argv[1]));
	msg[1] = htonl((uint32_t)atoi(argv[2]));
	msg[2] = htonl((uint32_t)getpid());
	msg[3] = 0;
	if (write(3, msg, sizeof msg) != (ssize_t)sizeof msg) {
		perror("fake_forkserver: write");
		return (1);
	}
	/* Whatever emberd asks is never answered; its end of file ends it. */
	while (read(3, buf, sizeof buf) > 0)
		;
	return (0);
}
