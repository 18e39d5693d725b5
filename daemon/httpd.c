#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <netinet/in.h>

#include <arpa/inet.h>
#include <ctype.h>
#include <stdarg.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>

#include "emberd.h"
#include "httpd.h"
#include "listener.h"
#include "localdir.h"
#include "log.h"
#include "metrics.h"
#include "queue.h"
#include "status_page.h"
#include "status_web.h"
#include "xmalloc.h"

#define HTTPD_MAX_HEADERS	8192
#define HTTPD_MAX_BODY		1024	/* a body is refused: 405 */
#define HTTPD_READ_HIGH		(HTTPD_MAX_HEADERS + HTTPD_MAX_BODY + 4096)

/* One connection to the status listener. */
struct httpd_conn {
	struct bufferevent		*bev;	/* made for evhttp */
	struct evhttp_connection	*evcon;	/* NULL until attached */
	struct event			*deadline;
	char				 peer[INET6_ADDRSTRLEN + 8];
	TAILQ_ENTRY(httpd_conn)		 entry;
};
static TAILQ_HEAD(, httpd_conn)	httpd_conns = TAILQ_HEAD_INITIALIZER(httpd_conns);
static size_t			httpd_nconns;

static struct evhttp		*httpd;
static struct evconnlistener	*httpd_listener;
static struct event		*httpd_attach_ev;
static struct event		*httpd_retry_ev;
static char			*httpd_where;	/* status.listen it opened */
static char			*httpd_path;	/* a Unix socket's, to unlink */
static int			 httpd_tcp;

/* Arm (again) the time c has to send a whole request and read its reply. */
static void
httpd_arm(struct httpd_conn *c)
{
	struct timeval	tv;

	tv.tv_sec = ember_conf.status_timeout / 1000;
	tv.tv_usec = (ember_conf.status_timeout % 1000) * 1000;
	evtimer_add(c->deadline, &tv);
}

/* Forget a connection evhttp is freeing or has freed. */
static void
httpd_forget(struct httpd_conn *c)
{
	TAILQ_REMOVE(&httpd_conns, c, entry);
	event_free(c->deadline);
	free(c);
	httpd_nconns--;
}

/* evhttp closes a connection. */
static void
httpd_closed_cb(struct evhttp_connection *evcon, void *arg)
{
	(void)evcon;
	httpd_forget(arg);
}

/* Close a connection now, and forget it. */
static void
httpd_close(struct httpd_conn *c)
{
	evhttp_connection_set_closecb(c->evcon, NULL, NULL);
	evhttp_connection_free(c->evcon);
	httpd_forget(c);
}

/* A connection took too long: a stalled request or a reader that does
 * not read. */
static void
httpd_deadline_cb(evutil_socket_t fd, short events, void *arg)
{
	(void)fd; (void)events;
	log_debug("status: connection timed out after %lldms",
	    (long long)ember_conf.status_timeout);
	httpd_close(arg);
}

static int	httpd_loopback(const struct sockaddr *);

/*
 * Name who is at the other end of c: the uid on a Unix socket; on TCP the
 * address, every loopback address as one, since any local user may send
 * from any of 127.0.0.0/8.
 */
