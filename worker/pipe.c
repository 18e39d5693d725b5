#include <sys/types.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "ops.h"
#include "output.h"
#include "pipe.h"
#include "protocol.h"
#include "xmalloc.h"

/* Input is written to the command in chunks of about this size. */
#define PIPE_CHUNK	(64 * 1024)
/* How much of the command's stderr is kept for the error message. */
#define PIPE_TAIL	4096

struct pipe_op {
	struct op	 op;
	const char	*command;	/* the plan's, which outlives the op */

	pid_t		 pid;		/* -1 until started, and once reaped */
	int		 started;
	int		 in;		/* our ends, -1 once closed */
	int		 out;
	int		 err;

	char		*ibuf;		/* input waiting for the command */
	size_t		 ioff, ilen, isize;
	int		 input_closed;	/* the command stopped reading */

	char		*obuf;		/* the command's output, split in lines */
	size_t		 ostart, oscan, olen, osize;
	int		 stopped;	/* the ops after us want no more */

	char		 tail[2 * PIPE_TAIL];
	size_t		 taillen;
	int		 tailcut;	/* earlier stderr was dropped */
};

/* Make a descriptor non-blocking. */
static void
pipe_set_nonblock(int fd)
{
	int	flags;

	if ((flags = fcntl(fd, F_GETFL)) == -1 ||
	    fcntl(fd, F_SETFL, flags | O_NONBLOCK) == -1)
		fatal("fcntl");
}

/* Close one of our ends. */
static void
pipe_close(int *fd)
{
	if (*fd != -1) {
		close(*fd);
		*fd = -1;
	}
}

/* Put fd at target in the child, without close-on-exec. */
static void
pipe_child_dup(int fd, int target)
{
	int	flags;

	if (fd == target) {
		if ((flags = fcntl(fd, F_GETFD)) == -1 ||
		    fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC) == -1)
			_exit(127);
	} else if (dup2(fd, target) == -1)
		_exit(127);
}

/* Close every descriptor above stderr. */
static void
pipe_child_closefrom(void)
{
	long	max, fd;

#ifdef SYS_close_range
	if (syscall(SYS_close_range, 3U, ~0U, 0U) == 0)
		return;
#endif
	max = sysconf(_SC_OPEN_MAX);
	if (max < 0 || max > 65536)
		max = 65536;
	for (fd = 3; fd < max; fd++)
		close((int)fd);
}

/* Run the command in the child; never returns. */
static void
pipe_child_exec(struct pipe_op *p, int fds[3][2])
{
	sigset_t	set;
	int		i;

	/* The worker ignores SIGPIPE, and ignored signals survive exec. */
	for (i = 1; i < NSIG; i++)
		signal(i, SIG_DFL);
	sigemptyset(&set);
	sigprocmask(SIG_SETMASK, &set, NULL);

	/* The pipes' child ends may sit on 0, 1 or 2 if those were closed. */
	pipe_child_dup(fds[0][0], 0);
	pipe_child_dup(fds[1][1], 1);
	pipe_child_dup(fds[2][1], 2);
	pipe_child_closefrom();

	execl("/bin/sh", "sh", "-c", p->command, (char *)NULL);
	dprintf(2, "ember-worker: /bin/sh: %s\n", strerror(errno));
	_exit(127);
}

/* Start the command. */
static int
pipe_start(struct pipe_op *p)
{
	int	fds[3][2], i;
	pid_t	pid;

	p->started = 1;
	for (i = 0; i < 3; i++) {
		if (pipe2(fds[i], O_CLOEXEC) == -1) {
			while (--i >= 0) {
				close(fds[i][0]);
				close(fds[i][1]);
			}
			return (op_fail(&p->op, "pipe command `%s`: pipe: %s",
			    p->command, strerror(errno)));
		}
	}
	if ((pid = fork()) == -1) {
		for (i = 0; i < 3; i++) {
			close(fds[i][0]);
			close(fds[i][1]);
		}
		return (op_fail(&p->op, "pipe command `%s`: fork: %s",
		    p->command, strerror(errno)));
	}
	if (pid == 0)
		pipe_child_exec(p, fds);

	p->pid = pid;
	close(fds[0][0]);
	close(fds[1][1]);
	close(fds[2][1]);
	p->in = fds[0][1];
	p->out = fds[1][0];
	p->err = fds[2][0];
	pipe_set_nonblock(p->in);
	pipe_set_nonblock(p->out);
	pipe_set_nonblock(p->err);
	log_debug("pipe command `%s` started as %ld", p->command, (long)pid);
	return (OP_OK);
}

/* Stop feeding the command: it exited or closed its input. */
static void
pipe_input_close(struct pipe_op *p)
{
	pipe_close(&p->in);
	p->input_closed = 1;
	p->ioff = p->ilen = 0;
}

