"""The documents that must change with the code: every key of emberd's
conf table (common/conf.c, as emberd --dump-conf prints it) is in
conf/ember.conf and in ember.conf(5), with the same default, and each
entry of the man page says whether SIGHUP changes it."""

import glob
import os
import re
import subprocess

from harness import *

MAN = os.path.join(SRCDIR, "man", "ember.conf.5")


def dump(args):
    """emberd --dump-conf's keys: {"section.key": value}, in order."""
    r = run_emberd(["--dump-conf"] + args, conf="/dev/null")
    check_eq(r.returncode, 0, "emberd --dump-conf %s (stderr %r)" %
             (" ".join(args), r.stderr))
    keys, section = {}, None
    for line in r.stdout.splitlines():
        m = re.match(r"^\[(\w+)\]$", line)
        if m:
            section = m.group(1)
            continue
        m = re.match(r"^(\w+) = ?(.*?)(?: ; .*)?$", line)
        if m:
            keys["%s.%s" % (section, m.group(1))] = m.group(2)
    check(len(keys) > 40, "dump parsed: %d keys" % len(keys))
    return keys


def man_entries():
    """ember.conf(5)'s keys: {"section.key": (default, entry text)}."""
    entries, section, key = {}, None, None
    with open(MAN, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            m = re.match(r"^\.Sh (\w+) SECTION$", line)
            if m:
                section, key = m.group(1).lower(), None
                continue
            if line.startswith(".Sh "):
                section, key = None, None
                continue
            m = re.match(r"^\.It Cm (\w+) Li = (.*)$", line)
            if m and section is not None:
                key = "%s.%s" % (section, m.group(1))
                check(key not in entries, "%s twice in ember.conf(5)" % key)
                default = m.group(2)
                default = re.sub(r"^Pa ", "", default)
                default = re.sub(r" ?Pq .*$", "", default)
                default = re.sub(r"^Pq empty$", "", default)
                entries[key] = [default, ""]
                continue
            if line == ".El":
                key = None
            elif key is not None:
                entries[key][1] += line + "\n"
    return entries


@no_daemon
def test_every_key_is_in_the_man_page(_):
    defaults = dump([])
    entries = man_entries()
    for key in defaults:
        check(key in entries, "%s is not in ember.conf(5)" % key)
    for key in entries:
        check(key in defaults, "ember.conf(5) has %s, which emberd does "
              "not know" % key)
    for key, (default, text) in entries.items():
        check("SIGHUP:" in text or ".Em restart" in text,
              "ember.conf(5): %s does not say whether SIGHUP changes it"
              % key)
    # The defaults written in the page are emberd's: set to them, every
    # key dumps as it does by default.
    sets = []
    for key, (default, _) in entries.items():
        sets += ["--set", "%s=%s" % (key, default)]
    check_eq(dump(sets), defaults, "the man page's defaults")


@no_daemon
def test_every_key_is_in_the_shipped_conf(_):
    defaults = dump([])
    section, listed = None, set()
    with open(DEFAULT_CONF, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^\[(\w+)\]\s*$", line)
            if m:
                section = m.group(1)
            m = re.match(r"^(\w+)\s*=", line)
            if m:
                listed.add("%s.%s" % (section, m.group(1)))
    for key in defaults:
        check(key in listed, "%s is not in conf/ember.conf" % key)
    # And the shipped file changes nothing.
    r = run_emberd(["--dump-conf"], conf=DEFAULT_CONF)
    check_eq(r.returncode, 0, "dump with conf/ember.conf")
    with_conf = {}
    section = None
    for line in r.stdout.splitlines():
        m = re.match(r"^\[(\w+)\]$", line)
        if m:
            section = m.group(1)
        m = re.match(r"^(\w+) = ?(.*?)(?: ; .*)?$", line)
        if m:
            with_conf["%s.%s" % (section, m.group(1))] = m.group(2)
    check_eq(with_conf, defaults, "conf/ember.conf's values")


@no_daemon
def test_restart_only_keys_agree_with_sighup(_):
    # The keys the man page marks restart are those emberd keeps on
    # SIGHUP: its warning names them all.
    entries = man_entries()
    restart = sorted(k for k, (_, text) in entries.items()
                     if ".Em restart" in text)
    with open(os.path.join(SRCDIR, "daemon", "emberd.c"),
              encoding="utf-8") as f:
        src = f.read()
    m = re.search(r'log_warn\("SIGHUP: (.*?)change on', src, re.S)
    check(m is not None, "emberd.c's SIGHUP warning not found")
    names = re.sub(r'"\s*"', "", m.group(1))
    named = sorted("daemon." + n for n in
                   re.findall(r"(\w+)", names.replace("daemon.", ""))
                   if n != "and")
    check_eq(restart, named, "restart-only keys")


@no_daemon
def test_man_pages_render_without_warnings(_):
    pages = sorted(glob.glob(os.path.join(SRCDIR, "man", "*.[0-9]")))
    check(len(pages) >= 5, "man pages: %r" % pages)
    for page in pages:
        r = subprocess.run(["groff", "-mandoc", "-ww", "-z", "-Tutf8",
                            page], capture_output=True, text=True)
        check_eq((r.returncode, r.stderr), (0, ""),
                 "groff's warnings for %s" % os.path.basename(page))


@no_daemon
def test_readme_names_every_man_page(_):
    with open(os.path.join(SRCDIR, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    for page in glob.glob(os.path.join(SRCDIR, "man", "*.[0-9]")):
        name, section = os.path.basename(page).rsplit(".", 1)
        check("%s(%s)" % (name, section) in readme,
              "README.md does not name %s(%s)" % (name, section))


def includes(path):
    """The project headers a source file includes."""
    with open(os.path.join(SRCDIR, path), encoding="utf-8") as f:
        return set(re.findall(r'^#include "([\w.]+)"', f.read(), re.M))


# docs/design.md, "Modules": ownership points one way.  The operation
# (operation.c and the files split from it) makes tasks and hands them
# down; the modules below know tasks (task.h, and a task's ops), never
# operations; a worker's report goes up through task.c alone.
BELOW_THE_OPERATION = ["daemon/scheduler.c", "daemon/pool.c",
                       "daemon/worker.c", "daemon/spool.c",
                       "daemon/retry.c", "daemon/channel.c",
                       "daemon/fslink.c", "daemon/helper.c",
                       "daemon/cgroup.c", "daemon/limit.c"]


@no_daemon
def test_ownership_points_one_way(_):
    """No module below the operation includes operation.h or its private
    header: what the scheduler, a pool or a worker needs of a task's
    operation it asks through the task's ops."""
    for path in BELOW_THE_OPERATION:
        up = includes(path) & {"operation.h", "operation_private.h"}
        check(not up, "%s includes %s" % (path, ", ".join(sorted(up))))



SOURCE_DIRS = ["daemon", "worker", "common", "client"]


def layout_blocks():
    """HACKING's layout: {"daemon": its paragraph's text, ...}."""
    with open(os.path.join(SRCDIR, "HACKING"), encoding="utf-8") as f:
        text = f.read()
    text = text[text.index("\nLayout\n"):text.index("\nCode style\n")]
    blocks, name = {}, None
    for line in text.splitlines():
        m = re.match(r"^\t(\w+)/\t", line)
        if m:
            name = m.group(1)
            blocks[name] = ""
        elif not line.startswith("\t"):
            name = None
        if name is not None:
            blocks[name] += line + "\n"
    return blocks


def built(path):
    """Is path made by the build (Makefile.am's BUILT_SOURCES)?"""
    with open(os.path.join(SRCDIR, "Makefile.am"), encoding="utf-8") as f:
        return re.search(r"^BUILT_SOURCES \+?= %s$" % re.escape(path),
                         f.read(), re.M) is not None


@no_daemon
def test_hacking_lists_every_source_file(_):
    """HACKING's layout names every file of the source directories, in
    its directory's paragraph: each .c, each header with no .c of its
    own, and what is built into them (a page, a script, a symbol list);
    a module's header goes with its .c."""
    blocks = layout_blocks()
    missing = []
    for d in SOURCE_DIRS:
        check(d in blocks, "HACKING's layout has no %s/" % d)
        names = sorted(os.listdir(os.path.join(SRCDIR, d)))
        for name in names:
            path = "%s/%s" % (d, name)
            if not re.search(r"\.(c|h|py|html|syms|pc\.in)$", name) or \
                    built(path):
                continue
            if name.endswith(".h") and name[:-2] + ".c" in names:
                continue
            if not re.search(r"(?<![\w.])%s(?!\w)" % re.escape(name),
                             blocks[d]):
                missing.append(path)
    check(not missing, "not in HACKING's layout: %s" % ", ".join(missing))



@no_daemon
def test_design_lists_every_task_state(_):
    """docs/design.md's row for task.c names every state of task.h's
    enum task_state, and every row of design.md sits in a table (a
    header and its |---| line above it, no blank line between)."""
    with open(os.path.join(SRCDIR, "daemon", "task.h"),
              encoding="utf-8") as f:
        states = re.findall(r"^\tTASK_(\w+),", f.read(), re.M)
    check(len(states) >= 6, "task states parsed: %r" % states)
    with open(os.path.join(SRCDIR, "docs", "design.md"),
              encoding="utf-8") as f:
        lines = f.read().splitlines()
    row = [l for l in lines if l.startswith("| `task.c` |")]
    check_eq(len(row), 1, "design.md rows for task.c")
    for state in states:
        check(re.search(r"\b%s\b" % state.lower(), row[0]),
              "design.md's task.c row lacks %s" % state.lower())
    for i, line in enumerate(lines):
        if not line.startswith("|"):
            continue
        top = i
        while top > 0 and lines[top - 1].startswith("|"):
            top -= 1
        check(top + 1 < len(lines) and
              re.match(r"^\|(\s*:?-+:?\s*\|)+$", lines[top + 1]),
              "design.md line %d: a row outside a table" % (i + 1))


if __name__ == "__main__":
    run_tests(globals())
