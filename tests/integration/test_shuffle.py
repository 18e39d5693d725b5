"""Keyed data and the shuffle end to end (docs/plans.md, "Keyed data and
the shuffle"): every wide op through emberd's stages and the workers'
shuffle files, held to what plain Python computes on the same data, with
skewed keys, empty partitions, NUL bytes in keys, a 1 MB key and a sort
that spills; pairs and groups saved and checkpointed."""

import os
import random
import re
import sys

from harness import *

sys.path.insert(0, os.path.join(SRCDIR, "python"))
from ember.functions import python_op  # noqa: E402


def _key_by(sep=b",", value=True):
    kb = {"field": {"sep": sep.decode(), "index": 0}}
    if value:
        kb["value"] = {"field": {"sep": sep.decode(), "index": 1}}
    return {"key_by": kb}


def _skewed(n, seed=7):
    """n "key,value" lines: half of them one hot key, the rest spread
    over a few hundred, values small integers."""
    rnd = random.Random(seed)
    lines = []
    for i in range(n):
        k = "hot" if rnd.random() < 0.5 else "k%d" % rnd.randrange(300)
        lines.append(b"%s,%d" % (k.encode(), rnd.randrange(-50, 1000)))
    return lines


def _text(d, name, lines):
    """A text file of lines the job can read.  job_readable keeps one copy
    per name for the whole file's run: each test names its own."""
    return job_readable(write_file(d.path(name), b"\n".join(lines) + b"\n"))


def _pairs(lines, sep=b","):
    return [tuple(l.split(sep, 1)) for l in lines if sep in l]


def _groups(pairs):
    """key -> values, in input order."""
    g = {}
    for k, v in pairs:
        g.setdefault(k, []).append(v)
    return g


def _flat(parts):
    return [r for p in parts for r in p]


def test_worker_reduce_and_group_match_python(d):
    lines = _skewed(20000)
    path = _text(d, "kv-reduce.txt", lines)
    c = d.client()
    g = _groups(_pairs(lines))
    for fn, py in (("sum", lambda vs: sum(int(v) for v in vs)),
                   ("min", lambda vs: min(int(v) for v in vs)),
                   ("max", lambda vs: max(int(v) for v in vs)),
                   ("count", len)):
        got = c.collect_all(text_plan([path], 4, ops=[
            _key_by(), {"reduce_by_key": {"fn": fn, "partitions": 5}}]))
        check_eq(dict(got), {k: str(py(vs)).encode() for k, vs in g.items()},
                 "reduce_by_key " + fn)
        check_eq(len(got), len(g), fn + ": one pair per key")
    got = c.collect_all(text_plan([path], 4, ops=[
        _key_by(), {"reduce_by_key": {"fn": "concat", "sep": "|"}}]))
    check_eq(dict(got), {k: b"|".join(vs) for k, vs in g.items()},
             "concat, in input order")
    got = c.collect_all(text_plan([path], 4, ops=[
        _key_by(), {"group_by_key": {"partitions": 3}}]))
    check_eq(dict(got), g, "group_by_key, values in input order")
    check_eq(sorted(k for k, _ in got), sorted(g), "each key once")


def test_worker_distinct_repartition_union_match_python(d):
    lines = _skewed(5000)
    path = _text(d, "kv-distinct.txt", lines)
    c = d.client()
    got = c.collect_all(text_plan([path], 3, ops=[
        {"map": {"field": {"sep": ",", "index": 0}}},
        {"distinct": {"partitions": 4}}]))
    check_eq(sorted(got), sorted({l.split(b",")[0] for l in lines}),
             "distinct records")
    got = c.collect_all(text_plan([path], 3, ops=[_key_by(),
                                                  {"distinct": {}}]))
    check_eq(sorted(got), sorted(set(_pairs(lines))), "distinct pairs")
    parts = c.collect_partitions(text_plan([path], 3, ops=[
        {"repartition": {"partitions": 7}}]))
    check_eq(len(parts), 7, "repartition's partitions")
    check_eq(sorted(_flat(parts)), sorted(lines), "repartition keeps all")
    sizes = [len(p) for p in parts]
    check(max(sizes) - min(sizes) <= 3, "round robin is even: %r" % sizes)
    other = records_plan(["x", None, "y"], 2)
    parts = c.collect_partitions(records_plan(["a", "b", "c"], 2, ops=[
        {"union": {"plan": other}}]))
    check_eq(parts, [[b"a"], [b"b", b"c"], [b"x"], [None, b"y"]],
             "union: this plan's partitions, then the other's")


