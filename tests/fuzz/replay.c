/*
 * Run a fuzzing target once on each file of its corpus, without libFuzzer:
 * the seeds, and every input that once crashed a target, stay tests of the
 * ordinary suite.  The corpus is $EMBER_SRCDIR/tests/fuzz/NAME (NAME from
 * FUZZ_CORPUS), or the files and directories given as arguments.
 */
#include <sys/stat.h>

#include <dirent.h>
#include <err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

static int	replay_count;

/* Run the target on one file's bytes. */
static void
replay_file(const char *path)
{
	FILE		*f;
	unsigned char	*buf = NULL;
	size_t		 len = 0, n;
	unsigned char	 chunk[65536];

	if ((f = fopen(path, "rb")) == NULL)
		err(1, "%s", path);
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
		if ((buf = realloc(buf, len + n)) == NULL)
			err(1, "realloc");
		memcpy(buf + len, chunk, n);
		len += n;
	}
	if (ferror(f))
		err(1, "%s", path);
	fclose(f);
	/* Like libFuzzer, hand over a buffer of exactly len bytes. */
	LLVMFuzzerTestOneInput(len > 0 ? buf : (const unsigned char *)"", len);
	free(buf);
	replay_count++;
}

/* Run the target on a file, or on every file of a directory. */
static void
replay_path(const char *path)
{
	struct dirent	**names;
	struct stat	  st;
	char		 *sub;
	int		  n, i;

	if (stat(path, &st) == -1)
		err(1, "%s", path);
	if (!S_ISDIR(st.st_mode)) {
		replay_file(path);
		return;
	}
	if ((n = scandir(path, &names, NULL, alphasort)) == -1)
		err(1, "%s", path);
	for (i = 0; i < n; i++) {
		if (names[i]->d_name[0] != '.') {
			if (asprintf(&sub, "%s/%s", path,
			    names[i]->d_name) == -1)
				err(1, "asprintf");
			replay_path(sub);
			free(sub);
		}
		free(names[i]);
	}
	free(names);
}

int
main(int argc, char **argv)
{
	const char	*srcdir;
	char		*dir;
	int		 i;

	if (argc > 1) {
		for (i = 1; i < argc; i++)
			replay_path(argv[i]);
	} else {
		if ((srcdir = getenv("EMBER_SRCDIR")) == NULL)
			srcdir = ".";
		if (asprintf(&dir, "%s/tests/fuzz/%s", srcdir,
		    FUZZ_CORPUS) == -1)
			err(1, "asprintf");
		replay_path(dir);
		free(dir);
	}
	if (replay_count == 0)
		errx(1, "no input found");
	printf("replayed %d inputs\n1 passed, 0 failed\n", replay_count);
	return (0);
}