static void
httpd_name_peer(struct httpd_conn *c)
{
	struct sockaddr_storage	 ss;
	struct ucred		 cred;
	socklen_t		 len = sizeof cred, sslen = sizeof ss;
	int			 fd = bufferevent_getfd(c->bev);
	const void		*addr;

	if (!httpd_tcp) {
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
			snprintf(c->peer, sizeof c->peer, "uid %lu",
			    (unsigned long)cred.uid);
		return;
	}
	if (getpeername(fd, (struct sockaddr *)&ss, &sslen) == -1)
		return;
	if (httpd_loopback((struct sockaddr *)&ss)) {
		snprintf(c->peer, sizeof c->peer, "loopback");
		return;
	}
	addr = ss.ss_family == AF_INET ?
	    (const void *)&((struct sockaddr_in *)&ss)->sin_addr :
	    (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr;
	inet_ntop(ss.ss_family, addr, c->peer, sizeof c->peer);
}

/* How many watched connections c's peer has, c included. */
static size_t
httpd_peer_count(const struct httpd_conn *c)
{
	struct httpd_conn	*o;
	size_t			 n = 0;

	TAILQ_FOREACH(o, &httpd_conns, entry) {
		if (o->evcon != NULL && strcmp(o->peer, c->peer) == 0)
			n++;
	}
	return (n);
}

/* The oldest connection of c's peer. */
static struct httpd_conn *
httpd_peer_oldest(const struct httpd_conn *c)
{
	struct httpd_conn	*o;

	TAILQ_FOREACH(o, &httpd_conns, entry) {
		if (o->evcon != NULL && strcmp(o->peer, c->peer) == 0)
			return (o);
	}
	return (NULL);
}

/* The oldest connection of the peer that holds the most. */
static struct httpd_conn *
httpd_busiest(void)
{
	struct httpd_conn	*c, *best = NULL;
	size_t			 n, most = 0;

	TAILQ_FOREACH(c, &httpd_conns, entry) {
		if ((n = httpd_peer_count(c)) > most) {
			most = n;
			best = c;
		}
	}
	return (best);
}

/*
 * Find the evhttp connections of the bufferevents made since the last
 * turn of the loop (evhttp set itself as their callbacks' argument), and
 * watch them.  Runs before any of them can be read or freed: evhttp made
 * them in the accept callback that made this event active.  Past
 * status.max_connections_per_peer, the peer's oldest connection is
 * closed; past status.max_connections, the oldest of the peer holding the
 * most: a client that floods or holds connections without sending
 * requests cannot lock other peers out, nor its own newest request.
 */
static void
httpd_attach_cb(evutil_socket_t fd, short events, void *arg)
{
	struct httpd_conn	*c, *next;
	void			*evcon;

	(void)fd; (void)events; (void)arg;
	TAILQ_FOREACH_SAFE(c, &httpd_conns, entry, next) {
		if (c->evcon != NULL)
			continue;
		bufferevent_getcb(c->bev, NULL, NULL, NULL, &evcon);
		if (evcon == NULL) {
			httpd_forget(c);	/* evhttp could not take it */
			continue;
		}
		c->evcon = evcon;
		evhttp_connection_set_closecb(c->evcon, httpd_closed_cb, c);
		httpd_name_peer(c);
		httpd_arm(c);
		if (httpd_peer_count(c) >
		    (size_t)ember_conf.status_max_connections_per_peer) {
			log_debug("status: %s is past "
			    "status.max_connections_per_peer (%lld): closing "
			    "its oldest connection", c->peer,
			    (long long)ember_conf.status_max_connections_per_peer);
			httpd_close(httpd_peer_oldest(c));
		}
	}
	while (httpd_nconns > (size_t)ember_conf.status_max_connections) {
		if ((c = httpd_busiest()) == NULL)
			break;
		log_debug("status: past status.max_connections (%lld): "
		    "closing the oldest connection of %s",
		    (long long)ember_conf.status_max_connections, c->peer);
		httpd_close(c);
	}
}

/* evhttp accepted a connection: make its bufferevent, and count it. */
static struct bufferevent *
httpd_bev_cb(struct event_base *base, void *arg)
{
	struct httpd_conn	*c;

	(void)arg;
	c = xcalloc(1, sizeof *c);
	c->bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
	if (c->bev == NULL)
		fatalx("bufferevent_socket_new failed");
	/* evhttp reads all a client sends, pipelined requests too, unless
	 * told: a request at a time is all it needs. */
	bufferevent_setwatermark(c->bev, EV_READ, 0, HTTPD_READ_HIGH);
	c->deadline = evtimer_new(base, httpd_deadline_cb, c);
	TAILQ_INSERT_TAIL(&httpd_conns, c, entry);
	httpd_nconns++;
	event_active(httpd_attach_ev, 0, 1);
	return (c->bev);
}

/* The connection a request came on, as ours. */
static struct httpd_conn *
httpd_conn_of(struct evhttp_request *req)
{
	struct evhttp_connection	*evcon;
	struct httpd_conn		*c;

	evcon = evhttp_request_get_connection(req);
	TAILQ_FOREACH(c, &httpd_conns, entry) {
		if (c->evcon == evcon)
			return (c);
	}
	return (NULL);
}

/* Send a short plain-text error. */
static void __attribute__((format(printf, 4, 5)))
httpd_error(struct evhttp_request *req, int code, const char *reason,
    const char *fmt, ...)
{
	struct evbuffer	*b = evbuffer_new();
	va_list		 ap;

	va_start(ap, fmt);
	evbuffer_add_vprintf(b, fmt, ap);
	va_end(ap);
	evbuffer_add(b, "\n", 1);
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", "text/plain; charset=utf-8");
	evhttp_send_reply(req, code, reason, b);
	evbuffer_free(b);
}

/*
 * Is the Host header one of this machine's names?  A web page elsewhere
 * could otherwise make a browser on this machine read the status through
 * a name it resolves to 127.0.0.1 (DNS rebinding).  Only IP literals and
 * localhost pass; a Unix socket takes any.
 */
static int
httpd_host_ok(struct evhttp_request *req)
{
	const char	*host;
	char		 name[64];
	size_t		 n;
	struct in6_addr	 a6;
	struct in_addr	 a4;

	if (!httpd_tcp)
		return (1);
	host = evhttp_find_header(evhttp_request_get_input_headers(req),
	    "Host");
	if (host == NULL)
		return (1);	/* HTTP/1.0 */
	if (*host == '[') {
		n = strcspn(host + 1, "]");
		if (host[1 + n] != ']' || n >= sizeof name)
			return (0);
		memcpy(name, host + 1, n);
		name[n] = '\0';
		return (inet_pton(AF_INET6, name, &a6) == 1);
	}
	n = strcspn(host, ":");
	if (n >= sizeof name)
		return (0);
	memcpy(name, host, n);
	name[n] = '\0';
	return (strcasecmp(name, "localhost") == 0 ||
	    inet_pton(AF_INET, name, &a4) == 1);
}

/* Send a page with its type; no page may be cached or framed. */
static void
httpd_send(struct evhttp_request *req, const char *type, struct evbuffer *b)
{
	struct evkeyvalq	*h = evhttp_request_get_output_headers(req);

	evhttp_add_header(h, "Content-Type", type);
	evhttp_add_header(h, "Cache-Control", "no-store");
	evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
	evhttp_add_header(h, "Content-Security-Policy", "default-src 'none'; "
	    "script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
	    "connect-src 'self'; img-src data:; frame-ancestors 'none'");
	evhttp_send_reply(req, 200, "OK", b);
}

/* Route a request. */
static void
httpd_request_cb(struct evhttp_request *req, void *arg)
{
	const struct evhttp_uri	*uri = evhttp_request_get_evhttp_uri(req);
	enum evhttp_cmd_type	 cmd = evhttp_request_get_command(req);
	struct httpd_conn	*c;
	struct evbuffer		*b;
	const char		*path = NULL;
	json_t			*status;
	char			*text;

	(void)arg;
	if ((c = httpd_conn_of(req)) != NULL)
		httpd_arm(c);	/* the reply has the time a request had */
	if (uri != NULL)
		path = evhttp_uri_get_path(uri);
	if (path == NULL || *path == '\0')
		path = "/";
	if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
		evhttp_add_header(evhttp_request_get_output_headers(req),
		    "Allow", "GET, HEAD");
		httpd_error(req, 405, "Method Not Allowed", "405 method not "
		    "allowed: the status listener serves GET and HEAD only");
		return;
	}
	if (!httpd_host_ok(req)) {
		httpd_error(req, 421, "Misdirected Request", "421 misdirected "
		    "request: Host must be localhost or an IP address");
		return;
	}
	b = evbuffer_new();
	if (strcmp(path, "/") == 0) {
		evbuffer_add_reference(b, status_page, status_page_len, NULL,
		    NULL);
		httpd_send(req, "text/html; charset=utf-8", b);
	} else if (strcmp(path, "/metrics") == 0) {
		metrics_write(b);
		httpd_send(req, "text/plain; version=0.0.4; charset=utf-8", b);
	} else if (strcmp(path, "/status.json") == 0) {
		status = status_web_build();
		text = json_dumps(status, JSON_COMPACT);
		json_decref(status);
		evbuffer_add(b, text, strlen(text));
		free(text);
		httpd_send(req, "application/json", b);
	} else
		httpd_error(req, 404, "Not Found", "404 not found: the status "
		    "listener serves /, /status.json and /metrics");
	evbuffer_free(b);
}

