/*
 * Helpers: one-shot processes the fork-server forks on emberd's request
 * (FS_HELPER) to do file work as the user, so that emberd never touches
 * a path a client named with its own rights.  A helper reads one request
 * frame, runs the verb it names, answers one reply frame (with
 * descriptors, if the verb hands some back) and exits.  docs/protocol.md
 * ("emberd <-> helper") has the messages and each verb.
 */
#ifndef EMBER_WORKER_HELPER_H
#define EMBER_WORKER_HELPER_H

#include <stddef.h>

#include <jansson.h>

/*
 * A verb: args is the request's "args" object, in the descriptors passed
 * with it (fds_in, owned by the helper, closed after the verb).  Returns
 * the reply object, and may hand out up to HELPER_MAX_FDS descriptors in
 * fds_out (closed after they are sent); or NULL with *err for a request
 * the verb cannot make sense of.  What is wrong with the user's files is
 * not such an error: the verb says it in its reply.
 */
typedef json_t	*(*helper_verb_fn)(json_t *args, const int *fds_in,
		    size_t nin, int *fds_out, size_t *nout, char **err);

/* Serve one request on sock and return the exit code: 0, or 1 when the
 * request or the reply could not be exchanged. */
int		 helper_main(int sock);

/* The verb called name, or NULL (for tests). */
helper_verb_fn	 helper_find_verb(const char *name);

#endif
