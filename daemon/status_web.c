#include <sys/types.h>

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "emberd.h"
#include "log.h"
#include "metrics.h"
#include "status.h"
#include "status_view.h"
#include "status_web.h"
#include "userdb.h"
#include "xmalloc.h"

/* A user the listener shows, or one whose name was looked up. */
struct web_user {
	uid_t	 uid;
	char	*name;		/* NULL: a uid without a name */
};

static char		*web_users_text;	/* status.users as parsed */
static int		 web_all;		/* "*" */
static struct web_user	*web_users;
static size_t		 web_nusers;

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
	const struct userdb_user	*pw;
	struct web_user			*u;
	char				*end;
	unsigned long			 n;

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
		pw = userdb_uid_now((uid_t)n);
	} else if ((pw = userdb_name_now(word)) == NULL) {
		log_error("status.users: no user \"%s\"", word);
		return (-1);
	} else
		n = pw->uid;
	web_users = xreallocarray(web_users, web_nusers + 1, sizeof *web_users);
	u = &web_users[web_nusers++];
	u->uid = (uid_t)n;
	u->name = pw != NULL ? xstrdup(pw->name) : NULL;
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

/* The name of uid, or NULL: the one cached, never a lookup on the loop
 * (the users of sessions and pools are cached from their hello). */
static const char *
status_web_name(uid_t uid)
{
	const struct userdb_user	*pw;
	size_t				 i;

	for (i = 0; i < web_nusers; i++) {
		if (web_users[i].uid == uid)
			return (web_users[i].name);
	}
	if (userdb_uid(uid, &pw) == 1 && pw != NULL)
		return (pw->name);
	return (NULL);
}

/* status.users as a viewer's rule: does it show uid's own records? */
static int
status_web_viewer_allows(uid_t uid, void *arg)
{
	(void)arg;
	return (status_web_allows(uid));
}

/* Every uid: the view, not the source, leaves out whose are not shown. */
static int
status_web_every_uid(uid_t uid)
{
	(void)uid;
	return (1);
}

/* Give each operation shown the uid and name of its session's user. */
static void
status_web_name_operations(json_t *s)
{
	json_t		*op, *session, *uid;
	const char	*id, *name;
	size_t		 i, k;

	json_array_foreach(json_object_get(s, "operations"), i, op) {
		id = json_string_value(json_object_get(op, "session"));
		uid = NULL;
		json_array_foreach(json_object_get(s, "sessions"), k,
		    session) {
			if (id != NULL && strcmp(id, json_string_value(
			    json_object_get(session, "id"))) == 0)
				uid = json_object_get(session, "uid");
		}
		if (uid == NULL)
			continue;
		json_object_set(op, "uid", uid);
		name = status_web_name((uid_t)json_integer_value(uid));
		json_object_set_new(op, "user", name != NULL ?
		    json_string(name) : json_null());
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
	struct status_viewer	 viewer = { status_web_viewer_allows, NULL };
	json_t			*full, *s;
	size_t			 hidden;

	status_web_check_users();
	full = status_build(0);
	json_object_set_new(full, "failures",
	    metrics_failures(status_web_every_uid));
	s = status_view(full, &status_view_web, &viewer, &hidden);
	json_decref(full);
	status_web_name_operations(s);
	/* A pool is named by the user its workers run as, as ember status
	 * names it: root's jobs run as workers.root_user. */
	status_web_name_all(json_object_get(s, "pools"), "uid");
	status_web_name_all(json_object_get(s, "failures"), "uid");
	json_object_set_new(s, "operations_hidden",
	    json_integer((json_int_t)hidden));
	json_object_set_new(s, "shown_users", status_web_users_json());
	return (s);
}
