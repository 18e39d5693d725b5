"""UDF plugins (docs/udf.md): each function of examples/udf_example.so end
to end, the plans emberd refuses before any task runs, failures, and one
worker keeping a plugin loaded across tasks."""

import json
import os
import shutil
import subprocess
import struct

from harness import *

PLUGIN = job_readable(os.path.join(BUILDDIR, "examples", "udf_example.so"))
INCLUDE = os.path.join(SRCDIR, "include")


def udf(symbol, args=None, library=PLUGIN, **extra):
    op = {"library": library, "symbol": symbol}
    if args is not None:
        op["args"] = args
    op.update(extra)
    return {"udf": op}


def cc():
    """A C compiler for building test plugins, or None."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


def build_plugin(d, name, source):
    """Compile source into NAME.so in the daemon's directory; its path, or
    None (printing why) when there is no compiler."""
    compiler = cc()
    if compiler is None:
        print("skip: no C compiler to build %s" % name)
        return None
    src = write_file(d.path(name + ".c"), source)
    out = d.path(name + ".so")
    r = subprocess.run([compiler, "-shared", "-fPIC", "-I" + INCLUDE, "-o",
                        out, src], capture_output=True, text=True,
                       timeout=60)
    check_eq(r.returncode, 0, "cc %s (stderr: %s)" % (name, r.stderr))
    return out


def refused(c, ops, field, *needles):
    """Execute a plan with ops; expect PLAN_INVALID naming field."""
    msg = check_error(c.execute(records_plan(["a"], 1, ops=ops), "collect"),
                      "PLAN_INVALID", *needles)
    check(msg.startswith(field + ":"), "message %r does not start with "
          "%r" % (msg, field + ":"))
    return msg


def lengths(records):
    return [None if r is None else str(len(r)).encode() for r in records]


def test_plugin_built(d):
    check(os.path.exists(PLUGIN), "%s is not built" % PLUGIN)


def test_wordlen(d):
    c = d.client()
    recs = ["a", "bb", "", None, "ccccc", "\u00e9t\u00e9"]
    want = [b"1", b"2", b"0", None, b"5", b"5"]
    check_eq(c.collect_all(records_plan(recs, 2, ops=[udf("udf_wordlen")])),
             want, "collect")
    check_eq(c.iterate_all(records_plan(recs, 4, ops=[udf("udf_wordlen")])),
             want, "iterate")
    check_eq(c.count(records_plan(recs, 3, ops=[udf("udf_wordlen")])), 6,
             "count")


def test_wordlen_many_records(d):
    """Enough records for many batches, in every partition."""
    c = d.client()
    got = c.collect_all(range_plan(0, 200000, 5, ops=[udf("udf_wordlen")]))
    check_eq(got, lengths(numbers(200000)), "lengths")
    check_eq(c.count(range_plan(0, 200000, 7, ops=[udf("udf_wordlen")])),
             200000, "count")


def test_empty_partitions(d):
    c = d.client()
    parts = c.collect_partitions(range_plan(0, 3, 8,
                                            ops=[udf("udf_wordlen")]))
    check_eq(len(parts), 8, "partitions")
    check_eq([r for p in parts for r in p], [b"1"] * 3, "records")


def test_large_records(d):
    """Records larger than a batch go to the function alone."""
    c = d.client()
    recs = ["x" * 100000, "y", "z" * 40000, None, "w" * 16385]
    check_eq(c.collect_all(records_plan(recs, 1, ops=[udf("udf_wordlen")])),
             lengths([None if r is None else r.encode() for r in recs]),
             "lengths")
    got = c.collect_all(records_plan(recs, 2,
                                     ops=[udf("udf_prefix", {"prefix": "<"})]))
    check_eq(got, [None if r is None else ("<" + r).encode() for r in recs],
             "prefixed")


def test_prefix(d):
    c = d.client()
    recs = ["one", None, "", "three"]
    ops = [udf("udf_prefix", {"prefix": "> "})]
    check_eq(c.collect_all(records_plan(recs, 2, ops=ops)),
             [b"> one", None, b"> ", b"> three"], "prefixed")
    # Escapes in args reach the function decoded.
    ops = [udf("udf_prefix", {"prefix": "\u00e9\"\\\n\t|"})]
    check_eq(c.collect_all(records_plan(["x"], 1, ops=ops)),
             ["\u00e9\"\\\n\t|x".encode()], "prefix with escapes")


def test_prefix_missing_arg(d):
    c = d.client()
    try:
        c.collect_all(records_plan(["x"], 1, ops=[udf("udf_prefix")]))
    except TaskFailed as e:
        check("udf udf_prefix: args.prefix: missing" in e.message,
              "message: %r" % e.message)
    else:
        raise AssertionError("udf_prefix without args succeeded")


def test_chained_udfs(d):
    """Two functions, each on its own stack, with ops between them."""
    c = d.client()
    ops = [udf("udf_prefix", {"prefix": "ab"}), {"map": "upper"},
           udf("udf_wordlen"), udf("udf_prefix", {"prefix": "n="})]
    check_eq(c.collect_all(range_plan(0, 5000, 3, ops=ops)),
             [("n=%d" % (len(str(i)) + 2)).encode() for i in range(5000)],
             "records")


def test_limit_after_udf(d):
    """A limit after the function stops it early."""
    c = d.client()
    ops = [udf("udf_prefix", {"prefix": "p"}), {"limit": 3}]
    parts = c.collect_partitions(range_plan(0, 100000, 2, ops=ops))
    check_eq(parts, [[b"p0", b"p1", b"p2"], [b"p50000", b"p50001",
                                             b"p50002"]], "partitions")
    ops = [{"limit": 2}, udf("udf_wordlen")]
    check_eq(c.collect_all(range_plan(100, 200, 1, ops=ops)), [b"3", b"3"],
             "limit before")


def test_udf_with_pipe(d):
    """The function's records go through a command's pipes from its own
    stack."""
    c = d.client()
    ops = [udf("udf_prefix", {"prefix": "r"}), {"pipe": {"command": "cat"}},
           udf("udf_wordlen")]
    check_eq(c.collect_all(range_plan(0, 3000, 2, ops=ops)),
             [str(len(str(i)) + 1).encode() for i in range(3000)], "records")


def test_fail(d):
    c = d.client()
    try:
        c.collect_all(records_plan(["first", "second"], 1,
                                   ops=[udf("udf_fail")]))
    except TaskFailed as e:
        check("udf udf_fail: deliberate failure" in e.message,
              "message: %r" % e.message)
        check(e.records in ([], [b"first"]), "records before the error: %r"
              % e.records)
    else:
        raise AssertionError("udf_fail succeeded")
    check_eq(c.count(range_plan(0, 10, 1)), 10, "a job after the failure")
    r = c.execute(range_plan(0, 10, 2, ops=[udf("udf_fail")]), "count")
    check_error(r, "TASK_FAILED", "deliberate failure")


def test_hog(d):
    c = d.client()
    ops = [udf("udf_hog", {"mb": 16})]
    check_eq(c.collect_all(range_plan(0, 1000, 2, ops=ops)), numbers(1000),
             "records")
    try:
        c.collect_all(range_plan(0, 10, 1, ops=[udf("udf_hog",
                                                    {"mb": "lots"})]))
    except TaskFailed as e:
        check("args.mb" in e.message, "message: %r" % e.message)
    else:
        raise AssertionError("udf_hog with a bad mb succeeded")


def test_in_broadcast(d):
    c = d.client()
    bid = c.broadcast_put(b"7\n42\n\n999\nnot a number\n")
    ops = [udf("udf_in_broadcast", {"broadcast": bid}, broadcasts=[bid])]
    want = [b"7", b"42", b"999"]
    check_eq(c.collect_all(range_plan(0, 2000, 4, ops=ops)), want,
             "records in the broadcast")
    # Again, on workers that hold it already.
    check_eq(c.collect_all(range_plan(0, 2000, 3, ops=ops)), want, "again")
    check_eq(c.collect_all(records_plan(["", "x", None, "42"], 2, ops=ops)),
             [b"", b"42"], "the empty line")


def test_refused_missing_library(d):
    c = d.client()
    refused(c, [udf("udf_wordlen", library=d.path("nothere.so"))],
            "plan.ops[0].udf.library", "No such file or directory")
    refused(c, [{"map": "upper"}, udf("udf_wordlen",
                                      library=d.path("nothere.so"))],
            "plan.ops[1].udf.library")


def test_refused_relative_library(d):
    c = d.client()
    refused(c, [udf("udf_wordlen", library="examples/udf_example.so")],
            "plan.ops[0].udf.library")


def test_refused_missing_symbol(d):
    c = d.client()
    refused(c, [udf("udf_nothere")], "plan.ops[0].udf.symbol",
            'no function "udf_nothere"')
    # A symbol that is data, not a function.
    refused(c, [udf("ember_udf_abi_version")], "plan.ops[0].udf.symbol")


def test_refused_not_elf(d):
    c = d.client()
    path = write_file(d.path("text.so"), "this is not a shared object\n")
    refused(c, [udf("udf_wordlen", library=path)], "plan.ops[0].udf.library",
            "not an ELF shared object")
    empty = write_file(d.path("empty.so"), "")
    refused(c, [udf("udf_wordlen", library=empty)],
            "plan.ops[0].udf.library", "not an ELF shared object")
    # An ELF file, but not a shared object: the object file of a plugin.
    compiler = cc()
    if compiler is None:
        print("skip: no C compiler for an ELF relocatable")
        return
    src = write_file(d.path("obj.c"), "int f(void) { return 1; }\n")
    obj = d.path("obj.o")
    subprocess.run([compiler, "-c", "-o", obj, src], check=True, timeout=60)
    refused(c, [udf("f", library=obj)], "plan.ops[0].udf.library",
            "not an ELF shared object")


def test_refused_directory(d):
    c = d.client()
    refused(c, [udf("udf_wordlen", library=d.tmpdir)],
            "plan.ops[0].udf.library")


def test_refused_not_a_plugin(d):
    c = d.client()
    path = build_plugin(d, "plain", "int udf_wordlen(void *ctx) "
                        "{ (void)ctx; return 0; }\n")
    if path is None:
        return
    refused(c, [udf("udf_wordlen", library=path)], "plan.ops[0].udf.library",
            "no ember_udf_abi_version (not an ember plugin?)")


def test_refused_other_abi(d):
    c = d.client()
    path = build_plugin(d, "future", """
