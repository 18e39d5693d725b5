/*
 * Ctrl-C in the CLI: the user's interrupt is the operation's.  A thread
 * takes SIGINT, interrupts the operation on a connection of its own (so
 * emberd stops its tasks and frees its workers at once), then lets the
 * signal end the program as it would have.
 */
#ifndef EMBER_CANCEL_H
#define EMBER_CANCEL_H

/* Take SIGINT from now on; call before any other thread starts. */
void		 cancel_arm(const char *socket_path);
/* The operation a SIGINT interrupts, of session (both copied). */
void		 cancel_set(const char *session, const char *operation);
/* If a SIGINT is being handled, wait for it to end the program: the
 * operation's end (INTERRUPTED) is no error of its own. */
void		 cancel_wait(void);

#endif
