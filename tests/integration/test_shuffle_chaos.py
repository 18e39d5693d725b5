"""Chaos in the shuffle: shuffling jobs (reduce_by_key, group_by_key,
distinct, sort_by, join, repartition) while a killer SIGKILLs map and
reduce workers, and now and then a fork-server, at random.  No job may
give a wrong answer or hang, emberd stays up, and what runs again is only
what was lost: every task emberd made is one of a job's partitions, a
task run again for its lost worker, or a map task run again for a lost
shuffle file, as the log says of each."""

import collections
import os
import random
import re
import socket
import time

from harness import *
from test_chaos import Killer

SEED = int(os.environ.get("EMBER_CHAOS_SEED", "0")) or int(time.time())
JOBS = int(os.environ.get("EMBER_SHUFFLE_CHAOS_JOBS", "300"))
JOB_TIMEOUT = 60


WORDS = ["w%d" % ((i * 31) % 97) for i in range(4000)]
PAIRS = ["%s,%d" % (w, i) for i, w in enumerate(WORDS)]


def pairs_plan(partitions=4, ops=()):
    return records_plan(PAIRS, partitions, ops=[
        {"key_by": {"field": {"sep": ",", "index": 0},
                    "value": {"field": {"sep": ",", "index": 1}}}}] +
        list(ops))


class Jobs:
    """Each job: (plan, action, check of the answer, tasks it makes)."""

    def __init__(self):
        by_word = collections.defaultdict(list)
        for i, w in enumerate(WORDS):
            by_word[w].append(i)
        self.by_word = by_word

    def reduce_by_key(self):
        want = sorted((w.encode(), str(sum(v)).encode())
                      for w, v in self.by_word.items())
        return (pairs_plan(4, [{"reduce_by_key": {"fn": "sum",
                                                  "partitions": 3}}]),
                lambda got: check_eq(sorted(got), want, "sums"), 4 + 3)

    def group_count(self):
        return (pairs_plan(4, [{"group_by_key": {"partitions": 5}},
                               {"map": "key"}]),
                lambda got: check_eq(sorted(got), sorted(
                    w.encode() for w in self.by_word), "groups"), 4 + 5)

    def distinct(self):
        return (records_plan(WORDS, 3, ops=[{"distinct": {}}]),
                lambda got: check_eq(sorted(got), sorted(
                    w.encode() for w in set(WORDS)), "distinct"), 3 + 3)

    def sort(self):
        nums = [str((i * 7919) % 5000) for i in range(5000)]
        return (records_plan(nums, 4, ops=[
            {"sort_by": {"numeric": True, "partitions": 4}}]),
                lambda got: check_eq(got, [n.encode() for n in sorted(
                    nums, key=int)], "sorted, in order"), 4 + 4)

    def join(self):
        right = {"source": {"parallelize": {"records": [
            "%s,R%s" % (w, w) for w in sorted(set(WORDS))[::2]]}},
            "partitions": 2, "ops": [{"key_by": {
                "field": {"sep": ",", "index": 0},
                "value": {"field": {"sep": ",", "index": 1}}}}]}
        kept = set(sorted(set(WORDS))[::2])
        want = sum(len(v) for w, v in self.by_word.items() if w in kept)
        return (pairs_plan(4, [{"join": {"plan": right}}, {"map": "key"}]),
                lambda got: check_eq(len(got), want, "joined pairs"),
                4 + 2 + 4)

    def repartition(self):
        return (records_plan(WORDS, 2, ops=[{"repartition": {
            "partitions": 5}}]),
                lambda got: check_eq(sorted(got), sorted(
                    w.encode() for w in WORDS), "repartitioned"), 2 + 5)


def test_shuffle_chaos(d):
    rng = random.Random(SEED)
    jobs = Jobs()
    kinds = [jobs.reduce_by_key, jobs.group_count, jobs.distinct, jobs.sort,
             jobs.join, jobs.repartition]
    outcomes = collections.Counter()
    errors = []
    tasks_before = d.client().status()["counters"]["tasks"]
    made = 0
    killer = Killer(d, random.Random(SEED + 1))
    killer.start()
    try:
        for i in range(JOBS):
            job = kinds[i % len(kinds)] if i < len(kinds) else \
                rng.choice(kinds)
            plan, check_answer, ntasks = job()
            c = d.client()
            c.sock.settimeout(JOB_TIMEOUT)
            start = time.monotonic()
            try:
                got = c.collect_all(plan, {"reattachable": False})
                check_answer(got)
                what = "ok"
            except TaskFailed as e:
                what = "TASK_FAILED"
                check("partition" in str(e), "error: %s" % e)
                errors.append(str(e))
            except (socket.timeout, TimeoutError):
                raise AssertionError("job %d (%s) hung" % (i, job.__name__))
            finally:
                c.close()
            check(time.monotonic() - start < JOB_TIMEOUT,
                  "job %d (%s) took too long" % (i, job.__name__))
            made += ntasks
            outcomes[(job.__name__, what)] += 1
            check(d.alive(), "emberd died during job %d" % i)
    finally:
        killer.stop.set()
        killer.join()
    counters = d.client().status()["counters"]
    log = d.log_text()
    reruns = len(re.findall(r"running map task \d+ of stage \d+ again", log))
    # Failed jobs stop early: their tasks not yet made never are.
    check(counters["tasks"] - tasks_before <= made + reruns,
          "%d tasks made for %d partitions and %d map reruns: more than "
          "what was lost ran again" % (counters["tasks"] - tasks_before,
                                       made, reruns))
    print("seed %d: %s; kills %s; tasks retried %d, map tasks rerun %d" % (
        SEED, dict(outcomes), dict(killer.kills), counters["tasks_retried"],
        reruns))
    for e in errors[:5]:
        print("  failed: %s" % e[:300])
    check(outcomes[("reduce_by_key", "ok")] + outcomes[("sort", "ok")] > 0,
          "no shuffling job succeeded: %r" % dict(outcomes))


if __name__ == "__main__":
    run_tests(globals())
