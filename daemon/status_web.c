#include <sys/types.h>

#include <ctype.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>

#include "emberd.h"
#include "log.h"
#include "metrics.h"
#include "status.h"
#include "status_web.h"
#include "xmalloc.h"

/* A user the listener shows, or one whose name was looked up. */
struct web_user {
	uid_t	 uid;
	char	*name;		/* NULL: a uid without a name */
};

#define WEB_NAMES_MAX	64	/* names remembered for status.users = * */

static char		*web_users_text;	/* status.users as parsed */
static int		 web_all;		/* "*" */
static struct web_user	*web_users;
static size_t		 web_nusers;
static struct web_user	 web_names[WEB_NAMES_MAX];
static size_t		 web_nnames;

/* Forget the parsed list. */
static void
status_web_clear(void)
{
	size_t	i;

	for (i = 0; i < web_nusers; i++)
		free(web_users[i].name);
	free(web_users);
	web_users = NULL;
	web_nusers = 0;
	web_all = 0;
}

/* Add one entry of status.users: 0, or -1 (logged) for no such user. */
static int
status_web_add(const char *word)
{
	struct passwd	*pw;
	struct web_user	*u;
	char		*end;
	unsigned long	 n;

	if (strcmp(word, "*") == 0) {
		web_all = 1;
		return (0);
	}
	if (isdigit((unsigned char)*word)) {
		n = strtoul(word, &end, 10);
		if (*end != '\0' || n > (uid_t)-2) {
			log_error("status.users: \"%s\" is neither a user nor "
			    "a uid", word);
			return (-1);
		}
		pw = getpwuid((uid_t)n);
	} else if ((pw = getpwnam(word)) == NULL) {
		log_error("status.users: no user \"%s\"", word);
		return (-1);
	} else
		n = pw->pw_uid;
	web_users = xreallocarray(web_users, web_nusers + 1, sizeof *web_users);
	u = &web_users[web_nusers++];
	u->uid = (uid_t)n;
	u->name = pw != NULL ? xstrdup(pw->pw_name) : NULL;
	return (0);
}

int
status_web_check_users(void)
{
	char	*copy, *word, *rest;
	int	 rc = 0;

	if (web_users_text != NULL &&
	    strcmp(web_users_text, ember_conf.status_users) == 0)
		return (0);
	status_web_clear();
	free(web_users_text);
	web_users_text = xstrdup(ember_conf.status_users);
	copy = xstrdup(web_users_text);
	for (rest = copy; (word = strsep(&rest, ", \t")) != NULL;) {
		if (*word != '\0' && status_web_add(word) == -1)
			rc = -1;
	}
	free(copy);
	return (rc);
}

int
status_web_allows(uid_t uid)
{
	size_t	i;

	if (web_all)
		return (1);
	for (i = 0; i < web_nusers; i++) {
		if (web_users[i].uid == uid)
			return (1);
	}
	return (0);
}

/* The name of uid, or NULL; looked up once (status.users = * only). */
static const char *
status_web_name(uid_t uid)
{
	struct passwd	*pw;
	size_t		 i;

	for (i = 0; i < web_nusers; i++) {
		if (web_users[i].uid == uid)
			return (web_users[i].name);
	}
	for (i = 0; i < web_nnames; i++) {
		if (web_names[i].uid == uid)
			return (web_names[i].name);
	}
	if (web_nnames == WEB_NAMES_MAX)
		return (NULL);
	pw = getpwuid(uid);
	web_names[web_nnames].uid = uid;
	web_names[web_nnames].name = pw != NULL ? xstrdup(pw->pw_name) : NULL;
	return (web_names[web_nnames++].name);
}

/* Keep the entries of array a that keep() accepts; return how many went. */
static size_t
status_web_filter(json_t *a, int (*keep)(json_t *, void *), void *arg)
{
	size_t	i = 0, gone = 0;

	while (i < json_array_size(a)) {
		if (keep(json_array_get(a, i), arg))
			i++;
		else {
			json_array_remove(a, i);
			gone++;
		}
	}
	return (gone);
}

