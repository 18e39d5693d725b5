"""The result stream under pressure: early stop, prefetch, clients that go
away mid-stream, and clients that read slowly."""

import time

from harness import *

BIG = range_plan(0, 10000000, 1)	# about 100 MB of frames in one partition


def _idle(d, timeout=5.0, no_operations=False):
    """Wait until no operation runs a task and no worker is busy (with
    no_operations, until no operation is left at all); the last status."""
    def quiet():
        with d.client() as c:
            st = c.status()
        busy = [w for w in st["workers"] if w.get("state") == "busy"]
        if no_operations:
            running = st["operations"]
        else:
            running = [o for o in st["operations"] if o.get("running")]
        return st if not running and not busy else None
    st = wait_until(quiet, timeout, interval=0.1)
    if st is None:
        with d.client() as c:
            st = c.status()
        raise AssertionError("still busy after %ss: operations %r, "
                             "workers %r" % (timeout, st["operations"],
                                             st["workers"]))
    return st


def test_early_stop(d):
    c = d.client()
    c.execute_ok(range_plan(0, 100000, 50), "iterate")
    c.write_int(REQUEST_NEXT)
    status, recs = c.read_partition()
    check_eq(status, STREAM_PARTITION, "first partition")
    check_eq(recs, numbers(2000), "first partition")
    c.write_int(REQUEST_STOP)
    check_eq(c.read_int(), STREAM_DONE, "answer to stop")
    st = c.status()
    check(st["ok"], "status after an early stop")
    _idle(d)
    check_eq(c.iterate_all(range_plan(0, 100, 3)), numbers(100),
             "a job after an early stop")


def test_early_stop_after_several(d):
    c = d.client()
    c.execute_ok(range_plan(0, 1000, 10), "iterate", {"prefetch": 3})
    for i in range(4):
        c.write_int(REQUEST_NEXT)
        status, recs = c.read_partition()
        check_eq(status, STREAM_PARTITION, "partition %d" % i)
        check_eq(recs, numbers(i * 100, i * 100 + 100), "partition %d" % i)
    c.write_int(REQUEST_STOP)
    check_eq(c.read_int(), STREAM_DONE, "answer to stop")
    _idle(d)
    check_eq(c.count(range_plan(0, 10, 2)), 10, "a job after an early stop")


def test_stop_before_first_partition(d):
    c = d.client()
    c.execute_ok(range_plan(0, 1000, 10), "iterate")
    c.write_int(REQUEST_STOP)
    check_eq(c.read_int(), STREAM_DONE, "answer to an immediate stop")
    check_eq(c.count(range_plan(0, 10, 2)), 10, "a job after the stop")


def test_prefetch(d):
    c = d.client()
    for prefetch in (0, 1, 4, 100):
        parts = c.iterate_partitions(range_plan(0, 10000, 20),
                                     {"prefetch": prefetch})
        check_eq(len(parts), 20, "partitions with prefetch %d" % prefetch)
        check_eq([r for p in parts for r in p], numbers(10000),
                 "records with prefetch %d" % prefetch)
    ops = [{"pipe": {"command": "tr 0-9 a-j"}}]
    want = [n.translate(bytes.maketrans(b"0123456789", b"abcdefghij"))
            for n in numbers(5000)]
    check_eq(c.iterate_all(range_plan(0, 5000, 8, ops=ops), {"prefetch": 2}),
             want, "a pipe with prefetch 2")


def test_prefetch_does_not_run_ahead_unbounded(d):
    """With prefetch 1 and a slow reader, the stream stays correct."""
    c = d.client()
    c.execute_ok(range_plan(0, 600, 6), "iterate", {"prefetch": 1})
    got = []
    for i in range(6):
        time.sleep(0.1)		# the slow reader itself, not a wait
        c.write_int(REQUEST_NEXT)
        status, recs = c.read_partition()
        check_eq(status, STREAM_PARTITION, "partition %d" % i)
        got += recs
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_int(), STREAM_DONE, "end")
    check_eq(got, numbers(600), "records")


def _served_quickly(d, within):
    start = time.monotonic()
    with d.client(timeout=within + 5) as c:
        check_eq(c.count(range_plan(0, 1000, 2)), 1000, "count")
    took = time.monotonic() - start
    check(took < within, "the next client waited %.1fs" % took)


