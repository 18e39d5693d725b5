"""libember as a program outside the tree uses it: installed with make
install (DESTDIR), the example of libember(3) compiled with nothing but
the pkg-config line, and run against a test emberd."""

import glob
import json
import os
import re
import shutil
import subprocess

from harness import *

MAN = os.path.join(SRCDIR, "man", "libember.3")

# What the example prints: its records (NULs as \0), their counts sorted
# by bytes, the nulls, one lookup and a sum.
WANT = """to
be
or
not
to
be
a\\0b
(null)
1\ta\\0b
2\tbe
1\tnot
1\tor
2\tto
1\tnull
"to" 2 times
sum 5050 of 101 records
"""


def example_source():
    """The C program in libember(3)'s EXAMPLES, roff escapes undone."""
    with open(MAN, encoding="utf-8") as f:
        page = f.read()
    m = re.search(r"\n\.Sh EXAMPLES\n.*?\n\.Bd -literal\n(.*?)\n\.Ed\n", page,
                  re.S)
    check(m is not None, "no example in libember(3)")
    lines = []
    for line in m.group(1).split("\n"):
        if line.startswith("\\&"):
            line = line[2:]
        check(not line.startswith("."), "a request in the example: %r" % line)
        lines.append(line.replace("\\e", "\\"))
    return "\n".join(lines) + "\n"