def test_worker_join_matches_python(d):
    rnd = random.Random(3)
    left = [b"k%d,l%d" % (rnd.randrange(60), i) for i in range(800)]
    right = [b"k%d,r%d" % (rnd.randrange(80), i) for i in range(500)]
    c = d.client()
    lp, rp = _pairs(left), _pairs(right)
    rg = _groups(rp)
    for how in ("inner", "left"):
        plan = records_plan([l.decode() for l in left], 3, ops=[
            _key_by(), {"join": {"how": how, "partitions": 4, "plan":
                        records_plan([r.decode() for r in right], 2,
                                     ops=[_key_by()])}}])
        got = c.collect_all(plan)
        want = []
        for k, v in lp:
            ws = rg.get(k, [None] if how == "left" else [])
            want += [(k, [v, w]) for w in ws]
        check_eq(sorted(got, key=repr), sorted(want, key=repr),
                 "join " + how)
        # Within a key, the left's order, then the right's.
        by = {}
        for k, vw in got:
            by.setdefault(k, []).append(vw)
        for k, vws in by.items():
            check_eq(vws, [vw for kk, vw in want if kk == k],
                     "join %s order of %r" % (how, k))


def test_worker_sort_by_matches_python(d):
    rnd = random.Random(5)
    nums = [str(rnd.randrange(-10 ** 6, 10 ** 6)) for _ in range(3000)]
    nums += ["1.5", "-0.25", "1e3"]
    c = d.client()
    parts = c.iterate_partitions(records_plan(nums, 4, ops=[
        {"sort_by": {"numeric": True, "partitions": 5}}]))
    check_eq(len(parts), 5, "sort's partitions")
    check_eq(_flat(parts), [s.encode() for s in
                            sorted(nums, key=float)], "numeric sort")
    got = c.collect_all(records_plan(nums, 4, ops=[
        {"sort_by": {"descending": True, "partitions": 3}}]))
    check_eq(got, sorted((s.encode() for s in nums), reverse=True),
             "descending sort of bytes")
    # Empty partitions: fewer keys than partitions.
    parts = c.collect_partitions(records_plan(["b", "a"], 3, ops=[
        {"sort_by": {"partitions": 6}}]))
    check_eq(len(parts), 6, "six partitions")
    check_eq(_flat(parts), [b"a", b"b"], "two keys over six partitions")


def test_worker_empty_partitions(d):
    c = d.client()
    # Input partitions with no records, reduce partitions with no key.
    plan = records_plan(["a,1", "a,2"], 5, ops=[
        _key_by(), {"reduce_by_key": {"fn": "sum", "partitions": 8}}])
    parts = c.collect_partitions(plan)
    check_eq(len(parts), 8, "partitions")
    check_eq(_flat(parts), [(b"a", b"3")], "one key")
    check_eq(c.collect_all(records_plan([], 3, ops=[
        _key_by(), {"group_by_key": {}}])), [], "nothing at all")


def test_worker_nul_and_large_keys(d):
    big = b"B" * (1 << 20)
    lines = [b"a\x00b,1", b"a,2", b"a\x00b,3", big + b",4", b"\x00,5",
             big + b",6", b"a\x00,7"]
    path = _text(d, "nul.txt", lines)
    c = d.client()
    got = c.collect_all(text_plan([path], 3, ops=[
        _key_by(), {"group_by_key": {"partitions": 2}}]))
    check_eq(dict(got), _groups(_pairs(lines)), "groups of NUL and 1 MB keys")
    got = c.collect_all(text_plan([path], 3, ops=[
        _key_by(), {"sort_by": {"partitions": 3}}]))
    check_eq(got, sorted(_pairs(lines), key=lambda p: p[0]),
             "sort of NUL and 1 MB keys, stable")


