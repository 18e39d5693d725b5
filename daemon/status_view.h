/*
 * A viewer's view of emberd's status, built from what that viewer may
 * see.  The full status (status.c's, as root sees it) is data; a table of
 * rules says which fields of which records a viewer is shown, and the view
 * copies those alone.  A field no rule names is never shown: a field added
 * to the status, a uid or anything else, stays out of every view until a
 * rule lets it in.  It needs nothing of the daemon, so that tests call it
 * alone.
 */
#ifndef EMBER_STATUS_VIEW_H
#define EMBER_STATUS_VIEW_H

#include <sys/types.h>

#include <stddef.h>

#include <jansson.h>

/* Who looks: the uids whose own records (sessions, operations,
 * broadcasts, checkpoints, limits, failures) the viewer is shown. */
struct status_viewer {
	int		(*allows)(uid_t, void *);
	void		*arg;
};

/* How a field is shown. */
enum view_rule {
	VIEW_ANY,		/* to whoever is shown its record */
	VIEW_TREE,		/* the same, a subtree that holds no owner (a
				   map of counters by name), copied whole */
	VIEW_OPERATION,		/* an operation's id: shown only if that
				   operation is */
	VIEW_OBJECT,		/* an object, copied by its kind's rules */
	VIEW_RECORDS,		/* an array of records, each by its kind's */
};

/* Whose a record is: a record of an owner not allowed is left out. */
enum view_owner {
	VIEW_PUBLIC,		/* emberd's: shown to every viewer */
	VIEW_UID,		/* its "uid"'s */
	VIEW_SESSION,		/* its "session"'s: a session shown */
};

struct view_kind;
struct view_field {
	const char		*name;
	enum view_rule		 rule;
	const struct view_kind	*kind;	/* VIEW_OBJECT, VIEW_RECORDS */
};
/* What the view remembers of a record it shows, for the records after. */
enum view_remember {
	VIEW_FORGET,
	VIEW_SESSIONS,		/* its id is a session shown */
	VIEW_OPERATIONS,	/* its id is an operation shown */
};
struct view_kind {
	enum view_owner		 owner;
	enum view_remember	 remember;
	const struct view_field	*fields;	/* ends with a NULL name */
};

/* The status listener's rules (status.users): the records of the users it
 * shows, and emberd's own (workers, pools, counters). */
extern const struct view_kind status_view_web;

/*
 * Build viewer's view of full (an object) by the rules of kind: only the
 * fields a rule allows, only the records of owners the viewer is allowed.
 * A rule's array must come after the records it refers to (sessions
 * before operations, operations before workers).  *hidden (may be NULL):
 * the operations left out.
 */
json_t	*status_view(json_t *full, const struct view_kind *kind,
	     const struct status_viewer *viewer, size_t *hidden);

#endif