/* accept failed on the status listener. */
static void
httpd_accept_error_cb(struct evconnlistener *l, void *arg)
{
	(void)arg;
	listener_accept_failed(l, httpd_retry_ev, "status: ");
}

/* Make the Unix socket at path: a stale socket file is replaced; any other
 * file, or a socket something accepts on, is an error. */
static int
httpd_bind_unix(const char *path, struct sockaddr_un *sun)
{
	if (strlen(path) >= sizeof sun->sun_path) {
		log_error("status.listen: %s: path too long", path);
		return (-1);
	}
	memset(sun, 0, sizeof *sun);
	sun->sun_family = AF_UNIX;
	strcpy(sun->sun_path, path);
	if (localdir_check_above("status.listen", path) == -1)
		return (-1);
	if (listener_clear_path("status.listen", sun) == -1)
		return (-1);
	return (0);
}

/* Read "127.0.0.1:PORT" or "[::1]:PORT" (PORT 0: the kernel picks one):
 * 0, or -1. */
static int
httpd_parse_address(const char *where, struct sockaddr_storage *ss,
    int *len)
{
	struct sockaddr_in	*in4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6	*in6 = (struct sockaddr_in6 *)ss;
	const char		*colon;
	char			 host[INET6_ADDRSTRLEN], *end;
	size_t			 n;
	unsigned long		 port;

	memset(ss, 0, sizeof *ss);
	if (*where == '[') {
		n = strcspn(where + 1, "]");
		colon = where + 1 + n + 1;
		if (where[1 + n] != ']' || *colon != ':')
			return (-1);
		where++;
	} else {
		if ((colon = strrchr(where, ':')) == NULL)
			return (-1);
		n = (size_t)(colon - where);
	}
	if (n == 0 || n >= sizeof host || !isdigit((unsigned char)colon[1]))
		return (-1);
	memcpy(host, where, n);
	host[n] = '\0';
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (*end != '\0' || errno != 0 || port > 65535)
		return (-1);
	if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
		in4->sin_family = AF_INET;
		in4->sin_port = htons((uint16_t)port);
		*len = sizeof *in4;
	} else if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		*len = sizeof *in6;
	} else
		return (-1);
	return (0);
}