@with_daemon(sets=["workers.shuffle_memory=48k"])
def test_worker_sort_stable_under_spill(d):
    # About 1.3 MB of pairs sorted in 48 KiB: more than twenty times less.
    rnd = random.Random(11)
    lines = [b"k%03d,%07d" % (rnd.randrange(400), i) for i in range(100000)]
    path = _text(d, "big.txt", lines)
    check(os.path.getsize(path) > 20 * 48 * 1024, "data 20x the memory")
    c = d.client()
    got = c.collect_all(text_plan([path], 4, ops=[
        _key_by(), {"sort_by": {"partitions": 3}}]))
    check_eq(got, sorted(_pairs(lines), key=lambda p: p[0]),
             "sorted, equal keys in input order")
    spills = [int(n) for n in re.findall(r"(\d+) runs spilled",
                                         d.log_text())]
    check(len(spills) == 4 and min(spills) > 0,
          "every map task spilled: %r" % spills)
    got = c.collect_all(text_plan([path], 4, ops=[
        _key_by(), {"reduce_by_key": {"fn": "count"}}]))
    g = _groups(_pairs(lines))
    check_eq(dict(got), {k: str(len(v)).encode() for k, v in g.items()},
             "counts under spill")


def test_worker_save_and_checkpoint_pairs(d):
    c = d.client()
    plan = records_plan(["a,1", "b,2", "a,3"], 2, ops=[
        _key_by(), {"group_by_key": {"partitions": 1}}])
    out = os.path.join(job_writable(d.path("w")), "out")
    reply = c.execute(plan, "save", {"path": out})
    check(reply["ok"], "save: %r" % reply)
    with open(os.path.join(out, "part-00000"), "rb") as f:
        check_eq(sorted(f.read().splitlines()), [b"a\t1\t3", b"b\t2"],
                 "save writes a group as key TAB values")
    # Pairs, and a null value, through a checkpoint and back.
    plan = records_plan(["a,1", "b", "c,"], 2, ops=[
        {"key_by": {"regex": "^(\\w)(,(.*))?$", "group": 1}}])
    reply = c.request({"op": "execute", "plan": plan,
                       "action": "checkpoint", "options": {"eager": True}})
    check(reply.get("ok"), "checkpoint: %r" % reply)
    got = c.collect_all({"source": {"checkpoint": reply["checkpoint"]},
                         "ops": [{"group_by_key": {}}]})
    check_eq(sorted(got), [(b"a", [b"a,1"]), (b"b", [b"b"]),
                           (b"c", [b"c,"])],
             "a checkpoint gives its pairs back, to a wide op too")
    # Groups, written by the last stage of a plan in stages.
    plan = records_plan(["a,1", "b,2", "a,3"], 2, ops=[
        _key_by(), {"group_by_key": {"partitions": 2}}])
    reply = c.request({"op": "execute", "plan": plan,
                       "action": "checkpoint", "options": {"eager": True}})
    check(reply.get("ok"), "checkpoint of groups: %r" % reply)
    got = c.collect_all({"source": {"checkpoint": reply["checkpoint"]}})
    check_eq(sorted(got), [(b"a", [b"1", b"3"]), (b"b", [b"2"])],
             "a checkpoint gives its groups back")


def test_worker_word_count_of_pieces(d):
    # flat_map split, key_by {} and reduce_by_key over a text file: the
    # pieces go to the map side's table a block at a time.  Empty pieces,
    # keys of 16 bytes and over, and numbers as words.
    rnd = random.Random(5)
    vocab = [b"", b"a", b"sixteen-bytes-16", b"seventeen-bytes17",
             b"a-word-much-longer-than-a-slot-%d" % 1, b"-7", b"+3", b"12",
             b"0.5"] + [b"w%d" % i for i in range(3000)]
    lines = [b" ".join(rnd.choice(vocab) for _ in range(rnd.randrange(12)))
             for _ in range(20000)]
    path = _text(d, "pieces.txt", lines)
    words = [w for l in lines for w in l.split(b" ")]
    want = {}
    for w in words:
        want[w] = want.get(w, 0) + 1
    c = d.client()
    split = [{"flat_map": {"split": " "}}, {"key_by": {}}]
    got = c.collect_all(text_plan([path], 3, ops=split + [
        {"reduce_by_key": {"fn": "count"}}]))
    check_eq(len(got), len(want), "one pair a word")
    check_eq(dict(got), {k: str(n).encode() for k, n in want.items()},
             "counts of the pieces")
    # Sums and minimums of the words that are numbers.
    nums = [l for l in lines if l]
    nums = [b" ".join(w for w in l.split(b" ") if w in vocab[5:9])
            for l in nums]
    nums = [l for l in nums if l]
    npath = _text(d, "numbers.txt", nums)
    ws = [w for l in nums for w in l.split(b" ")]
    got = dict(c.collect_all(text_plan([npath], 2, ops=split + [
        {"reduce_by_key": {"fn": "sum"}}])))
    check_eq(sorted(got), sorted(set(ws)), "a sum a number")
    for w in set(ws):
        n = ws.count(w)
        want = float(w) * n
        check_eq(float(got[w]), want, "sum of %r" % w)
    check_eq(got[b"12"], b"%d" % (12 * ws.count(b"12")), "an int64's sum")
    # A piece that is not a number fails the task, naming it.
    reply = c.execute(text_plan([path], 2, ops=split + [
        {"reduce_by_key": {"fn": "sum"}}]), "collect")
    if reply["ok"]:
        status, payload = c.read_partition()
        check_eq(status, STREAM_ERROR, "a failed stream")
        check("is not a number" in payload, payload)
    else:
        check("is not a number" in reply["error"]["message"], reply)


