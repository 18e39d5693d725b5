"""The plan language end to end through emberd (docs/plans.md): every
source and op, globs, and each refused plan with the field it names."""

import json
import os
import random
import re

from harness import *


def _recs(*ops, records=None, partitions=3):
    """A parallelize plan over some records with these ops."""
    if records is None:
        records = ["Alpha,1", "beta,22", None, "", "gamma,333", "  Pad  "]
    return records_plan(records, partitions, ops=list(ops))


def test_filter_contains_and_regex(d):
    c = d.client()
    check_eq(c.collect_all(_recs({"filter": {"contains": "a,"}})),
             [b"Alpha,1", b"beta,22", b"gamma,333"], "contains")
    check_eq(c.collect_all(_recs({"filter": {"regex": r"^[a-z]+,\d{2,}$"}})),
             [b"beta,22", b"gamma,333"], "regex")
    # Nulls never pass a filter.
    check_eq(c.collect_all(_recs({"filter": {"regex": ""}})),
             [b"Alpha,1", b"beta,22", b"", b"gamma,333", b"  Pad  "],
             "empty regex")
    # Many partitions, the regex compiled once per worker.
    n = 200000
    got = c.count(range_plan(0, n, 16, ops=[{"filter": {"regex": "7.*7"}}]))
    check_eq(got, sum(1 for i in range(n) if re.search("7.*7", str(i))),
             "count of a regex")


# Case mapping beyond ASCII: full mappings (one letter to two), title
# case digraphs, final sigma, letters whose mapping changes their length.
_UNICODE = ["straße", "ǅemal ǈudi ǋuna", "ΟΔΥΣΣΕΥΣ", "ὈΔΥΣΣΕΎΣ σοφός",
            "İstanbul", "ﬁne ﬂow", "Ǆ ǆ ǅ", "ŉ ǰ ΐ", "Ⅻ ⓐ", "ĳ Ĳ",
            "ａｂｃ ＡＢＣ", "ⱥ Ⱥ ɐ", "plain ascii", "日本語 Ωmega"]


def test_map_case_is_unicode(d):
    c = d.client()
    for fn in ("upper", "lower"):
        got = c.collect_all(records_plan(_UNICODE, 3, ops=[{"map": fn}]))
        want = [getattr(r, fn)().encode() for r in _UNICODE]
        for r, g, w in zip(_UNICODE, got, want):
            check_eq(g, w, "map %s of %r (Python says %r)" % (fn, r, w))


def test_map_case_passes_invalid_utf8_through(d):
    # Bytes that are not UTF-8 stay as they are; the valid text around
    # them is mapped as Python maps it.
    lines = [b"caf\xe9 ok", b"\xff\xfe stra\xc3\x9fe", b"\xc3", b"ab\xe2\x82",
             b"\xed\xa0\x80 surrogate", b"\xc0\xaf overlong"]
    path = job_readable(write_file(d.path("bad.txt"),
                                   b"\n".join(lines) + b"\n"))
    for fn in ("upper", "lower"):
        got = d.client().collect_all(text_plan([path], 1, ops=[{"map": fn}]))
        want = []
        for line in lines:
            # Python's own answer on each valid piece, bad bytes kept.
            parts = re.split(rb"((?:[\x80-\xff])+)", line)
            out = b""
            for part in parts:
                try:
                    out += getattr(part.decode(), fn)().encode()
                except UnicodeDecodeError:
                    # A run holding some valid characters and some not.
                    text = part.decode(errors="surrogateescape")
                    out += "".join(
                        getattr(ch, fn)() if not 0xdc80 <= ord(ch) <= 0xdcff
                        else ch for ch in text).encode(
                            errors="surrogateescape")
            want.append(out)
        check_eq(got, want, "map %s of invalid UTF-8" % fn)


def test_regex_sees_utf8_characters(d):
    # docs/plans.md: UTF-8 characters, invalid bytes never matched, \\w
    # ASCII unless (*UCP).
    lines = ["é", "日", "ab", "Éclair", "éclair", "naïve"]
    raw = [l.encode() for l in lines] + [b"\xff", b"a\xffb", b"\xe9t\xe9"]
    path = job_readable(write_file(d.path("re.txt"), b"\n".join(raw) + b"\n"))
    c = d.client()

    def grep(pattern):
        return c.collect_all(text_plan([path], 1, ops=[
            {"filter": {"regex": pattern}}]))
    check_eq(grep("^.$"), [b"\xc3\xa9", "日".encode()], "one character")
    check_eq(grep("b"), [b"ab", b"a\xffb"], "a match beside a bad byte")
    check_eq(grep("^a.b$"), [], "dot never matches a bad byte")
    check_eq(grep("(?i)^éclair$"), ["Éclair".encode(), "éclair".encode()],
             "caseless beyond ASCII")
    check_eq(grep(r"^\w+$"), [b"ab"], "\\w is ASCII")
    check_eq(grep(r"(*UCP)^\w+$"),
             [l.encode() for l in lines],
             "\\w with (*UCP)")
    check_eq(grep("t"), [b"\xe9t\xe9"], "t between latin-1 bytes")


