/*
 * Fuzzing target: emberd's control-frame reader on the bytes a client
 * sends.  The bytes are split into frames as a connection splits them
 * (common/frame.c's frame_peek on an evbuffer, under a frame limit), each
 * frame's values counted and parsed as a request (daemon/request.c;
 * the count must be at least the values parsed), and an execute
 * request's members (request_read_execute) and plan read as emberd reads
 * them.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "frame.h"
#include "fuzz.h"
#include "plan.h"
#include "request.h"

/* A small daemon.max_frame, so that large lengths are refused too. */
#define FUZZ_MAX_FRAME	(64 * 1024)
/* daemon.max_frame_values here: the count before the parse is fuzzed too. */
#define FUZZ_MAX_VALUES	4096

/* Read an execute request's members and parse its plan, as execute.c
 * does before it looks at files. */
static void
fuzz_execute(json_t *req)
{
	struct execute_request	 er;
	struct plan		*plan = NULL;
	json_t			*j;
	const char		*class = NULL;
	char			*err = NULL;

	if (request_read_execute(req, NULL, NULL, &er, &class, &err) == -1) {
		if (err == NULL || class == NULL)
			abort();
		free(err);
		err = NULL;
	} else if (er.action > ACTION_CHECKPOINT || strlen(er.id) != 36)
		abort();
	if ((j = json_object_get(req, "plan")) == NULL)
		return;
	if (plan_parse(j, &plan, &err) == -1) {
		if (err == NULL)
			abort();
		free(err);
		return;
	}
	plan_set_partitions(plan, 2);
	plan_free(plan);
}

/* The values of a tree, itself included. */
static size_t
fuzz_values(json_t *j)
{
	const char	*key;
	json_t		*v;
	size_t		 i, n = 1;

	if (json_is_array(j)) {
		json_array_foreach(j, i, v)
			n += fuzz_values(v);
	} else if (json_is_object(j)) {
		json_object_foreach(j, key, v)
			n += fuzz_values(v);
	}
	return (n);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct evbuffer	*in;
	unsigned char	*frame;
	json_t		*req;
	int32_t		 len;
	char		*err;

	if ((in = evbuffer_new()) == NULL)
		abort();
	if (size > 0 && evbuffer_add(in, data, size) == -1)
		abort();
	for (;;) {
		if (frame_peek(in, FUZZ_MAX_FRAME, &len) != FRAME_OK)
			break;
		/* A special length where a request is due closes the
		 * connection. */
		if (len < 0)
			break;
		frame = evbuffer_pullup(in, (ev_ssize_t)len + 4);
		if (frame == NULL)
			abort();
		err = NULL;
		if ((req = request_parse(frame + 4, (size_t)len,
		    FUZZ_MAX_VALUES, &err)) == NULL) {
			if (err == NULL)
				abort();
			free(err);
		} else {
			/* The count before the parse is at least the
			 * values. */
			if (request_count_values(frame + 4, (size_t)len,
			    SIZE_MAX - 1) < fuzz_values(req))
				abort();
			if (strcmp(json_string_value(json_object_get(req,
			    "op")), "execute") == 0)
				fuzz_execute(req);
			json_decref(req);
		}
		evbuffer_drain(in, (size_t)len + 4);
	}
	evbuffer_free(in);
	return (0);
}