def test_worker_reduce_by_key_not_a_number(d):
    c = d.client()
    reply = c.execute(records_plan(["a,1", "b,x"], 2, ops=[
        _key_by(), {"reduce_by_key": {"fn": "sum"}}]), "collect")
    if reply["ok"]:
        status, payload = c.read_partition()
        check_eq(status, STREAM_ERROR, "a failed stream")
        check("key \"b\": value \"x\" is not a number" in payload, payload)
    else:
        check_error(reply, "TASK_FAILED", "key \"b\"", "\"x\"")


def _read_partition_rest(c):
    got = []
    while True:
        rec = c.read_record()
        if rec == END_OF_DATA_SECTION:
            return got
        check(not isinstance(rec, int), "a special length %r" % (rec,))
        got.append(rec)


def test_worker_reattach_inside_pairs(d):
    """A stream of groups cut inside a partition reattaches at the record
    after the last one received: a pair or a group is one record of a
    position, nothing lost, nothing repeated."""
    plan = records_plan(["k%d,%d" % (i % 3000, i) for i in range(9000)], 3,
                        ops=[_key_by(), {"group_by_key": {"partitions": 2}}])
    want = d.client().iterate_partitions(plan)
    c = d.client()
    op = c.execute_ok(plan, "iterate")["operation"]
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_int(), STREAM_PARTITION, "response")
    head = [c.read_record() for _ in range(700)]
    c.close_abruptly()
    c2 = d.client(hello=False)
    c2.request_ok({"op": "hello", "version": 1, "session": c.session})
    reply = c2.request({"op": "reattach", "operation": op, "partition": 0,
                        "offset": 700})
    check(reply.get("ok"), "reattach: %r" % reply)
    c2.write_int(REQUEST_NEXT)
    check_eq(c2.read_int(), STREAM_PARTITION, "response after reattach")
    check_eq(head + _read_partition_rest(c2), want[0], "partition 0")
    check_eq(c2.read_stream(pull=True), want[1:], "partition 1")


def _tag(kv):
    return (kv[0].upper(), str(int(kv[1]) * 10))


def _size(kvs):
    return (kvs[0], "%d:%s" % (len(kvs[1]), "+".join(kvs[1])))


def _join_text(kvw):
    return "%s=%s/%s" % (kvw[0], kvw[1][0], kvw[1][1])


@needs_python
def test_worker_python_ops_take_and_give_pairs(d):
    c = d.client()
    # A pair reaches Python as (key, value); a 2-tuple back is a pair.
    got = c.collect_all(records_plan(["a,1", "b,2", "a,3"], 2, ops=[
        _key_by(), python_op("map", _tag),
        {"reduce_by_key": {"fn": "sum"}}]))
    check_eq(sorted(got), [(b"A", b"40"), (b"B", b"20")],
             "python map of pairs into reduce_by_key")
    # A group reaches Python as (key, [values]).
    got = c.collect_all(records_plan(["a,1", "b,2", "a,3"], 2, ops=[
        _key_by(), {"group_by_key": {}}, python_op("map", _size)]))
    check_eq(sorted(got), [(b"a", b"2:1+3"), (b"b", b"1:2")],
             "python map of groups")
    # A join's group of [v, None] too; a plain record back.
    other = records_plan(["a,x"], 1, ops=[_key_by()])
    got = c.collect_all(records_plan(["a,1", "b,2"], 2, ops=[
        _key_by(), {"join": {"how": "left", "plan": other}},
        python_op("map", _join_text)]))
    check_eq(sorted(got), [b"a=1/x", b"b=2/None"], "python map of a join")


if __name__ == "__main__":
    run_tests(globals())