def test_maps(d):
    c = d.client()
    check_eq(c.collect_all(_recs({"map": "upper"})),
             [b"ALPHA,1", b"BETA,22", None, b"", b"GAMMA,333", b"  PAD  "],
             "upper")
    check_eq(c.collect_all(_recs({"map": "lower"}))[0], b"alpha,1", "lower")
    check_eq(c.collect_all(_recs({"map": "trim"}))[5], b"Pad", "trim")
    check_eq(c.collect_all(_recs({"map": {"field": {"sep": ",",
                                                    "index": 1}}})),
             [b"1", b"22", None, b"", b"333", b""], "field 1")
    check_eq(c.collect_all(_recs({"map": {"field": {"sep": ",",
                                                    "index": -2}}})),
             [b"Alpha", b"beta", None, b"", b"gamma", b""], "field -2")


def test_map_json(d):
    c = d.client()
    recs = [json.dumps({"user": {"name": "ann", "age": 31, "tags": ["x"]}}),
            json.dumps({"user": {"name": None}}),
            json.dumps({"user": {}}),
            "not json",
            json.dumps({"user": {"name": {"first": "bo", "n": [1, 2]}}}),
            None]
    check_eq(c.collect_all(_recs({"map": {"json": "user.name"}},
                                 records=recs)),
             [b"ann", None, b'{"first":"bo","n":[1,2]}', None],
             "json user.name (two dropped)")
    check_eq(c.collect_all(_recs({"map": {"json": "user.tags.0"}},
                                 records=recs)),
             [b"x", None], "an array index")
    check_eq(c.collect_all(_recs({"map": {"json": "user.age"}},
                                 records=recs)),
             [b"31", None], "a number")


def test_flat_map_split(d):
    c = d.client()
    recs = ["a b  c", "", None, "one"]
    check_eq(c.collect_all(_recs({"flat_map": {"split": " "}}, records=recs)),
             [b"a", b"b", b"", b"c", b"", None, b"one"], "split")
    # Word count pieces, through a filter.
    check_eq(c.count(_recs({"flat_map": {"split": " "}},
                           {"filter": {"regex": "."}}, records=recs)),
             4, "non-empty words")


def test_sample_deterministic(d):
    c = d.client()
    plan = range_plan(0, 100000, 8, ops=[{"sample": {"fraction": 0.1,
                                                     "seed": 42}}])
    first = c.collect_all(plan)
    check(8000 < len(first) < 12000, "sampled %d of 100000" % len(first))
    # Any worker, any time: the same records.
    check_eq(c.iterate_all(plan), first, "the same sample again")
    check_eq(c.count(plan), len(first), "count of the sample")
    other = range_plan(0, 100000, 8, ops=[{"sample": {"fraction": 0.1,
                                                      "seed": 43}}])
    check(c.collect_all(other) != first, "another seed, the same sample")
    check_eq(c.count(range_plan(0, 1000, 4, ops=[{"sample": {
        "fraction": 0}}])), 0, "fraction 0")
    check_eq(c.count(range_plan(0, 1000, 4, ops=[{"sample": {
        "fraction": 1}}])), 1000, "fraction 1")


def test_limit_per_partition(d):
    c = d.client()
    parts = c.collect_partitions(range_plan(0, 1000, 4, ops=[{"limit": 3}]))
    check_eq(parts, [numbers(0, 3), numbers(250, 253), numbers(500, 503),
                     numbers(750, 753)], "three per partition")
    # The source stops early: a huge range takes no time.
    check_eq(c.count(range_plan(0, 10 ** 15, 2, ops=[{"limit": 2}])), 4,
             "limit of a huge range")
    check_eq(c.collect_all(range_plan(0, 10, 2, ops=[{"limit": 0}])), [],
             "limit 0")


def test_pipe_and_chain(d):
    c = d.client()
    ops = [{"map": "upper"}, {"pipe": {"command": "grep -v 5"}},
           {"flat_map": {"split": "1"}}, {"limit": 100}]
    got = c.collect_all(range_plan(0, 60, 2, ops=ops))
    want = []
    for part in (range(0, 30), range(30, 60)):
        pieces = []
        for i in part:
            if "5" not in str(i):
                pieces += str(i).encode().split(b"1")
        want += pieces[:100]
    check_eq(got, want, "a chain of ops")


def test_range_steps(d):
    c = d.client()
    check_eq(c.collect_all(range_plan(100, -100, 7, step=-13)),
             numbers(100, -100, -13), "negative step")
    check_eq(c.collect_all(range_plan(5, 10 ** 6, 3, step=99991)),
             numbers(5, 10 ** 6, 99991), "large step")


def test_text_glob_source(d):
    c = d.client()
    sub = d.path("logs")
    os.mkdir(sub)
    write_file(os.path.join(sub, "b.txt"), "b1\r\nb2")
    write_file(os.path.join(sub, "a.txt"), "a1\n\na3\n")
    write_file(os.path.join(sub, "c.log"), "c1\n")
    write_file(os.path.join(sub, "empty.txt"), "")
    plan = text_plan([os.path.join(sub, "*.txt"),
                      os.path.join(sub, "c.log")])
    reply = c.execute_ok(plan, "collect")
    check_eq(reply["partitions"], 4, "one partition per file found")
    got = [r for p in c.read_stream(pull=False) for r in p]
    # Sorted matches, CR kept as data, no final newline needed.
    check_eq(got, [b"a1", b"", b"a3", b"b1\r", b"b2", b"c1"], "lines")
    for n in (1, 2, 3, 5, 16):
        plan["partitions"] = n
        check_eq(c.collect_all(plan), got, "%d partitions" % n)