/* Write what input we can without blocking. */
static void
pipe_input_write(struct pipe_op *p)
{
	ssize_t	n;

	while (p->in != -1 && p->ioff < p->ilen) {
		n = write(p->in, p->ibuf + p->ioff, p->ilen - p->ioff);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				return;
			/* EPIPE and the like: the command is not reading. */
			pipe_input_close(p);
			return;
		}
		p->ioff += (size_t)n;
	}
	if (p->ioff == p->ilen)
		p->ioff = p->ilen = 0;
}

/* The ops after us want no more: stop the command's input and output. */
static void
pipe_stop(struct pipe_op *p)
{
	p->stopped = 1;
	pipe_close(&p->out);
	pipe_input_close(p);
}

/* Push the complete lines of the command's output on. */
static int
pipe_output_lines(struct pipe_op *p, int eof)
{
	struct record	 r = { NULL, 0, 0, 0, NULL, 0 };
	char		*nl;
	int		 rc;

	while (!p->stopped) {
		nl = memchr(p->obuf + p->oscan, '\n', p->olen - p->oscan);
		if (nl == NULL) {
			p->oscan = p->olen;
			if (!eof || p->ostart == p->olen)
				break;
			nl = p->obuf + p->olen;	/* a last line without '\n' */
		}
		r.data = p->obuf + p->ostart;
		r.len = (size_t)(nl - r.data);
		p->ostart = p->oscan = (size_t)(nl - p->obuf) +
		    (nl < p->obuf + p->olen ? 1 : 0);
		if ((rc = op_next(&p->op, &r)) == OP_FAIL)
			return (OP_FAIL);
		if (rc == OP_STOP)
			pipe_stop(p);
	}
	if (p->ostart == p->olen)
		p->ostart = p->oscan = p->olen = 0;
	return (OP_OK);
}

/* Read the command's output and pass its lines on. */
static int
pipe_output_read(struct pipe_op *p)
{
	ssize_t	n;

	if (p->ostart > 0 && p->olen == p->osize) {
		memmove(p->obuf, p->obuf + p->ostart, p->olen - p->ostart);
		p->olen -= p->ostart;
		p->oscan -= p->ostart;
		p->ostart = 0;
	}
	if (p->olen == p->osize) {
		/* One line longer than the buffer. */
		if (p->olen - p->ostart > EMBER_MAX_BATCH - 4)
			return (op_fail(&p->op, "pipe command `%s`: output "
			    "line exceeds the 64 MiB record limit", p->command));
		p->osize = p->osize == 0 ? PIPE_CHUNK : p->osize * 2;
		p->obuf = xrealloc(p->obuf, p->osize);
	}
	n = read(p->out, p->obuf + p->olen, p->osize - p->olen);
	if (n == -1) {
		if (errno == EINTR || errno == EAGAIN)
			return (OP_OK);
		return (op_fail(&p->op, "pipe command `%s`: read: %s",
		    p->command, strerror(errno)));
	}
	if (n == 0) {
		pipe_close(&p->out);
		return (pipe_output_lines(p, 1));
	}
	p->olen += (size_t)n;
	return (pipe_output_lines(p, 0));
}

/* Read the command's stderr, keeping the tail. */
static void
pipe_error_read(struct pipe_op *p)
{
	ssize_t	n;

	n = read(p->err, p->tail + p->taillen, sizeof p->tail - p->taillen);
	if (n == -1 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n <= 0) {
		pipe_close(&p->err);
		return;
	}
	p->taillen += (size_t)n;
	if (p->taillen > PIPE_TAIL) {
		memmove(p->tail, p->tail + p->taillen - PIPE_TAIL, PIPE_TAIL);
		p->taillen = PIPE_TAIL;
		p->tailcut = 1;
	}
}

/*
 * Move data between the worker and the command.  Without drain, return
 * once the pending input is written (or the command stopped reading),
 * reading whatever output is ready meanwhile.  With drain, close the input
 * once written and read until both stdout and stderr are at end of file.
 * A command that writes a lot before reading never blocks us: we poll its
 * output while its input is full.  The output batches are flushed before
 * blocking, so records stream out as the command produces them.
 */
static int
pipe_pump(struct pipe_op *p, int drain)
{
	struct pollfd	 pfd[3];
	struct pollfd	*pin, *pout, *perr;
	int		 nfds, n, timeout = 0, written;
	char		*err;

	for (;;) {
		pipe_input_write(p);
		written = p->in == -1 || p->ioff == p->ilen;
		if (drain && written)
			pipe_close(&p->in);

		nfds = 0;
		pin = pout = perr = NULL;
		if (p->in != -1 && !written) {
			pin = &pfd[nfds++];
			pin->fd = p->in;
			pin->events = POLLOUT;
		}
		if (p->out != -1) {
			pout = &pfd[nfds++];
			pout->fd = p->out;
			pout->events = POLLIN;
		}
		if (p->err != -1) {
			perr = &pfd[nfds++];
			perr->fd = p->err;
			perr->events = POLLIN;
		}
		if (nfds == 0)
			return (OP_OK);
		if (!drain && written)
			timeout = 0;	/* only a look at the output */

		n = poll(pfd, (nfds_t)nfds, timeout);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			fatal("poll");
		}
		if (n == 0) {
			if (!drain && written)
				return (OP_OK);
			if (chain_output(p->op.chain) != NULL &&
			    output_flush(chain_output(p->op.chain), &err) == -1)
				return (op_fail_take(&p->op, err));
			timeout = -1;
			continue;
		}
		timeout = 0;
		if (pout != NULL && pout->revents != 0) {
			if (pipe_output_read(p) == OP_FAIL)
				return (OP_FAIL);
		}
		if (perr != NULL && perr->revents != 0)
			pipe_error_read(p);
		if (pin != NULL && (pin->revents & (POLLERR | POLLNVAL)))
			pipe_input_close(p);
		if (!drain && written)
			return (OP_OK);
	}
}

