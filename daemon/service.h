/*
 * emberd as a system service: the pidfile, detaching from the terminal
 * only once the start has worked, and telling systemd (sd_notify) when
 * emberd is ready, reloading or stopping, and how it is doing.
 */
#ifndef EMBER_SERVICE_H
#define EMBER_SERVICE_H

/* Open and lock daemon.pidfile (if any): -1, logged, if another emberd
 * holds it or it cannot be made. */
int	service_open_pidfile(int foreground);
/* Make the conf's relative paths absolute, for a daemon that runs in /. */
void	service_absolute_paths(void);
/*
 * Detach: fork twice (never a session leader), chdir /, stdio to
 * /dev/null.  The first process waits until the daemon says it is ready
 * or fails, prints the daemon's errors on its standard error and exits 0
 * or 1.  Returns in the daemon only.
 */
void	service_detach(void);
/* The socket is bound and the local directory made: ready once the first
 * pool is warm (or straight away when there is none to wait for). */
void	service_started(int need_pool);
/* A pool's fork-server said hello or a worker started: ready yet? */
void	service_check_ready(void);
/* The start failed (before ready): say why to whoever waits and stop
 * the loop; service_failed() then tells main to exit 1. */
void	service_start_failed(const char *why);
int	service_failed(void);
/* SIGHUP: reloading, then ready again. */
void	service_reloading(void);
void	service_reloaded(void);
/* SIGTERM: draining. */
void	service_stopping(void);
/* Remove the pidfile; before exit. */
void	service_exit(void);

#endif
