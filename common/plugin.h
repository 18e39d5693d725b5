/*
 * Checking a UDF plugin without loading it: emberd validates a plan's udf
 * ops with this, so that a plugin's constructors never run inside the
 * daemon.  The worker loads the plugin for real (worker/udf.c).
 */
#ifndef EMBER_PLUGIN_H
#define EMBER_PLUGIN_H

/* What plugin_check found wrong: the library, or the symbol in it. */
#define PLUGIN_BAD_LIBRARY	(-1)
#define PLUGIN_BAD_SYMBOL	(-2)

/*
 * Check that library is an ELF shared object for this machine, built for
 * this ember's UDF ABI, needing no ember_udf_ function this ember lacks,
 * and defining symbol as a function.  0, or PLUGIN_BAD_LIBRARY or
 * PLUGIN_BAD_SYMBOL with *err allocated ("PATH: why", without the plan
 * field, which the caller knows from the return value).  *deterministic
 * (unless NULL) says whether the plugin marks symbol deterministic
 * (EMBER_UDF_DETERMINISTIC).
 */
int	 plugin_check(const char *library, const char *symbol,
	     int *deterministic, char **err);

/* The ember_udf_ functions the worker provides to plugins, NULL-ended. */
extern const char *const plugin_udf_functions[];

#endif
