#include <sys/types.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "emberd.h"
#include "joblog.h"
#include "log.h"
#include "xmalloc.h"

/* Reads per turn of the loop, so that one user's output cannot starve
 * the clients; the pipe is drained again on the next turn. */
#define JOBLOG_READS	16

struct joblog {
	uid_t		 uid;
	int		 fd;
	struct event	*event;
	char		 line[JOBLOG_LINE_MAX];
	size_t		 len;
	int		 cut;		/* skipping the rest of a long line */
	uint64_t	 tokens;	/* thousandths of a line */
	uint64_t	 refilled;	/* ms */
	unsigned long long dropped;	/* lines over the rate, not told yet */
};

/* Say how many lines were dropped since the last said. */
static void
joblog_tell_dropped(struct joblog *jl)
{
	if (jl->dropped == 0)
		return;
	log_warn("uid %ld: %llu lines of its processes' output dropped (over "
	    "%d a second)", (long)jl->uid, jl->dropped, JOBLOG_RATE);
	jl->dropped = 0;
}

/* Take a line's token from the bucket: 0, or -1 if over the rate. */
static int
joblog_take(struct joblog *jl)
{
	uint64_t	now = ember_now_ms();

	jl->tokens += (now - jl->refilled) * JOBLOG_RATE;
	if (jl->tokens > (uint64_t)JOBLOG_BURST * 1000)
		jl->tokens = (uint64_t)JOBLOG_BURST * 1000;
	jl->refilled = now;
	if (jl->tokens < 1000)
		return (-1);
	jl->tokens -= 1000;
	return (0);
}

/* Log one line of the user's (a NUL written as \000; the log escapes the
 * rest), unless it is over the rate. */
static void
joblog_emit(struct joblog *jl, const char *line, size_t len, int cut)
{
	char	out[JOBLOG_LINE_MAX * 4 + 1], *o = out;
	size_t	i;

	if (joblog_take(jl) == -1) {
		jl->dropped++;
		return;
	}
	joblog_tell_dropped(jl);
	for (i = 0; i < len; i++) {
		if (line[i] == '\0') {
			memcpy(o, "\\000", 4);
			o += 4;
		} else
			*o++ = line[i];
	}
	*o = '\0';
	log_info("uid %ld: %s%s", (long)jl->uid, out, cut ? " [cut]" : "");
}

/* Split what was read into lines: each logged at its newline, or cut at
 * JOBLOG_LINE_MAX bytes and the rest of it skipped. */
static void
joblog_feed(struct joblog *jl, const char *p, size_t n)
{
	const char	*nl;
	size_t		 take, room;

	while (n > 0) {
		nl = memchr(p, '\n', n);
		take = nl != NULL ? (size_t)(nl - p) : n;
		room = sizeof jl->line - jl->len;
		if (!jl->cut) {
			memcpy(jl->line + jl->len, p, take < room ? take : room);
			jl->len += take < room ? take : room;
			if (nl != NULL && take <= room)
				joblog_emit(jl, jl->line, jl->len, 0);
			else if (jl->len == sizeof jl->line) {
				joblog_emit(jl, jl->line, jl->len, 1);
				jl->cut = 1;
			}
		}
		if (nl != NULL) {
			jl->len = 0;
			jl->cut = 0;
			take++;
		}
		p += take;
		n -= take;
	}
}

int
joblog_read(struct joblog *jl)
{
	char	buf[4096];
	ssize_t	n;
	int	i;

	for (i = 0; i < JOBLOG_READS; i++) {
		n = read(jl->fd, buf, sizeof buf);
		if (n > 0) {
			joblog_feed(jl, buf, (size_t)n);
			continue;
		}
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return (0);
		if (n == -1)
			log_error("uid %ld: job log pipe: %s", (long)jl->uid,
			    strerror(errno));
		return (-1);
	}
	return (0);
}

static void
joblog_read_cb(evutil_socket_t fd, short events, void *arg)
{
	struct joblog	*jl = arg;

	(void)fd; (void)events;
	if (joblog_read(jl) == -1)
		event_del(jl->event);
}

struct joblog *
joblog_open(uid_t uid, int *wfd)
{
	struct joblog	*jl;
	int		 p[2];

	if (pipe2(p, O_CLOEXEC) == -1) {
		log_error("uid %ld: job log pipe: %s", (long)uid,
		    strerror(errno));
		return (NULL);
	}
	jl = xcalloc(1, sizeof *jl);
	jl->uid = uid;
	jl->fd = p[0];
	jl->tokens = (uint64_t)JOBLOG_BURST * 1000;
	jl->refilled = ember_now_ms();
	evutil_make_socket_nonblocking(jl->fd);
	jl->event = event_new(ember_base, jl->fd, EV_READ | EV_PERSIST,
	    joblog_read_cb, jl);
	event_add(jl->event, NULL);
	*wfd = p[1];
	return (jl);
}

void
joblog_close(struct joblog *jl)
{
	if (jl == NULL)
		return;
	(void)joblog_read(jl);
	if (jl->len > 0 && !jl->cut)
		joblog_emit(jl, jl->line, jl->len, 0);
	joblog_tell_dropped(jl);
	event_free(jl->event);
	close(jl->fd);
	free(jl);
}