/* Is sa a loopback address? */
static int
httpd_loopback(const struct sockaddr *sa)
{
	const struct sockaddr_in	*in4 = (const struct sockaddr_in *)sa;
	const struct sockaddr_in6	*in6 = (const struct sockaddr_in6 *)sa;

	if (sa->sa_family == AF_INET)
		return ((ntohl(in4->sin_addr.s_addr) >> 24) == 127);
	return (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr));
}

/* Say where the listener is, with the port the kernel chose for :0. */
static void
httpd_log_address(void)
{
	struct sockaddr_storage	 ss;
	socklen_t		 len = sizeof ss;
	char			 host[INET6_ADDRSTRLEN];
	int			 port;
	void			*addr;

	if (!httpd_tcp) {
		log_info("status: listening on %s", httpd_path);
		return;
	}
	if (getsockname(evconnlistener_get_fd(httpd_listener),
	    (struct sockaddr *)&ss, &len) == -1)
		return;
	if (ss.ss_family == AF_INET) {
		addr = &((struct sockaddr_in *)&ss)->sin_addr;
		port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	} else {
		addr = &((struct sockaddr_in6 *)&ss)->sin6_addr;
		port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	}
	inet_ntop(ss.ss_family, addr, host, sizeof host);
	log_info(ss.ss_family == AF_INET6 ? "status: listening on [%s]:%d" :
	    "status: listening on %s:%d", host, port);
}

