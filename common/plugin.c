#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gelf.h>
#include <libelf.h>

#include "ember/udf.h"
#include "plugin.h"
#include "xmalloc.h"

#define PLUGIN_ABI_SYMBOL	"ember_udf_abi_version"
/* EMBER_UDF_DETERMINISTIC(fn) defines this prefix followed by fn. */
#define PLUGIN_DETERMINISTIC_PREFIX "ember_udf_deterministic_"

/* Keep in step with include/ember/udf.h and worker/udf.syms. */
const char *const plugin_udf_functions[] = {
	"ember_udf_next",
	"ember_udf_emit",
	"ember_udf_args",
	"ember_udf_arg_string",
	"ember_udf_arg_int",
	"ember_udf_broadcast",
	"ember_udf_error",
	"ember_udf_partition",
	NULL
};

/* What the symbol table told about a plugin. */
struct plugin_syms {
	int		 found_symbol;
	int		 found_abi;
	int		 deterministic;	/* its marker is there */
	GElf_Sym	 abi;
	const char	*missing;	/* an ember_udf_ function we lack */
};

/* The ELF class, data encoding and machine of this program, once. */
static int
plugin_host(unsigned char *class, unsigned char *data, GElf_Half *machine)
{
	static int		 done, known;
	static unsigned char	 hclass, hdata;
	static GElf_Half	 hmachine;
	GElf_Ehdr		 eh;
	Elf			*elf;
	int			 fd;

	if (!done) {
		done = 1;
		if ((fd = open("/proc/self/exe",
		    O_RDONLY|O_CLOEXEC|O_NOCTTY)) != -1) {
			elf = elf_begin(fd, ELF_C_READ, NULL);
			if (elf != NULL && gelf_getehdr(elf, &eh) != NULL) {
				hclass = eh.e_ident[EI_CLASS];
				hdata = eh.e_ident[EI_DATA];
				hmachine = eh.e_machine;
				known = 1;
			}
			elf_end(elf);
			close(fd);
		}
	}
	*class = hclass;
	*data = hdata;
	*machine = hmachine;
	return (known ? 0 : -1);
}

/* Is name one of the ember_udf_ functions we provide? */
static int
plugin_provided(const char *name)
{
	size_t	i;

	for (i = 0; plugin_udf_functions[i] != NULL; i++) {
		if (strcmp(plugin_udf_functions[i], name) == 0)
			return (1);
	}
	return (0);
}

/* Walk the dynamic symbol table: 0, or -1 if there is none. */
static int
plugin_scan(Elf *elf, const char *symbol, struct plugin_syms *ps)
{
	Elf_Scn		*scn = NULL;
	Elf_Data	*d;
	GElf_Shdr	 sh;
	GElf_Sym	 sym;
	const char	*name;
	size_t		 i, n;
	int		 type, bind, found = 0;

	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		if (gelf_getshdr(scn, &sh) == NULL || sh.sh_type != SHT_DYNSYM)
			continue;
		if (sh.sh_entsize == 0 || (d = elf_getdata(scn, NULL)) == NULL)
			continue;
		found = 1;
		n = sh.sh_size / sh.sh_entsize;
		for (i = 1; i < n; i++) {
			if (gelf_getsym(d, (int)i, &sym) == NULL)
				break;
			name = elf_strptr(elf, sh.sh_link, sym.st_name);
			if (name == NULL)
				continue;
			type = GELF_ST_TYPE(sym.st_info);
			bind = GELF_ST_BIND(sym.st_info);
			if (sym.st_shndx == SHN_UNDEF) {
				/* A weak reference may stay unresolved. */
				if (bind == STB_GLOBAL && ps->missing == NULL &&
				    strncmp(name, "ember_udf_", 10) == 0 &&
				    !plugin_provided(name))
					ps->missing = name;
				continue;
			}
			if (bind != STB_GLOBAL && bind != STB_WEAK)
				continue;
			if ((type == STT_FUNC || type == STT_GNU_IFUNC) &&
			    strcmp(name, symbol) == 0)
				ps->found_symbol = 1;
			if (type == STT_OBJECT &&
			    strncmp(name, PLUGIN_DETERMINISTIC_PREFIX,
			    strlen(PLUGIN_DETERMINISTIC_PREFIX)) == 0 &&
			    strcmp(name + strlen(PLUGIN_DETERMINISTIC_PREFIX),
			    symbol) == 0)
				ps->deterministic = 1;
			if (type == STT_OBJECT &&
			    strcmp(name, PLUGIN_ABI_SYMBOL) == 0) {
				ps->found_abi = 1;
				ps->abi = sym;
			}
		}
	}
	return (found ? 0 : -1);
}

