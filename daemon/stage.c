#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "jread.h"
#include "log.h"
#include "plan.h"
#include "stage.h"
#include "xmalloc.h"

/* A stage being built: its source, partitions and narrow ops so far. */
struct stage_open {
	json_t			*source;
	int			 partitions;
	json_t			*ops;
	const struct plan	*from;
};

struct stage_cut {
	struct stage		*v;
	int			 n;
	char			*err;
};

/* The wide op as a stage's workers get it: its partitions resolved, its
 * other plan left out (that plan is a stage of its own). */
static json_t *
stage_op_json(const struct plan_op *op, json_t *oj)
{
	const char	*name;
	json_t		*arg, *out = NULL;

	json_object_foreach(oj, name, arg) {
		arg = json_is_object(arg) ? json_deep_copy(arg) : json_object();
		json_object_del(arg, "plan");
		if (op->type != PLAN_OP_UNION)
			json_object_set_new(arg, "partitions",
			    json_integer(op->out_partitions));
		out = json_pack("{s:o}", name, arg);
	}
	return (out);
}

/* Close the open stage as stage n: a map stage writing for out_op, or
 * the last (out_op NULL).  Its index. */
static int
stage_close(struct stage_cut *c, struct stage_open *o, const struct plan_op *op,
    json_t *out_op)
{
	struct stage	*s;

	c->v = xreallocarray(c->v, (size_t)c->n + 1, sizeof *c->v);
	s = &c->v[c->n];
	memset(s, 0, sizeof *s);
	s->partitions = o->partitions;
	s->plan = json_pack("{s:o,s:i,s:o}", "source", o->source, "partitions",
	    o->partitions, "ops", o->ops);
	s->from = o->from;
	if (out_op != NULL) {
		if ((s->out_op = json_dumps(out_op, JSON_COMPACT)) == NULL)
			fatalx("json_dumps");
		s->buckets = op->type == PLAN_OP_SORT_BY ||
		    op->type == PLAN_OP_UNION ? 1 : op->out_partitions;
	}
	o->source = o->ops = NULL;
	return (c->n++);
}

/* Cut plan p (json pj) into c, leaving its last stage open in o. */
static int
stage_cut_plan(struct stage_cut *c, const struct plan *p, json_t *pj,
    struct stage_open *o)
{
	struct stage_open	 right;
	const struct plan_op	*op;
	json_t			*ops = json_object_get(pj, "ops"), *oj, *w,
				*inputs;
	int			 left, r;
	size_t			 i;

	o->source = json_incref(json_object_get(pj, "source"));
	o->partitions = p->partitions;
	o->ops = json_array();
	o->from = p;
	for (i = 0; i < p->nops; i++) {
		op = &p->ops[i];
		oj = json_array_get(ops, i);
		if (!plan_op_is_wide(op)) {
			json_array_append(o->ops, oj);
			continue;
		}
		if (c->n + 2 >= STAGE_MAX) {
			xasprintf(&c->err, "plan: more than %d stages",
			    STAGE_MAX);
			return (-1);
		}
		w = stage_op_json(op, oj);
		inputs = json_array();
		json_array_append_new(inputs, json_pack("{s:i,s:i}", "maps",
		    o->partitions, "stage", c->n));
		left = stage_close(c, o, op, w);
		(void)left;
		if (op->other != NULL) {
			if (op->other->source == PLAN_SOURCE_CHECKPOINT) {
				xasprintf(&c->err, "plan.ops[%zu]: a checkpoint "
				    "source inside join or union is not "
				    "supported", i);
				json_decref(w);
				json_decref(inputs);
				return (-1);
			}
			if (stage_cut_plan(c, op->other, json_object_get(
			    json_object_iter_value(json_object_iter(oj)),
			    "plan"), &right) == -1) {
				json_decref(w);
				json_decref(inputs);
				return (-1);
			}
			json_array_append_new(inputs, json_pack("{s:i,s:i}",
			    "maps", right.partitions, "stage", c->n));
			r = stage_close(c, &right, op, w);
			(void)r;
		}
		o->source = json_pack("{s:{s:o,s:o}}", "shuffle", "op", w,
		    "inputs", inputs);
		o->partitions = op->out_partitions;
		o->ops = json_array();
		o->from = NULL;
	}
	return (0);
}

struct stage *
stage_cut(const struct plan *plan, json_t *json, int *nstages, char **err)
{
	struct stage_cut	c = { NULL, 0, NULL };
	struct stage_open	o;

	if (stage_cut_plan(&c, plan, json, &o) == -1) {
		json_decref(o.source);
		json_decref(o.ops);
		stage_free_all(c.v, c.n);
		*err = c.err;
		return (NULL);
	}
	stage_close(&c, &o, NULL, NULL);
	*nstages = c.n;
	return (c.v);
}

void
stage_free_all(struct stage *v, int n)
{
	int	i;

	for (i = 0; i < n; i++) {
		json_decref(v[i].plan);
		free(v[i].out_op);
		free(v[i].name);
		free(v[i].plan_text);
	}
	free(v);
}
