/* What every unit test program does before it builds its suites. */
#ifndef EMBER_UNIT_H
#define EMBER_UNIT_H

/* Scale Check's timeouts for a sanitized build; call before any TCase. */
void	unit_init(void);
/* Send stderr to a file until unit_stderr_end, which restores it and
 * returns what was written (to free), for tests of what is logged. */
void	unit_stderr_begin(void);
char	*unit_stderr_end(void);

#endif