def _abandon(d, action, read_bytes, options=None):
    c = d.client()
    c.execute_ok(BIG, action, {"reattachable": False} if options is None
                 else options)
    if action == "iterate":
        c.write_int(REQUEST_NEXT)
    got = 0
    while got < read_bytes:
        chunk = c.recv_some(65536)
        check(chunk, "stream ended early")
        got += len(chunk)
    _wait_blocked(d)
    c.close_abruptly()


def _wait_blocked(d):
    """Wait until emberd relays no more to a client that does not read:
    the worker has filled every buffer on the way."""
    with d.client() as watcher:
        wait_steady(lambda: [op["records_sent"] for op in
                             watcher.status()["operations"]], 20)


@with_daemon(sets=["workers.max=1"])
def test_abandon_iterate(d):
    _abandon(d, "iterate", 100000)
    _served_quickly(d, 3.0)
    _idle(d, no_operations=True)


@with_daemon(sets=["workers.max=1"])
def test_abandon_without_reading(d):
    _abandon(d, "iterate", 0)
    _served_quickly(d, 3.0)
    _idle(d, no_operations=True)


@with_daemon(sets=["workers.max=1"])
def test_abandon_collect(d):
    _abandon(d, "collect", 10000)
    _served_quickly(d, 3.0)
    _idle(d, no_operations=True)


@with_daemon(sets=["workers.max=1"])
def test_abandon_pipe(d):
    c = d.client()
    c.execute_ok(records_plan(["x"], 1, ops=[{"pipe": {
        "command": "yes xxxxxxxx | head -c 50000000"}}]), "iterate",
        {"reattachable": False})
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_int(), STREAM_PARTITION, "response")
    check_eq(c.read_record(), b"xxxxxxxx", "first record")
    _wait_blocked(d)
    c.close()
    _served_quickly(d, 3.0)
    _idle(d, no_operations=True)


@with_daemon(sets=["workers.max=1"])
def test_abandon_repeatedly(d):
    for _ in range(5):
        _abandon(d, "iterate", 20000)
    _served_quickly(d, 3.0)
    _idle(d, no_operations=True)


@with_daemon(sets=["workers.max=1", "operation.detached_timeout=300ms",
                  "operation.maintenance_interval=100ms"])
def test_abandon_reattachable_reaped(d):
    """A reattachable operation outlives its client until the reaper
    removes it; then its worker is free again."""
    _abandon(d, "iterate", 100000, options={})
    with d.client() as c:
        check_eq(len(c.request_ok({"op": "status"})["operations"]), 1,
                 "the detached operation is kept")
    _served_quickly(d, 5.0)
    _idle(d, no_operations=True)


@with_daemon(sets=["workers.max=2"])
def test_slow_client_bounded_memory(d):
    with d.client() as warm:
        check_eq(warm.count(range_plan(0, 1000, 2)), 1000, "warm-up")
    baseline = d.rss_kb()
    c = d.client()
    c.execute_ok(BIG, "iterate")
    c.write_int(REQUEST_NEXT)
    peak, read = baseline, 0
    end = time.monotonic() + 3.0
    while time.monotonic() < end:
        chunk = c.recv_some(32768)
        check(chunk, "stream ended early")
        read += len(chunk)
        time.sleep(0.01)
        peak = max(peak, d.rss_kb())
    c.close_abruptly()
    grew = (peak - baseline) / 1024.0
    check(read > 0, "nothing read")
    check(grew < 64, "emberd's RSS grew %.1f MB (baseline %d kB, peak %d kB)"
          " while a slow client read %d bytes" % (grew, baseline, peak, read))
    _served_quickly(d, 3.0)


def test_big_partition_streams_whole(d):
    """A partition of about 30 MB arrives whole and in order."""
    c = d.client()
    c.execute_ok(range_plan(0, 3000000, 1), "iterate")
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_int(), STREAM_PARTITION, "response")
    n = 0
    while True:
        rec = c.read_record()
        if rec == END_OF_DATA_SECTION:
            break
        if rec != str(n).encode():
            raise AssertionError("record %d is %r" % (n, rec))
        n += 1
    check_eq(n, 3000000, "records")
    c.write_int(REQUEST_NEXT)
    check_eq(c.read_int(), STREAM_DONE, "end")


if __name__ == "__main__":
    run_tests(globals())