def test_text_lines_across_partitions(d):
    c = d.client()
    rnd = random.Random(7)
    lines = []
    for i in range(3000):
        lines.append("".join(rnd.choice("ab \t\r") for _ in
                             range(rnd.choice([0, 1, 5, 80, 1000]))))
    path = write_file(d.path("lines.txt"), "\n".join(lines))
    want = [l.encode() for l in lines]
    for n in (1, 7, 64, 300):
        check_eq(c.collect_all(text_plan([path], n)), want,
                 "%d partitions" % n)


def test_parallelize_large(d):
    c = d.client()
    recs = ["r%d" % i if i % 1000 else None for i in range(100000)]
    got = c.collect_all(records_plan(recs, 7))
    check_eq(got, [r.encode() if r is not None else None for r in recs],
             "100,000 records")
    check_eq(c.count(records_plan(recs, 3, ops=[{"filter": {
        "contains": "9"}}])), sum(1 for r in recs if r and "9" in r),
        "count of a filter")


def _refused(c, plan, want):
    msg = check_error(c.execute(plan, "collect"), "PLAN_INVALID")
    check(msg == want or msg.startswith(want),
          "error %r does not start with %r" % (msg, want))
    return msg


def test_refused_plans(d):
    c = d.client()
    r = {"range": {"end": 10}}
    cases = [
        ({"source": r, "opps": []}, "plan.opps: unknown field"),
        ({"source": r, "ops": [{"explode": {}}]},
         'plan.ops[0]: unknown operation "explode"'),
        ({"source": r, "partitions": 0},
         "plan.partitions: must be from 1 to 1000000"),
        ({"source": r, "partitions": -1},
         "plan.partitions: must be from 1 to 1000000"),
        ({"source": r, "partitions": "4"},
         "plan.partitions: expected an integer"),
        ({"source": r, "ops": [{"map": "upper"}, {"map": "lower"},
                               {"filter": {"regex": "a(b"}}]},
         "plan.ops[2].filter.regex: missing closing parenthesis at offset 3"),
        ({"source": r, "ops": [{"filter": {"contains": 7}}]},
         "plan.ops[0].filter.contains: expected a string"),
        ({"source": r, "ops": [{"filter": {"in_broadcast": -2}}]},
         "plan.ops[0].filter.in_broadcast: must be 0 or more"),
        ({"source": r, "ops": [{"map": {"field": {"sep": ""}}}]},
         "plan.ops[0].map.field.sep: must not be empty"),
        ({"source": r, "ops": [{"map": {"json": "a..b"}}]},
         'plan.ops[0].map.json: "a..b": a name between dots is empty'),
        ({"source": r, "ops": [{"flat_map": {"split": ""}}]},
         "plan.ops[0].flat_map.split: must not be empty"),
        ({"source": r, "ops": [{"sample": {"fraction": 2}}]},
         "plan.ops[0].sample.fraction: must be from 0 to 1"),
        ({"source": r, "ops": [{"limit": -1}]},
         "plan.ops[0].limit: must be 0 or more"),
        ({"source": r, "ops": [{"limit": 1.5}]},
         "plan.ops[0].limit: expected an integer"),
        ({"source": {"range": {"end": 10, "step": 0}}},
         "plan.source.range.step: must not be 0"),
    ]
    for plan, want in cases:
        _refused(c, plan, want)
    # The connection stays usable.
    check_eq(c.count(range_plan(0, 10, 2)), 10, "a job after refusals")


def test_refused_resources(d):
    c = d.client()
    missing = d.path("missing.txt")
    _refused(c, text_plan([missing]),
             "plan.source.text.paths[0]: %s: No such file or directory"
             % missing)
    pattern = d.path("*.nothing")
    ok = write_file(d.path("ok.txt"), "x\n")
    _refused(c, text_plan([ok, pattern]),
             "plan.source.text.paths[1]: %s: no file matches" % pattern)
    os.mkdir(d.path("adir"))
    _refused(c, text_plan([d.path("adir")]),
             "plan.source.text.paths[0]: %s: not a regular file"
             % d.path("adir"))
    os.mkfifo(d.path("fifo"))
    _refused(c, text_plan([d.path("fif?")]),
             "plan.source.text.paths[0]: %s: not a regular file"
             % d.path("fifo"))
    lib = d.path("nolib.so")
    _refused(c, range_plan(0, 10, 1, ops=[
        {"map": "upper"},
        {"udf": {"library": lib, "symbol": "f"}}]),
        "plan.ops[1].udf.library: ")
    check_eq(c.count(text_plan([ok])), 1, "a job after refusals")


if __name__ == "__main__":
    run_tests(globals())
