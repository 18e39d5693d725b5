#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cancel.h"
#include "ember.h"

static pthread_mutex_t	 cancel_lock = PTHREAD_MUTEX_INITIALIZER;
static char		*cancel_socket;
static char		 cancel_session[64];
static char		 cancel_operation[64];
static atomic_int	 cancel_taken;	/* a SIGINT is being handled */

/*
 * Wait for SIGINT; interrupt the operation, if one is set; then take the
 * signal as the program would have (the progress line's handler erases
 * the line, and the program dies of it).  A second Ctrl-C while emberd is
 * asked lands here too, unblocked by then, and ends the wait.
 */
static void *
cancel_thread(void *arg)
{
	sigset_t	 set;
	char		 session[64], operation[64], *err;
	int		 sig;

	(void)arg;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	while (sigwait(&set, &sig) != 0)
		;
	atomic_store(&cancel_taken, 1);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	pthread_mutex_lock(&cancel_lock);
	memcpy(session, cancel_session, sizeof session);
	memcpy(operation, cancel_operation, sizeof operation);
	pthread_mutex_unlock(&cancel_lock);
	if (*operation != '\0' && ember_interrupt(cancel_socket, session,
	    operation, &err) == -1) {
		fprintf(stderr, "\rember: interrupting operation %s: %s\n",
		    operation, err != NULL ? err : "out of memory");
		free(err);
	}
	raise(SIGINT);
	return (NULL);
}

void
cancel_arm(const char *socket_path)
{
	pthread_t	t;
	sigset_t	set;

	if (socket_path != NULL && (cancel_socket = strdup(socket_path)) ==
	    NULL)
		return;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	/* Every thread started from now on inherits the mask. */
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	if (pthread_create(&t, NULL, cancel_thread, NULL) != 0) {
		pthread_sigmask(SIG_UNBLOCK, &set, NULL);
		return;
	}
	pthread_detach(t);
}

void
cancel_set(const char *session, const char *operation)
{
	pthread_mutex_lock(&cancel_lock);
	snprintf(cancel_session, sizeof cancel_session, "%s", session);
	snprintf(cancel_operation, sizeof cancel_operation, "%s", operation);
	pthread_mutex_unlock(&cancel_lock);
}

void
cancel_wait(void)
{
	if (!atomic_load(&cancel_taken))
		return;
	for (;;)
		pause();
}