#include <ember/udf.h>
__attribute__((visibility("default"))) const int ember_udf_abi_version = 7;
int udf_x(struct ember_udf *ctx) { (void)ctx; return 0; }
""")
    if path is None:
        return
    refused(c, [udf("udf_x", library=path)], "plan.ops[0].udf.library",
            "built for ember UDF ABI 7, this ember speaks 1")


def test_refused_newer_function(d):
    """A plugin that needs an ember_udf_ function this ember lacks."""
    c = d.client()
    path = build_plugin(d, "newer", """
#include <ember/udf.h>
EMBER_UDF_PLUGIN
int ember_udf_from_the_future(struct ember_udf *);
int udf_x(struct ember_udf *ctx) { return ember_udf_from_the_future(ctx); }
""")
    if path is None:
        return
    refused(c, [udf("udf_x", library=path)], "plan.ops[0].udf.library",
            "ember_udf_from_the_future")


def test_own_plugin(d):
    """A plugin built from the installed header alone, whose own function
    names must not bind to anything inside the worker."""
    c = d.client()
    path = build_plugin(d, "own", """
#include <stdio.h>
#include <ember/udf.h>
EMBER_UDF_PLUGIN
/* Names the worker has too: the plugin's own must be called. */
int fatal(int x) { return x + 1; }
int log_debug(int x) { return x * 2; }
int
udf_tag(struct ember_udf *ctx)
{
	const char *data, *args = ember_udf_args(ctx);
	size_t len;
	char buf[256];
	int n;

	while (ember_udf_next(ctx, &data, &len) == 1) {
		n = snprintf(buf, sizeof buf, "%d:%d:%s:%.*s",
		    ember_udf_partition(ctx), log_debug(fatal(1)), args,
		    (int)len, data);
		if (ember_udf_emit(ctx, buf, (size_t)n) == -1)
			break;
	}
	return 0;
}
int
udf_nomsg(struct ember_udf *ctx)
{
	(void)ctx;
	return -1;
}
""")
    if path is None:
        return
    ops = [udf("udf_tag", {"k": [1, {"a": None}]}, library=path)]
    parts = c.collect_partitions(range_plan(0, 4, 2, ops=ops))
    check_eq(parts, [[b'0:4:{"k":[1,{"a":null}]}:0',
                      b'0:4:{"k":[1,{"a":null}]}:1'],
                     [b'1:4:{"k":[1,{"a":null}]}:2',
                      b'1:4:{"k":[1,{"a":null}]}:3']], "partitions")
    ops = [udf("udf_tag", library=path)]
    check_eq(c.collect_all(range_plan(0, 1, 1, ops=ops)), [b"0:4:{}:0"],
             "no args")
    try:
        c.collect_all(range_plan(0, 1, 1, ops=[udf("udf_nomsg",
                                                   library=path)]))
    except TaskFailed as e:
        check("udf udf_nomsg: failed (returned -1) without a message" in
              e.message, "message: %r" % e.message)
    else:
        raise AssertionError("udf_nomsg succeeded")


@with_daemon(sets=["workers.max=1"])
def test_worker_keeps_plugin(d):
    """One worker runs every task: the plugin is loaded once and kept."""
    c = d.client()
    for k in range(4):
        ops = [udf("udf_prefix", {"prefix": "%d:" % k})]
        check_eq(c.collect_all(range_plan(0, 100, 3, ops=ops)),
                 [("%d:%d" % (k, i)).encode() for i in range(100)],
                 "job %d" % k)
        check_eq(c.collect_all(range_plan(0, 50, 2,
                                          ops=[udf("udf_wordlen")])),
                 lengths(numbers(50)), "wordlen job %d" % k)
    workers = c.status()["workers"]
    check_eq(len(workers), 1, "workers: %r" % workers)
    check(workers[0]["tasks"] >= 20, "tasks of the worker: %r" % workers)
    loads = d.log_text().count("loaded plugin %s" % PLUGIN)
    check(loads <= 1, "the plugin was loaded %d times" % loads)


@with_daemon(sets=["workers.preload=" + PLUGIN])
def test_preloaded(d):
    """A plugin the fork-server loaded before forking serves as well."""
    c = d.client()
    check_eq(c.collect_all(range_plan(0, 1000, 4, ops=[udf("udf_wordlen")])),
             lengths(numbers(1000)), "lengths")
    check("preloaded %s" % PLUGIN in d.log_text(), "no preload in the log")


def _reattach_released(d, ops):
    """Iterate a udf plan, release past record 300 of partition 0, lose
    the connection, and reattach at record 100: the reattach reply."""
    plan = records_plan(["w" * (i % 9) for i in range(2000)], 2, ops=ops)
    c = d.client()
    op = c.execute_ok(plan, "iterate")["operation"]
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_int(), STREAM_PARTITION, "response")
    for _ in range(400):
        c.read_record()
    with d.client(hello=False) as side:
        side.request_ok({"op": "hello", "version": 1, "session": c.session})
        side.request_ok({"op": "release", "operation": op, "partition": 0,
                         "offset": 300})
    c.close_abruptly()
    c2 = d.client(hello=False)
    c2.request_ok({"op": "hello", "version": 1, "session": c.session})
    return c2, c2.request({"op": "reattach", "operation": op,
                           "partition": 0, "offset": 100})


def test_deterministic_udf_recomputed(d):
    """A udf its plugin marks deterministic is computed again past the
    retry buffer; an unmarked one is not (POSITION_NOT_AVAILABLE)."""
    c2, reply = _reattach_released(d, [udf("udf_wordlen")])
    check(reply["ok"], "reattach: %r" % reply)
    c2.write_int(REQUEST_NEXT)
    status, recs = c2.read_partition()
    check_eq(recs, lengths([b"w" * (i % 9) for i in range(100, 1000)]),
             "partition 0 from record 100")
    _, reply = _reattach_released(d, [udf("udf_hog", {"mb": 0})])
    check_error(reply, "POSITION_NOT_AVAILABLE", "udf")


if __name__ == "__main__":
    run_tests(globals())
