/*
 * emberd's heap, kept flat: what a mass of connections, sessions and
 * operations took goes back to the kernel once they are gone.
 */
#ifndef EMBER_HEAP_H
#define EMBER_HEAP_H

/* Make libevent's entry for every descriptor number a connection may use
 * (daemon.max_connections), so that none is made among a connection's
 * allocations.  Call once the loop exists, before the listener accepts. */
void	heap_start(void);
void	heap_stop(void);
/* Something sizeable was freed (a connection, an operation): look at the
 * heap on the next ticks, and give its free pages back if they add up. */
void	heap_check_soon(void);

#endif
