#include <stdio.h>
#include <stdlib.h>

#include "request.h"
#include "xmalloc.h"

json_t *
request_parse(const void *data, size_t len, char **err)
{
	json_error_t	 jerr;
	json_t		*req;

	req = json_loadb(data, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL,
	    &jerr);
	if (req == NULL) {
		xasprintf(err, "not JSON: %s (at byte %d)", jerr.text,
		    jerr.position);
		return (NULL);
	}
	if (!json_is_object(req) ||
	    !json_is_string(json_object_get(req, "op"))) {
		*err = xstrdup("a request is a JSON object with a string "
		    "\"op\"");
		json_decref(req);
		return (NULL);
	}
	return (req);
}
