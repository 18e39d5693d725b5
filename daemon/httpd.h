/*
 * The status listener (status.listen): an HTTP server on emberd's own
 * loop, with libevent's evhttp, serving the status page (/), the status
 * as JSON (/status.json) and the Prometheus metrics (/metrics).  It
 * never blocks the loop and holds bounded memory: at most
 * status.max_connections connections (past that, the oldest is closed),
 * each closed if it takes longer than status.timeout to send a whole
 * request or to read its reply, with headers of at most 8 KiB and no
 * request body.
 */
#ifndef EMBER_HTTPD_H
#define EMBER_HTTPD_H

/* Start listening if status.listen says so: 0, or -1 (logged). */
int	httpd_start(void);
void	httpd_stop(void);
/* SIGHUP: reopen the listener if status.listen changed. */
void	httpd_reload(void);

#endif