/* Queue a record as a line of the command's input. */
static int
pipe_push_cb(struct op *op, const struct record *r)
{
	struct pipe_op	*p = (struct pipe_op *)op;
	size_t		 need;

	if (!p->started && pipe_start(p) == OP_FAIL)
		return (OP_FAIL);
	if (p->input_closed || p->stopped)
		return (OP_STOP);

	need = p->ilen + r->len + 1;
	if (need > p->isize) {
		p->isize = need < PIPE_CHUNK * 2 ? PIPE_CHUNK * 2 : need;
		p->ibuf = xrealloc(p->ibuf, p->isize);
	}
	if (r->len > 0)
		memcpy(p->ibuf + p->ilen, r->data, r->len);
	p->ibuf[p->ilen + r->len] = '\n';
	p->ilen = need;

	if (p->ilen - p->ioff >= PIPE_CHUNK && pipe_pump(p, 0) == OP_FAIL)
		return (OP_FAIL);
	if (p->input_closed || p->stopped)
		return (OP_STOP);
	return (OP_OK);
}

/* Wait for the command. */
static int
pipe_wait(struct pipe_op *p, int *status)
{
	pid_t	pid;

	do
		pid = waitpid(p->pid, status, 0);
	while (pid == -1 && errno == EINTR);
	if (pid == -1)
		return (op_fail(&p->op, "pipe command `%s`: waitpid: %s",
		    p->command, strerror(errno)));
	p->pid = -1;
	return (OP_OK);
}

/* Make the error message for a failed command. */
static int
pipe_fail_status(struct pipe_op *p, int status)
{
	char		 how[128];
	size_t		 len = p->taillen;

	log_describe_wait(status, how, sizeof how);

	while (len > 0 && (p->tail[len - 1] == '\n' ||
	    p->tail[len - 1] == '\r' || p->tail[len - 1] == ' '))
		len--;
	if (len == 0)
		return (op_fail(&p->op, "pipe command `%s` %s%s", p->command,
		    WIFSIGNALED(status) ? "was " : "", how));
	return (op_fail(&p->op, "pipe command `%s` %s%s: %s%.*s", p->command,
	    WIFSIGNALED(status) ? "was " : "",
	    how, p->tailcut ? "..." : "", (int)len, p->tail));
}

/* Finish: feed the rest, drain the output, check how the command ended. */
static int
pipe_finish_cb(struct op *op)
{
	struct pipe_op	*p = (struct pipe_op *)op;
	int		 status;

	if (!p->started && pipe_start(p) == OP_FAIL)
		return (OP_FAIL);
	if (pipe_pump(p, 1) == OP_FAIL)
		return (OP_FAIL);
	if (pipe_wait(p, &status) == OP_FAIL)
		return (OP_FAIL);
	log_debug("pipe command `%s` ended with status %#x", p->command,
	    status);

	/* Cut short by the ops after us: SIGPIPE is expected then. */
	if (p->stopped && ((WIFSIGNALED(status) && WTERMSIG(status) ==
	    SIGPIPE) || (WIFEXITED(status) && WEXITSTATUS(status) ==
	    128 + SIGPIPE)))
		status = 0;
	if (status != 0)
		return (pipe_fail_status(p, status));
	return (op_next_finish(op));
}

/* Free the op, killing the command if it still runs. */
static void
pipe_free_cb(struct op *op)
{
	struct pipe_op	*p = (struct pipe_op *)op;
	int		 status;

	pipe_close(&p->in);
	pipe_close(&p->out);
	pipe_close(&p->err);
	if (p->pid != -1) {
		kill(p->pid, SIGKILL);
		while (waitpid(p->pid, &status, 0) == -1 && errno == EINTR)
			;
	}
	free(p->ibuf);
	free(p->obuf);
	free(p);
}

/* Create a pipe op for a command. */
struct op *
pipe_create(const char *command)
{
	struct pipe_op	*p;

	p = xcalloc(1, sizeof *p);
	p->op.push = pipe_push_cb;
	p->op.finish = pipe_finish_cb;
	p->op.free = pipe_free_cb;
	p->command = command;
	p->pid = -1;
	p->in = p->out = p->err = -1;
	return (&p->op);
}
