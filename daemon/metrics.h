/*
 * Metrics: what emberd measures for the status listener beyond status's
 * counters (the histograms of task times and the recent task failures),
 * and the Prometheus text exposition of all of it (docs/metrics.md names
 * every metric).  Everything here is bounded: fixed buckets, a ring of
 * failures.
 */
#ifndef EMBER_METRICS_H
#define EMBER_METRICS_H

#include <sys/types.h>

#include <jansson.h>

struct evbuffer;
struct task;

/* A task ended cleanly: its run time goes in the duration histogram. */
void	 metrics_task_finished(const struct task *);
/* A task's first record went out: the time since it was queued. */
void	 metrics_task_first_record(const struct task *);
/* A task failed: remembered, with its error, among the recent failures. */
void	 metrics_task_failed(const struct task *);

/* The recent failures, newest first, of the uids allowed(uid) accepts:
 * [{"time", "age_ms", "uid", "operation", "partition", "message"}]. */
json_t	*metrics_failures(int (*allowed)(uid_t));
/* The number of recent failures remembered, of any uid. */
size_t	 metrics_failures_count(void);

/* Write every metric in the Prometheus text format (version 0.0.4). */
void	 metrics_write(struct evbuffer *);

#endif