/* A session of an allowed user: remember its uid under its id. */
static int
status_web_keep_session(json_t *s, void *arg)
{
	json_t	*uids = arg;
	uid_t	 uid = (uid_t)json_integer_value(json_object_get(s, "uid"));

	if (!status_web_allows(uid))
		return (0);
	json_object_set_new(uids, json_string_value(json_object_get(s, "id")),
	    json_integer((json_int_t)uid));
	return (1);
}

/* An object of a kept session: an operation gets its user. */
static int
status_web_keep_owned(json_t *o, void *arg)
{
	json_t		*uid;
	const char	*session, *name;

	session = json_string_value(json_object_get(o, "session"));
	if (session == NULL ||
	    (uid = json_object_get(arg, session)) == NULL)
		return (0);
	if (json_object_get(o, "action") != NULL) {
		json_object_set(o, "uid", uid);
		name = status_web_name((uid_t)json_integer_value(uid));
		json_object_set_new(o, "user", name != NULL ?
		    json_string(name) : json_null());
	}
	return (1);
}

/* A limits entry of an allowed uid. */
static int
status_web_keep_uid(json_t *o, void *arg)
{
	(void)arg;
	return (status_web_allows((uid_t)json_integer_value(
	    json_object_get(o, "uid"))));
}

/* A worker's task names its operation only if the operation is shown. */
static void
status_web_hide_tasks(json_t *workers, json_t *ops)
{
	json_t		*w, *task, *op;
	const char	*id;
	size_t		 i, k;
	int		 shown;

	json_array_foreach(workers, i, w) {
		if ((task = json_object_get(w, "task")) == NULL)
			continue;
		id = json_string_value(json_object_get(task, "operation"));
		shown = 0;
		json_array_foreach(ops, k, op) {
			if (id != NULL && strcmp(id, json_string_value(
			    json_object_get(op, "id"))) == 0)
				shown = 1;
		}
		if (!shown)
			json_object_del(task, "operation");
	}
}

/* Name the uid under key of each object of array a, as "user" (null for
 * a uid without a name): whose pool, whose failure. */
static void
status_web_name_all(json_t *a, const char *key)
{
	json_t		*o;
	const char	*name;
	size_t		 i;

	json_array_foreach(a, i, o) {
		name = status_web_name((uid_t)json_integer_value(
		    json_object_get(o, key)));
		json_object_set_new(o, "user", name != NULL ?
		    json_string(name) : json_null());
	}
}

/* The users shown, for the page to say whose operations it shows. */
static json_t *
status_web_users_json(void)
{
	json_t	*a;
	size_t	 i;

	if (web_all)
		return (json_string("*"));
	a = json_array();
	for (i = 0; i < web_nusers; i++)
		json_array_append_new(a, web_users[i].name != NULL ?
		    json_string(web_users[i].name) :
		    json_integer((json_int_t)web_users[i].uid));
	return (a);
}

json_t *
status_web_build(void)
{
	json_t	*s, *uids, *ops, *limits;
	size_t	 hidden;

	status_web_check_users();
	s = status_build(0);
	uids = json_object();
	status_web_filter(json_object_get(s, "sessions"),
	    status_web_keep_session, uids);
	ops = json_object_get(s, "operations");
	hidden = status_web_filter(ops, status_web_keep_owned, uids);
	status_web_filter(json_object_get(s, "broadcasts"),
	    status_web_keep_owned, uids);
	status_web_filter(json_object_get(s, "checkpoints"),
	    status_web_keep_uid, NULL);
	if ((limits = json_object_get(s, "limits")) != NULL)
		status_web_filter(json_object_get(limits, "users"),
		    status_web_keep_uid, NULL);
	status_web_hide_tasks(json_object_get(s, "workers"), ops);
	json_decref(uids);
	/* A pool is named by the user its workers run as, as ember status
	 * names it: root's jobs run as workers.root_user. */
	status_web_name_all(json_object_get(s, "pools"), "uid");
	json_object_set_new(s, "failures", metrics_failures(status_web_allows));
	status_web_name_all(json_object_get(s, "failures"), "uid");
	json_object_set_new(s, "operations_hidden",
	    json_integer((json_int_t)hidden));
	json_object_set_new(s, "shown_users", status_web_users_json());
	return (s);
}
