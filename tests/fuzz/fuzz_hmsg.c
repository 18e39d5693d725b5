/*
 * Fuzzing target: emberd's reader of a helper's reply (common/hmsg.c), on
 * what a helper, which runs as the job's user, may send.  The first byte
 * picks the verb the reply answers; the rest is the reply's frame.  A
 * reply read must hold what struct hmsg_reply promises: each member of
 * the type given, each count 0 or more.
 */
#include <stdint.h>
#include <stdlib.h>

#include <jansson.h>

#include "fuzz.h"
#include "hmsg.h"

/* Abort unless v is absent or an array. */
static void
fuzz_array(json_t *v)
{
	if (v != NULL && !json_is_array(v))
		abort();
}

/* Check what the reader promised for r's verb. */
static void
fuzz_check(const struct hmsg_reply *r)
{
	switch (r->verb) {
	case HMSG_PLAN_CHECK:
		fuzz_array(r->u.plan_check.files);
		fuzz_array(r->u.plan_check.nested);
		fuzz_array(r->u.plan_check.udfs);
		if (r->error == NULL && r->u.plan_check.udfs == NULL)
			abort();
		break;
	case HMSG_SAVE_BEGIN:
		if (r->error == NULL &&
		    json_object_size(r->u.save_begin.ids) != 4)
			abort();
		break;
	case HMSG_BROADCAST_READ:
		if (r->u.broadcast_read.size < 0 ||
		    r->u.broadcast_read.over < 0)
			abort();
		break;
	case HMSG_CHECKPOINT_REMOVE:
		fuzz_array(r->u.checkpoint_remove.failed);
		break;
	case HMSG_CHECKPOINT_CLEAN:
		fuzz_array(r->u.checkpoint_clean.checkpoints);
		if (r->u.checkpoint_clean.removed < 0 ||
		    r->u.checkpoint_clean.refused < 0 ||
		    r->u.checkpoint_clean.more < 0)
			abort();
		break;
	case HMSG_CHECKPOINT_PLAN:
		fuzz_array(r->u.checkpoint_plan.files);
		if (r->error == NULL && !json_is_object(
		    r->u.checkpoint_plan.plan))
			abort();
		break;
	default:
		break;
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct hmsg_reply	 r;
	enum hmsg_verb		 verb;
	json_t			*msg = NULL;
	const char		*refused;
	char			*err = NULL;

	if (size < 1)
		return (0);
	verb = (enum hmsg_verb)(data[0] % HMSG_NVERBS);
	if (hmsg_reply_decode(data + 1, size - 1, verb, &msg, &r, &refused,
	    &err) == -1) {
		if (err == NULL)
			abort();
		free(err);
	} else if (err != NULL || r.verb != verb)
		abort();
	else if (refused == NULL)
		fuzz_check(&r);
	json_decref(msg);
	return (0);
}
