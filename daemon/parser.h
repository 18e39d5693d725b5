/*
 * The parser: threads of emberd's that parse clients' big control frames
 * and drop the trees made of them, so that a frame of up to
 * daemon.max_frame of JSON (most of a second of jansson's time, and as
 * long again to free, at worst) never holds the loop.  A frame of at
 * least PARSER_THRESHOLD bytes comes here; smaller ones, nearly every
 * request, are parsed on the loop as they come, with no hand-over.
 *
 * Fair between users: each uid has a queue, the threads take from the
 * uids in turn, and a uid has at most PARSER_PER_UID frames here (queued,
 * parsed, or waiting for the loop): its further frames wait in their
 * sockets.  A frame's bytes are the parser's until its thread is done;
 * the result comes back to the loop through an eventfd, one a loop turn
 * (as any request: its handling may be long too).  The threads
 * touch nothing of emberd's but the frame, the tree and this file's
 * queues.
 */
#ifndef EMBER_PARSER_H
#define EMBER_PARSER_H

#include <sys/types.h>

#include <stddef.h>

#include <jansson.h>

/* Frames this long or longer are parsed off the loop: the worst of them
 * (tiny values) takes jansson about 0.5 ms to parse and free. */
#define PARSER_THRESHOLD	(16 * 1024)
/* Frames of one uid in the parser at once, at most. */
#define PARSER_PER_UID		2

struct evbuffer;
struct parser_job;

/* Start: room_cb runs on the loop when a uid's frame left the parser. */
void	 parser_init(void (*room_cb)(uid_t));
/* Stop the threads (a parse under way ends first) and free all. */
void	 parser_shutdown(void);
/* Has uid PARSER_PER_UID frames in the parser? */
int	 parser_full(uid_t uid);
/*
 * Parse frame (taken; request_parse, with max_values) off the loop; then,
 * on the loop, done_cb gets the request, or NULL and the message, both
 * its own.
 */
struct parser_job *parser_parse(uid_t uid, struct evbuffer *frame,
	     size_t max_values, void (*done_cb)(json_t *, char *, void *),
	     void *arg);
/* Its owner is gone: done_cb is never called, the result is dropped. */
void	 parser_cancel(struct parser_job *);
/* Decrement req's count off the loop (it may be the last of a big
 * tree); on the loop if no thread runs. */
void	 parser_drop(json_t *req);
/* Frames queued or being parsed, and trees waiting to be dropped. */
size_t	 parser_backlog(void);

#endif
