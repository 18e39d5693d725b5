/* What every unit test program does before it builds its suites. */
#ifndef EMBER_UNIT_H
#define EMBER_UNIT_H

/* Scale Check's timeouts for a sanitized build; call before any TCase. */
void	unit_init(void);

#endif