def test_example_builds_with_pkg_config(d):
    if shutil.which("cc") is None or shutil.which("pkg-config") is None:
        print("SKIP: no cc or pkg-config here")
        return
    dest = os.path.join(d.tmpdir, "dest")
    r = subprocess.run(["make", "-s", "-C", BUILDDIR, "DESTDIR=" + dest,
                        "install-libLTLIBRARIES", "install-includeHEADERS",
                        "install-pkgconfigDATA"],
                       capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL)
    check_eq(r.returncode, 0, "make install (stderr %r)" % r.stderr[-2000:])
    pcs = glob.glob(os.path.join(dest, "**", "pkgconfig", "ember.pc"),
                    recursive=True)
    check_eq(len(pcs), 1, "ember.pc installed under %s" % dest)
    libs = glob.glob(os.path.join(dest, "**", "libember.so*"),
                     recursive=True)
    check(libs, "libember.so installed")
    check(glob.glob(os.path.join(dest, "**", "libember.a"), recursive=True),
          "libember.a installed")
    headers = glob.glob(os.path.join(dest, "**", "include", "ember.h"),
                        recursive=True)
    check_eq(len(headers), 1, "ember.h installed")

    src = os.path.join(d.tmpdir, "ex.c")
    write_file(src, example_source())
    # The installed ember.pc names the real prefix; the sysroot puts the
    # DESTDIR in front of its -I and -L, as for a staged install.
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.dirname(pcs[0]),
               PKG_CONFIG_SYSROOT_DIR=dest)
    # A sanitized build's library needs the sanitizers' runtimes.
    extra = " ".join("-fsanitize=" + s for s in sorted(build_sanitizers()))
    exe = os.path.join(d.tmpdir, "ex")
    r = subprocess.run("cc -Wall -Wextra -Werror -o %s %s %s "
                       "$(pkg-config --cflags --libs ember)" %
                       (exe, src, extra), shell=True, env=env,
                       capture_output=True, text=True, timeout=120,
                       cwd=d.tmpdir, stdin=subprocess.DEVNULL)
    check_eq(r.returncode, 0, "cc (stderr %r)" % r.stderr)

    env = dict(os.environ, EMBER_SOCKET=d.socket,
               LD_LIBRARY_PATH=os.path.dirname(libs[0]))
    r = subprocess.run([exe], env=env, capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    check_eq(r.returncode, 0, "the example's exit status (stderr %r)"
             % r.stderr)
    check_eq(r.stdout, WANT, "the example's output")
    # It ran against the installed library, not one of the build tree.
    r = subprocess.run(["ldd", exe], env=env, capture_output=True,
                       text=True, timeout=30)
    check(dest in r.stdout, "ldd: %r" % r.stdout)


COUNTS_REQUEST = os.path.join(BUILDDIR, "tests", "integration",
                              "counts_request")


def counts_request(d, order, request):
    # Bound at once: a lazy binding's resolver would wipe the stack that
    # counts_request fills with garbage before its call.
    r = subprocess.run([COUNTS_REQUEST, d.socket, str(order),
                        request if isinstance(request, str) else
                        json.dumps(request)], capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL,
                       env=dict(os.environ, LD_BIND_NOW="1"))
    check_eq(r.returncode, 0, "counts_request (stderr %r)" % r.stderr)
    return r.stdout.splitlines()


def test_request_counts_takes_count_by_value_alone(d):
    """ember_request_counts reads a count_by_value in the order asked;
    another request, or another order, is refused before it is sent: an
    iterate would leave the connection in its stream, a save would
    write its files."""
    plan = records_plan(["to", "be", "or", "not", "to", "be", "to"], 2)
    check_eq(counts_request(d, 1, {"op": "execute", "plan": plan,
                                   "action": "count_by_value"}),
             ["3 to", "2 be", "1 not", "1 or", "status ok"], "by count")
    check_eq(counts_request(d, 0, {"op": "execute", "plan": plan,
                                   "action": "count_by_value"}),
             ["2 be", "1 not", "1 or", "3 to", "status ok"], "by record")
    check_eq(counts_request(d, 0, {"op": "execute", "plan": plan,
                                   "action": "iterate"}),
             ["error ACTION_INVALID", "status ok"], "an iterate")
    check_eq(counts_request(d, 0, {"op": "status"}),
             ["error ACTION_INVALID", "status ok"], "a status")
    check_eq(counts_request(d, 7, {"op": "execute", "plan": plan,
                                   "action": "count_by_value"}),
             ["error REQUEST_INVALID", "status ok"], "order 7")


def test_count_of_a_bad_plan_fails_cleanly(d):
    """ember_count of a plan that is not JSON, and of one emberd refuses,
    fails with the error's class and leaves the connection usable."""
    plan = range_plan(0, 10, 2)
    check_eq(counts_request(d, "count", "{not json"),
             ["error PLAN_INVALID", "status ok"], "a plan not JSON")
    check_eq(counts_request(d, "count", {"source": {"nothing": {}}}),
             ["error PLAN_INVALID", "status ok"], "a plan refused")
    check_eq(counts_request(d, "count", plan), ["count 10", "status ok"],
             "a good plan")

PLAN_AGAIN = os.path.join(BUILDDIR, "tests", "integration", "plan_again")


def plan_again(d, plan, *dirs):
    """plan_again's lines: in each of dirs, the plan counted by
    ember_count, by ember_execute's count and by a collect."""
    r = subprocess.run([PLAN_AGAIN, d.socket, json.dumps(plan)] + list(dirs),
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, "plan_again failed: %s" % r.stderr)
    return [tuple(int(x) for x in line.split())
            for line in r.stdout.splitlines()]


def test_kept_plan_follows_the_working_directory(d):
    """libember sends the plan it sent last without parsing it again,
    but a relative path is made absolute against the directory the
    client stands in at each execute, and a kept plan opens a collect's
    stream as a new one does."""
    dirs = []
    for name, n in (("one", 3), ("two", 5)):
        path = os.path.join(d.tmpdir, name)
        os.mkdir(path)
        os.chmod(path, 0o755)
        with open(os.path.join(path, "a.txt"), "w") as f:
            f.write("".join("line %d\n" % i for i in range(n)))
        os.chmod(os.path.join(path, "a.txt"), 0o644)
        dirs.append(path)
    got = plan_again(d, {"source": {"text": {"paths": ["a.txt"]}},
                         "partitions": 2}, dirs[0], dirs[1], dirs[0])
    check(got == [(3, 3, 3), (5, 5, 5), (3, 3, 3)], "counts: %r" % (got,))
    # Nothing relative: the same request bytes whatever the directory.
    got = plan_again(d, {"source": {"range": {"start": 0, "end": 10}},
                         "partitions": 3, "ops": [{"filter": {
                             "contains": "\"7\\\n\t\u00e9"}}]},
                     dirs[0], dirs[1])
    check(got == [(0, 0, 0), (0, 0, 0)], "counts: %r" % (got,))
    got = plan_again(d, {"source": {"range": {"start": 0, "end": 10}},
                         "partitions": 3, "ops": [{"filter": {
                             "contains": "7"}}]}, dirs[0], dirs[1])
    check(got == [(1, 1, 1), (1, 1, 1)], "counts: %r" % (got,))


if __name__ == "__main__":
    run_tests(globals())
