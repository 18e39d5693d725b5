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

void
listener_resume_cb(evutil_socket_t fd, short events, void *arg)
{
	struct evconnlistener	**l = arg;

	(void)fd; (void)events;
	if (*l != NULL)
		evconnlistener_enable(*l);
}

void
listener_accept_failed(struct evconnlistener *l, struct event *resume,
    const char *who)
{
	struct timeval	tv = { 1, 0 };
	int		err = EVUTIL_SOCKET_ERROR();

	if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
		log_warn("%saccept: %s; pausing accept for 1s", who,
		    strerror(err));
		evconnlistener_disable(l);
		evtimer_add(resume, &tv);
		return;
	}
	log_warn("%saccept: %s", who, strerror(err));
}

/* accept failed on the client socket. */
static void
listener_error_cb(struct evconnlistener *l, void *arg)
{
	(void)arg;
	listener_accept_failed(l, listener_retry, "");
}

int
listener_clear_path(const char *key, const struct sockaddr_un *sun)
{
	const char	*path = sun->sun_path;
	struct stat	 st;

	if (lstat(path, &st) == -1)
		return (0);
	if (!S_ISSOCK(st.st_mode)) {
		log_error("%s: %s exists and is not a socket", key, path);
		return (-1);
	}
	if (listener_in_use(sun)) {
		log_error("%s: %s: another emberd is listening there", key,
		    path);
		return (-1);
	}
	log_info("removing stale socket %s", path);
	unlink(path);
	return (1);
}

int
listener_start(void)
{
	struct sockaddr_un	 sun;
	const char		*path = ember_conf.daemon_socket;
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

	switch (listener_clear_path("daemon.socket", &sun)) {
	case -1:
		return (-1);
	case 0:
		listener_make_dir(path);
		break;
	}
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
	listener_retry = evtimer_new(ember_base, listener_resume_cb, &listener);
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
