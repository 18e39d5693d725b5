/*
 * The keeper: under -f, a session leader forks and stays behind, so that
 * emberd itself can never gain a controlling terminal.
 */
#ifndef EMBER_KEEPER_H
#define EMBER_KEEPER_H

/* When this process leads its session: fork; the keeper passes signals to
 * emberd and its notifications to systemd, and exits as emberd does.
 * Returns in emberd only (at once when there is nothing to keep). */
void	keeper_start(void);
/* Send an sd_notify message through the keeper: 0 when there is none. */
int	keeper_notify(const char *msg);

#endif
