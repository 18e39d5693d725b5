/*
 * ember-worker --stdio: a plan's op chain over standard input and output,
 * in ember's framing, for another engine's executors (docs/spark.md).
 */
#ifndef EMBER_WORKER_STDIO_CHAIN_H
#define EMBER_WORKER_STDIO_CHAIN_H

/*
 * Parse plan_text (a plan whose source is ignored) and check what it
 * names; with check_only stop there.  Else hold the nbroadcasts
 * broadcasts ("ID=PATH" each: the file's bytes are broadcast ID, as a
 * worker holds emberd's), run its ops as partition over the records of
 * standard input, write the records they leave on standard output and
 * END_OF_DATA_SECTION (-1) after the last.  The exit status: 0, or 1 with
 * the error on standard error ("PLAN_INVALID: plan.ops[0]...", or
 * "partition N: ...").
 */
int	stdio_chain_main(const char *plan_text, int partition, int check_only,
	    char *const *broadcasts, size_t nbroadcasts);

#endif
