#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "mapped.h"

/* Under an address-space limit, a file is mapped only if it takes at most
 * this share of it. */
#define MAPPED_AS_SHARE	8

/* The mapping (page-aligned), for the handler to tell its faults from
 * any other; the handler that was there before; the file and where the
 * mapping ends in it, to see it shrink where no fault does. */
static char			*volatile mapped_base;
static volatile size_t		 mapped_len;
static volatile uintptr_t	 mapped_page;
static volatile sig_atomic_t	 mapped_zeroed;
static struct sigaction		 mapped_old;
static int			 mapped_fd = -1;
static int64_t			 mapped_end;

/*
 * SIGBUS in the mapping: the file is shorter than the page read.  Put a
 * zero page over it and return, so the read goes on; the source sees
 * mapped_zeroed and fails the task.  Any other SIGBUS (a fault elsewhere,
 * or one sent) goes to the handler that was there before: it is put back
 * and, for a fault, meets it again on return; a sent one is raised again.
 * (mmap is not on POSIX's list of safe calls, but is a plain system call
 * on Linux.)
 */
static void
mapped_sigbus(__attribute__((unused)) int sig, siginfo_t *si,
    __attribute__((unused)) void *uc)
{
	char		*a = si->si_addr, *base = mapped_base;
	uintptr_t	 page = mapped_page;
	int		 saved = errno;

	if (si->si_code != BUS_ADRERR || base == NULL || a < base ||
	    a >= base + mapped_len ||
	    mmap((void *)((uintptr_t)a & ~(page - 1)), page, PROT_READ,
	    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) {
		sigaction(SIGBUS, &mapped_old, NULL);
		if (si->si_code <= 0)
			raise(SIGBUS);
		errno = saved;
		return;
	}
	mapped_zeroed = 1;
	errno = saved;
}

/* Map a file's bytes and guard them. */
int
mapped_open(int fd, int64_t offset, size_t len, const char **data)
{
	struct sigaction	 sa;
	struct rlimit		 rl;
	int64_t			 page = sysconf(_SC_PAGESIZE);
	int64_t			 at = offset - offset % page;
	void			*p;

	if (mapped_base != NULL)
		fatalx("%s: a mapping is open", __func__);
	/* The mapping counts in the address space that workers.max_memory
	 * bounds: one that took much of it would leave the task's own
	 * allocations failing, where reading the file costs none. */
	if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    len > rl.rlim_cur / MAPPED_AS_SHARE) {
		errno = ENOMEM;
		return (-1);
	}
	p = mmap(NULL, len + (size_t)(offset - at), PROT_READ, MAP_PRIVATE,
	    fd, (off_t)at);
	if (p == MAP_FAILED)
		return (-1);
	/* The kernel reads ahead far more than it does for faults. */
	madvise(p, len + (size_t)(offset - at), MADV_SEQUENTIAL);
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = mapped_sigbus;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	mapped_zeroed = 0;
	mapped_page = (uintptr_t)page;
	mapped_fd = fd;
	mapped_end = offset + (int64_t)len;
	mapped_len = len + (size_t)(offset - at);
	mapped_base = p;
	if (sigaction(SIGBUS, &sa, &mapped_old) == -1)
		fatal("sigaction");
	*data = (const char *)p + (offset - at);
	return (0);
}

/* Tell whether a read fell past the file's end, or the file is now
 * shorter than the mapping: cut inside its last page, it faults nowhere,
 * and the bytes past its new end read as zeros. */
int
mapped_shrank(void)
{
	struct stat	st;

	if (mapped_zeroed)
		return (1);
	return (mapped_fd != -1 && (fstat(mapped_fd, &st) == -1 ||
	    st.st_size < mapped_end));
}

/* Unmap and put the old SIGBUS handler back. */
void
mapped_close(void)
{
	void	*p = mapped_base;
	size_t	 len = mapped_len;

	if (p == NULL)
		return;
	if (sigaction(SIGBUS, &mapped_old, NULL) == -1)
		fatal("sigaction");
	mapped_base = NULL;
	mapped_fd = -1;
	munmap(p, len);
}
