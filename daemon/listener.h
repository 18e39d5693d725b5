/* The listening Unix socket: created with the configured mode and group,
 * stale files replaced, accept paused for a second on EMFILE. */
#ifndef EMBER_LISTENER_H
#define EMBER_LISTENER_H

#include <sys/socket.h>
#include <sys/un.h>

#include <event2/event.h>
#include <event2/listener.h>

int	listener_start(void);
void	listener_stop(void);

/*
 * What emberd's two listeners (this one and the status listener, httpd.c)
 * share.  Clear the path of a Unix socket about to be bound: a stale
 * socket file is removed (1), nothing there is 0, and another file or a
 * socket something accepts on is -1, logged under conf key key.
 */
int	listener_clear_path(const char *key, const struct sockaddr_un *);
/* accept failed on l: out of descriptors pauses it for a second (resume,
 * a timer of listener_resume_cb, enables it again) rather than spinning
 * on a listener that is always readable.  who prefixes the log line. */
void	listener_accept_failed(struct evconnlistener *l,
	    struct event *resume, const char *who);
/* A resume timer's callback: arg is the address of the listener. */
void	listener_resume_cb(evutil_socket_t, short, void *arg);

#endif
