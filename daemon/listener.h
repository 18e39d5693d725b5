/* The listening Unix socket: created with the configured mode and group,
 * stale files replaced, accept paused for a second on EMFILE. */
#ifndef EMBER_LISTENER_H
#define EMBER_LISTENER_H

int	listener_start(void);
void	listener_stop(void);

#endif