/* Read the int a symbol names from its section: 0, or -1. */
static int
plugin_read_int(Elf *elf, const GElf_Sym *sym, int *value)
{
	Elf_Scn		*scn;
	Elf_Data	*d = NULL;
	GElf_Shdr	 sh;
	uint64_t	 off;

	if (sym->st_size != sizeof *value || sym->st_shndx >= SHN_LORESERVE)
		return (-1);
	if ((scn = elf_getscn(elf, sym->st_shndx)) == NULL ||
	    gelf_getshdr(scn, &sh) == NULL || sym->st_value < sh.sh_addr)
		return (-1);
	off = sym->st_value - sh.sh_addr;
	if (sh.sh_type == SHT_NOBITS) {
		*value = 0;	/* in .bss */
		return (0);
	}
	/* The byte order was checked: the bytes are as the loader sees them. */
	while ((d = elf_rawdata(scn, d)) != NULL) {
		if (d->d_buf == NULL || off < (uint64_t)d->d_off ||
		    off - (uint64_t)d->d_off > d->d_size ||
		    d->d_size - (off - (uint64_t)d->d_off) < sizeof *value)
			continue;
		memcpy(value, (char *)d->d_buf + (off - (uint64_t)d->d_off),
		    sizeof *value);
		return (0);
	}
	return (-1);
}

/* Check an open ELF file; 0 or an error as plugin_check. */
static int
plugin_check_elf(Elf *elf, const char *library, const char *symbol,
    int *deterministic, char **err)
{
	struct plugin_syms	 ps;
	GElf_Ehdr		 eh;
	GElf_Half		 machine;
	unsigned char		 class, data;
	int			 version;

	if (elf_kind(elf) != ELF_K_ELF || gelf_getehdr(elf, &eh) == NULL ||
	    eh.e_type != ET_DYN)
		goto not_shared;
	if (plugin_host(&class, &data, &machine) == 0) {
		if (eh.e_ident[EI_CLASS] != class ||
		    eh.e_ident[EI_DATA] != data || eh.e_machine != machine) {
			xasprintf(err, "%s: built for another machine (ELF "
			    "class %u, machine %u; this ember is class %u, "
			    "machine %u)", library, eh.e_ident[EI_CLASS],
			    eh.e_machine, class, machine);
			return (PLUGIN_BAD_LIBRARY);
		}
	}

	memset(&ps, 0, sizeof ps);
	if (plugin_scan(elf, symbol, &ps) == -1)
		goto not_shared;
	if (!ps.found_abi) {
		xasprintf(err, "%s: no %s (not an ember plugin?)", library,
		    PLUGIN_ABI_SYMBOL);
		return (PLUGIN_BAD_LIBRARY);
	}
	if (plugin_read_int(elf, &ps.abi, &version) == -1) {
		xasprintf(err, "%s: %s is not an int", library,
		    PLUGIN_ABI_SYMBOL);
		return (PLUGIN_BAD_LIBRARY);
	}
	if (version != EMBER_UDF_ABI_VERSION) {
		xasprintf(err, "%s: built for ember UDF ABI %d, this ember "
		    "speaks %d", library, version, EMBER_UDF_ABI_VERSION);
		return (PLUGIN_BAD_LIBRARY);
	}
	if (ps.missing != NULL) {
		xasprintf(err, "%s: needs %s, which this ember lacks (built "
		    "for a newer one?)", library, ps.missing);
		return (PLUGIN_BAD_LIBRARY);
	}
	if (!ps.found_symbol) {
		xasprintf(err, "no function \"%s\" in %s", symbol, library);
		return (PLUGIN_BAD_SYMBOL);
	}
	if (deterministic != NULL)
		*deterministic = ps.deterministic;
	return (0);

not_shared:
	xasprintf(err, "%s: not an ELF shared object", library);
	return (PLUGIN_BAD_LIBRARY);
}

/* Check a plugin without loading it. */
int
plugin_check(const char *library, const char *symbol, int *deterministic,
    char **err)
{
	struct stat	 sb;
	Elf		*elf;
	int		 fd, rc;

	*err = NULL;
	if (*library != '/') {
		xasprintf(err, "%s: not an absolute path", library);
		return (PLUGIN_BAD_LIBRARY);
	}
	/* O_NONBLOCK: a FIFO must not hang the daemon. */
	if ((fd = open(library,
	    O_RDONLY|O_CLOEXEC|O_NONBLOCK|O_NOCTTY)) == -1) {
		xasprintf(err, "%s: %s", library, strerror(errno));
		return (PLUGIN_BAD_LIBRARY);
	}
	if (fstat(fd, &sb) == -1 || !S_ISREG(sb.st_mode)) {
		close(fd);
		xasprintf(err, "%s: not a regular file", library);
		return (PLUGIN_BAD_LIBRARY);
	}

	if (elf_version(EV_CURRENT) == EV_NONE) {
		close(fd);
		xasprintf(err, "%s: libelf: %s", library, elf_errmsg(-1));
		return (PLUGIN_BAD_LIBRARY);
	}
	if ((elf = elf_begin(fd, ELF_C_READ, NULL)) == NULL) {
		close(fd);
		xasprintf(err, "%s: not an ELF shared object", library);
		return (PLUGIN_BAD_LIBRARY);
	}
	rc = plugin_check_elf(elf, library, symbol, deterministic, err);
	elf_end(elf);
	close(fd);
	return (rc);
}
