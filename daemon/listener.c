#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "connection.h"
#include "emberd.h"
#include "listener.h"
#include "localdir.h"
#include "log.h"
#include "xmalloc.h"

static struct evconnlistener	*listener;
static struct event		*listener_retry;
static char			*listener_path;

/* Is something accepting on path?  Then it is not ours to remove. */
static int
listener_in_use(const struct sockaddr_un *sun)
{
	int	fd, rc;

	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		return (0);
	rc = connect(fd, (const struct sockaddr *)sun, sizeof *sun);
	close(fd);
	return (rc == 0);
}

/* Make the socket's directory if it is missing (one level, like /run/ember). */
static void
listener_make_dir(const char *path)
{
	char	*copy = xstrdup(path), *dir = dirname(copy);

	if (mkdir(dir, 0755) == 0)
		log_info("created %s", dir);
	free(copy);
}

/* New connection: hand it to the connection layer. */
static void
listener_accept_cb(struct evconnlistener *l, evutil_socket_t fd,
    struct sockaddr *sa, int socklen, void *arg)
{
	(void)l; (void)sa; (void)socklen; (void)arg;
	connection_create(fd);
}

static void
listener_retry_cb(evutil_socket_t fd, short events, void *arg)
{
	(void)fd; (void)events; (void)arg;
	if (listener != NULL)
		evconnlistener_enable(listener);
}

/* accept failed: out of descriptors pauses accepting for a second rather
 * than spinning on a listener that is always readable. */
static void
listener_error_cb(struct evconnlistener *l, void *arg)
{
	struct timeval	tv = { 1, 0 };
	int		err = EVUTIL_SOCKET_ERROR();

	(void)arg;
	if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
		log_warn("accept: %s; pausing accept for 1s", strerror(err));
		evconnlistener_disable(l);
		evtimer_add(listener_retry, &tv);
		return;
	}
	log_warn("accept: %s", strerror(err));
}

int
listener_start(void)
{
	struct sockaddr_un	 sun;
	const char		*path = ember_conf.daemon_socket;
	struct stat		 st;
	struct group		*gr;
	int			 fd;
	mode_t			 mask;

	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof sun.sun_path) {
		log_error("daemon.socket: path too long (%zu bytes, at most %zu)",
		    strlen(path), sizeof sun.sun_path - 1);
		return (-1);
	}
	strcpy(sun.sun_path, path);

	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			log_error("daemon.socket: %s exists and is not a socket",
			    path);
			return (-1);
		}
		if (listener_in_use(&sun)) {
			log_error("daemon.socket: %s: another emberd is "
			    "listening there", path);
			return (-1);
		}
		log_info("removing stale socket %s", path);
		unlink(path);
	} else
		listener_make_dir(path);
	/* Whoever may write the directory could replace the socket, or
	 * rename it between bind and chown. */
	if (localdir_check_above("daemon.socket", path) == -1)
		return (-1);

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1) {
		log_error("socket: %s", strerror(errno));
		return (-1);
	}
	/* Created with the configured mode itself: no chmod by path after. */
	mask = umask((mode_t)(~ember_conf.daemon_socket_mode & 0777));
	if (bind(fd, (struct sockaddr *)&sun, sizeof sun) == -1) {
		umask(mask);
		log_error("bind %s: %s", path, strerror(errno));
		close(fd);
		return (-1);
	}
	umask(mask);
	/* The group by path (a socket's fchown does not reach the file),
	 * which is safe only because no one else may write the directory. */
	if (*ember_conf.daemon_socket_group != '\0') {
		if ((gr = getgrnam(ember_conf.daemon_socket_group)) == NULL) {
			log_error("daemon.socket_group: no group \"%s\"",
			    ember_conf.daemon_socket_group);
			close(fd);
			unlink(path);
			return (-1);
		}
		if (fchownat(AT_FDCWD, path, (uid_t)-1, gr->gr_gid,
		    AT_SYMLINK_NOFOLLOW) == -1)
			log_warn("chown %s: %s", path, strerror(errno));
	}
	if (listen(fd, 128) == -1) {
		log_error("listen %s: %s", path, strerror(errno));
		close(fd);
		unlink(path);
		return (-1);
	}
	listener = evconnlistener_new(ember_base, listener_accept_cb, NULL,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, -1, fd);
	if (listener == NULL)
		fatalx("evconnlistener_new failed");
	evconnlistener_set_error_cb(listener, listener_error_cb);
	listener_retry = evtimer_new(ember_base, listener_retry_cb, NULL);
	listener_path = xstrdup(path);
	return (0);
}

void
listener_stop(void)
{
	if (listener == NULL)
		return;
	evconnlistener_free(listener);
	listener = NULL;
	event_free(listener_retry);
	listener_retry = NULL;
	unlink(listener_path);
	free(listener_path);
	listener_path = NULL;
}