/* Open the listening socket status.listen names. */
static int
httpd_listen(const char *where)
{
	struct sockaddr_storage	 ss;
	struct sockaddr_un	 sun;
	struct sockaddr		*sa = (struct sockaddr *)&ss;
	int			 len = sizeof ss;
	unsigned int		 flags = LEV_OPT_CLOSE_ON_FREE |
				    LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE;
	mode_t			 mask;

	if (*where == '/') {
		if (httpd_bind_unix(where, &sun) == -1)
			return (-1);
		sa = (struct sockaddr *)&sun;
		len = sizeof sun;
		httpd_path = xstrdup(where);
	} else if (httpd_parse_address(where, &ss, &len) == -1) {
		log_error("status.listen: \"%s\": expected 127.0.0.1:PORT, "
		    "[::1]:PORT or the absolute path of a Unix socket", where);
		return (-1);
	} else {
		httpd_tcp = 1;
		if (!httpd_loopback(sa))
			log_warn("status.listen: %s is not a loopback "
			    "address: the status and metrics are visible "
			    "from other machines", where);
	}
	/* A Unix socket is made 0666 by bind itself: no chmod by path. */
	mask = umask(0111);
	httpd_listener = evconnlistener_new_bind(ember_base, NULL, NULL, flags,
	    64, sa, len);
	umask(mask);
	if (httpd_listener == NULL) {
		log_error("status.listen: %s: %s", where, strerror(errno));
		free(httpd_path);
		httpd_path = NULL;
		return (-1);
	}
	evconnlistener_set_error_cb(httpd_listener, httpd_accept_error_cb);
	return (0);
}

int
httpd_start(void)
{
	if (*ember_conf.status_listen == '\0')
		return (0);
	if (status_web_check_users() == -1)
		return (-1);
	if (httpd_listen(ember_conf.status_listen) == -1)
		return (-1);
	if ((httpd = evhttp_new(ember_base)) == NULL)
		fatalx("evhttp_new failed");
	evhttp_set_max_headers_size(httpd, HTTPD_MAX_HEADERS);
	evhttp_set_max_body_size(httpd, HTTPD_MAX_BODY);
	evhttp_set_timeout(httpd, (int)((ember_conf.status_timeout + 999) /
	    1000));
	/* Every method reaches httpd_request_cb, which explains its 405. */
	evhttp_set_allowed_methods(httpd, EVHTTP_REQ_GET | EVHTTP_REQ_POST |
	    EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
	    EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT |
	    EVHTTP_REQ_PATCH);
	evhttp_set_bevcb(httpd, httpd_bev_cb, NULL);
	evhttp_set_gencb(httpd, httpd_request_cb, NULL);
	httpd_attach_ev = event_new(ember_base, -1, 0, httpd_attach_cb, NULL);
	httpd_retry_ev = evtimer_new(ember_base, listener_resume_cb,
	    &httpd_listener);
	if (evhttp_bind_listener(httpd, httpd_listener) == NULL)
		fatalx("evhttp_bind_listener failed");
	httpd_log_address();
	httpd_where = xstrdup(ember_conf.status_listen);
	return (0);
}

void
httpd_reload(void)
{
	const char	*now = ember_conf.status_listen;

	if (strcmp(httpd_where != NULL ? httpd_where : "", now) == 0)
		return;
	log_info("SIGHUP: status.listen is now \"%s\"", now);
	httpd_stop();
	if (httpd_start() == -1)
		log_error("SIGHUP: no status listener");
}

void
httpd_stop(void)
{
	struct httpd_conn	*c;

	if (httpd == NULL)
		return;
	httpd_listener = NULL;
	evhttp_free(httpd);	/* the listener, and the connections: each
				   calls httpd_closed_cb */
	httpd = NULL;
	while ((c = TAILQ_FIRST(&httpd_conns)) != NULL)
		httpd_forget(c);	/* never attached */
	event_free(httpd_attach_ev);
	event_free(httpd_retry_ev);
	free(httpd_where);
	httpd_where = NULL;
	httpd_tcp = 0;
	if (httpd_path != NULL) {
		unlink(httpd_path);
		free(httpd_path);
		httpd_path = NULL;
	}
}
