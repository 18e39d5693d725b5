/*
 * Tests for common/plugin.c: checking a plugin by reading it as ELF, on the
 * example plugin and on copies of it changed in one place.
 */
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gelf.h>
#include <libelf.h>

#include "plugin.h"
#include "suites.h"

static char	plugin_dir[64];		/* mkdtemp's */
static char	plugin_example[PATH_MAX];

/* Find the example plugin and make a directory for copies of it. */
static void
plugin_setup(void)
{
	const char	*builddir = getenv("EMBER_BUILDDIR");
	char		 path[PATH_MAX];

	snprintf(path, sizeof path, "%s/examples/udf_example.so",
	    builddir != NULL ? builddir : ".");
	ck_assert_msg(realpath(path, plugin_example) != NULL,
	    "%s: %s (make builds it)", path, strerror(errno));
	snprintf(plugin_dir, sizeof plugin_dir, "/tmp/check_plugin.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(plugin_dir));
}

/* Remove the copies. */
static void
plugin_teardown(void)
{
	char	cmd[PATH_MAX + 16];

	snprintf(cmd, sizeof cmd, "rm -rf '%s'", plugin_dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* A path inside the test's directory. */
static const char *
plugin_path(const char *name)
{
	static char	path[PATH_MAX];

	snprintf(path, sizeof path, "%s/%s", plugin_dir, name);
	return (path);
}

/* Write bytes to a file. */
static void
plugin_write(const char *path, const void *data, size_t len)
{
	int	fd;

	fd = open(path, O_WRONLY|O_CREAT|O_TRUNC, 0644);
	ck_assert_int_ne(fd, -1);
	ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
	close(fd);
}

/* Copy the example plugin to name; the copy's path. */
static const char *
plugin_copy(const char *name)
{
	static char	 copy[PATH_MAX];
	struct stat	 sb;
	char		*data;
	int		 fd;

	fd = open(plugin_example, O_RDONLY);
	ck_assert_int_ne(fd, -1);
	ck_assert_int_eq(fstat(fd, &sb), 0);
	data = malloc((size_t)sb.st_size);
	ck_assert_ptr_nonnull(data);
	ck_assert_int_eq(read(fd, data, (size_t)sb.st_size), sb.st_size);
	close(fd);
	snprintf(copy, sizeof copy, "%s", plugin_path(name));
	plugin_write(copy, data, (size_t)sb.st_size);
	free(data);
	return (copy);
}

/* The file offset of a dynamic symbol's bytes. */
static off_t
plugin_symbol_offset(const char *path, const char *symbol)
{
	Elf_Scn		*scn = NULL, *where;
	Elf_Data	*d;
	GElf_Shdr	 sh, wsh;
	GElf_Sym	 sym;
	Elf		*elf;
	off_t		 off = -1;
	size_t		 i;
	int		 fd;

	ck_assert_int_ne(elf_version(EV_CURRENT), EV_NONE);
	fd = open(path, O_RDONLY);
	ck_assert_int_ne(fd, -1);
	elf = elf_begin(fd, ELF_C_READ, NULL);
	ck_assert_ptr_nonnull(elf);
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		gelf_getshdr(scn, &sh);
		if (sh.sh_type != SHT_DYNSYM)
			continue;
		d = elf_getdata(scn, NULL);
		for (i = 0; i < sh.sh_size / sh.sh_entsize; i++) {
			gelf_getsym(d, (int)i, &sym);
			if (strcmp(elf_strptr(elf, sh.sh_link, sym.st_name),
			    symbol) != 0 || sym.st_shndx == SHN_UNDEF)
				continue;
			where = elf_getscn(elf, sym.st_shndx);
			gelf_getshdr(where, &wsh);
			off = (off_t)(wsh.sh_offset + sym.st_value -
			    wsh.sh_addr);
		}
	}
	elf_end(elf);
	close(fd);
	ck_assert_msg(off != -1, "no %s in %s", symbol, path);
	return (off);
}

/* Overwrite bytes of a file at an offset. */
static void
plugin_patch(const char *path, off_t off, const void *data, size_t len)
{
	int	fd;

	fd = open(path, O_WRONLY);
	ck_assert_int_ne(fd, -1);
	ck_assert_int_eq(pwrite(fd, data, len, off), (ssize_t)len);
	close(fd);
}

/* Check a plugin and expect rc and, unless NULL, the message want. */
static void
plugin_expect(const char *library, const char *symbol, int rc,
    const char *want)
{
	char	*err = NULL;
	int	 got;

	got = plugin_check(library, symbol, NULL, &err);
	ck_assert_msg(got == rc, "%s %s: got %d (%s), want %d", library,
	    symbol, got, err != NULL ? err : "no error", rc);
	if (rc == 0)
		ck_assert_ptr_null(err);
	else {
		ck_assert_ptr_nonnull(err);
		if (want != NULL)
			ck_assert_msg(strcmp(err, want) == 0,
			    "\n  got  %s\n  want %s", err, want);
	}
	free(err);
}

START_TEST(test_plugin_example)
{
	char	want[PATH_MAX + 64];

	plugin_expect(plugin_example, "udf_wordlen", 0, NULL);
	plugin_expect(plugin_example, "udf_in_broadcast", 0, NULL);
	snprintf(want, sizeof want, "no function \"udf_nothere\" in %s",
	    plugin_example);
	plugin_expect(plugin_example, "udf_nothere", PLUGIN_BAD_SYMBOL, want);
	/* Data, not a function. */
	snprintf(want, sizeof want, "no function \"ember_udf_abi_version\" "
	    "in %s", plugin_example);
	plugin_expect(plugin_example, "ember_udf_abi_version",
	    PLUGIN_BAD_SYMBOL, want);
	/* Undefined in the plugin: ember's own, not the plugin's. */
	plugin_expect(plugin_example, "ember_udf_next", PLUGIN_BAD_SYMBOL,
	    NULL);
}
END_TEST

START_TEST(test_plugin_deterministic_mark)
{
	char	*err = NULL;
	int	 det = -1;

	ck_assert_int_eq(plugin_check(plugin_example, "udf_wordlen", &det,
	    &err), 0);
	ck_assert_int_eq(det, 1);
	det = -1;
	ck_assert_int_eq(plugin_check(plugin_example, "udf_fail", &det, &err),
	    0);
	ck_assert_int_eq(det, 0);
	ck_assert_ptr_null(err);
}
END_TEST

START_TEST(test_plugin_not_a_file)
{
	char	want[PATH_MAX + 64];

	plugin_expect("udf_example.so", "udf_wordlen", PLUGIN_BAD_LIBRARY,
	    "udf_example.so: not an absolute path");
	plugin_expect(plugin_path("nothere.so"), "f", PLUGIN_BAD_LIBRARY,
	    NULL);
	snprintf(want, sizeof want, "%s: No such file or directory",
	    plugin_path("nothere.so"));
	plugin_expect(plugin_path("nothere.so"), "f", PLUGIN_BAD_LIBRARY,
	    want);
	snprintf(want, sizeof want, "%s: not a regular file", plugin_dir);
	plugin_expect(plugin_dir, "f", PLUGIN_BAD_LIBRARY, want);
}
END_TEST

START_TEST(test_plugin_not_elf)
{
	static const char	 text[] = "#!/bin/sh\necho not a plugin\n";
	static const char	 elfish[] = "\177ELF\2\1\1";
	char			 want[PATH_MAX + 64];
	const char		*path;

	path = plugin_path("text.so");
	plugin_write(path, text, sizeof text - 1);
	snprintf(want, sizeof want, "%s: not an ELF shared object", path);
	plugin_expect(path, "f", PLUGIN_BAD_LIBRARY, want);

	path = plugin_path("empty.so");
	plugin_write(path, "", 0);
	snprintf(want, sizeof want, "%s: not an ELF shared object", path);
	plugin_expect(path, "f", PLUGIN_BAD_LIBRARY, want);

	path = plugin_path("short.so");
	plugin_write(path, elfish, sizeof elfish - 1);
	snprintf(want, sizeof want, "%s: not an ELF shared object", path);
	plugin_expect(path, "f", PLUGIN_BAD_LIBRARY, want);
}
END_TEST

START_TEST(test_plugin_other_abi)
{
	const char	*path;
	char		 want[PATH_MAX + 64];
	int		 version = 7;

	path = plugin_copy("future.so");
	plugin_patch(path, plugin_symbol_offset(path,
	    "ember_udf_abi_version"), &version, sizeof version);
	snprintf(want, sizeof want, "%s: built for ember UDF ABI 7, this "
	    "ember speaks 1", path);
	plugin_expect(path, "udf_wordlen", PLUGIN_BAD_LIBRARY, want);
}
END_TEST

START_TEST(test_plugin_other_machine)
{
	const char		*path;
	static const unsigned char machine[2] = { 0x34, 0x12 };

	/* e_machine is at the same offset in both ELF classes. */
	path = plugin_copy("alien.so");
	plugin_patch(path, 18, machine, sizeof machine);
	plugin_expect(path, "udf_wordlen", PLUGIN_BAD_LIBRARY, NULL);
}
END_TEST

START_TEST(test_plugin_not_a_plugin)
{
	char	*err = NULL;

	/* This program: an executable, or a PIE without the version. */
	ck_assert_int_eq(plugin_check("/proc/self/exe", "main", NULL, &err),
	    PLUGIN_BAD_LIBRARY);
	ck_assert_ptr_nonnull(err);
	free(err);
}
END_TEST

/* The suite. */
Suite *
plugin_suite(void)
{
	Suite	*s = suite_create("plugin");
	TCase	*tc;

	tc = tcase_create("check");
	tcase_add_checked_fixture(tc, plugin_setup, plugin_teardown);
	tcase_add_test(tc, test_plugin_deterministic_mark);
	tcase_add_test(tc, test_plugin_example);
	tcase_add_test(tc, test_plugin_not_a_file);
	tcase_add_test(tc, test_plugin_not_elf);
	tcase_add_test(tc, test_plugin_other_abi);
	tcase_add_test(tc, test_plugin_other_machine);
	tcase_add_test(tc, test_plugin_not_a_plugin);
	suite_add_tcase(s, tc);
	return (s);
}
