"""The status listener (status.listen): Prometheus metrics checked by a real
parser and against a job's known counts, the status page in a headless
browser, who sees what, JSON log lines, and hostile HTTP clients."""

import html
import http.client
import json
import math
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import time

from harness import *
from users import ROOT, USERS, AsUser, make_users

LISTEN = "status.listen=127.0.0.1:0"
PROMTOOL = shutil.which("promtool")
CHROMIUM = next((p for p in (shutil.which(n) for n in (
    "chromium", "chromium-browser", "google-chrome")) if p), None)
# A plan whose tasks take a while: the page and the metrics see it run.
SLOW_OPS = [{"pipe": {"command": "sleep 0.4; cat"}}]


def ipv6_loopback():
    """Can this machine listen on ::1?"""
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def http_get(port, path, method="GET", headers=None, body=None, timeout=10):
    """One request on a connection of its own: (status, headers, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def metrics(port):
    status, headers, body = http_get(port, "/metrics")
    check_eq(status, 200, "/metrics status")
    check(headers.get("Content-Type", "").startswith("text/plain; "
                                                     "version=0.0.4"),
          "/metrics Content-Type: %r" % headers.get("Content-Type"))
    return body.decode("utf-8")


# ---------------------------------------------------------------------------
# A strict parser of the Prometheus text format (version 0.0.4), used on
# every scrape, and alone where promtool is not installed.

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


def parse_value(s, where):
    if s in ("+Inf", "-Inf", "NaN"):
        return float(s.replace("Inf", "inf").replace("NaN", "nan"))
    if not re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", s):
        raise AssertionError("%s: bad value %r" % (where, s))
    return float(s)


def parse_labels(text, where):
    """'a="x",b="y"' -> {"a": "x", "b": "y"}, escapes checked."""
    labels, i = {}, 0
    while i < len(text):
        m = re.match(r"([^=]*)=\"", text[i:])
        if not m or not LABEL.match(m.group(1)):
            raise AssertionError("%s: bad label at %r" % (where, text[i:]))
        name, i, value = m.group(1), i + m.end(), ""
        while True:
            if i >= len(text):
                raise AssertionError("%s: unterminated label" % where)
            c = text[i]
            if c == "\\":
                esc = text[i + 1:i + 2]
                if esc not in ("\\", '"', "n"):
                    raise AssertionError("%s: bad escape \\%s" % (where, esc))
                value += "\n" if esc == "n" else esc
                i += 2
            elif c == '"':
                i += 1
                break
            else:
                value += c
                i += 1
        if name in labels:
            raise AssertionError("%s: label %s twice" % (where, name))
        labels[name] = value
        if i < len(text):
            if text[i] != ",":
                raise AssertionError("%s: expected , at %r" %
                                     (where, text[i:]))
            i += 1
    return labels


def family_of(name, types):
    """The family a sample belongs to (histograms add suffixes)."""
    for suffix in ("_bucket", "_sum", "_count"):
        base = name[:-len(suffix)]
        if name.endswith(suffix) and types.get(base) == "histogram":
            return base
    return name


def parse_metrics(text):
    """Parse strictly; return ({family: type}, {(name, labels): value})."""
    if not text.endswith("\n"):
        raise AssertionError("the exposition does not end with a newline")
    types, helps, samples, seen_families = {}, set(), {}, []
    for n, line in enumerate(text.split("\n")[:-1], 1):
        where = "line %d" % n
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            parts = line.split(" ", 3)
            if len(parts) != 4 or not NAME.match(parts[2]):
                raise AssertionError("%s: bad comment %r" % (where, line))
            if parts[1] == "HELP":
                if parts[2] in helps:
                    raise AssertionError("%s: HELP %s twice" %
                                         (where, parts[2]))
                helps.add(parts[2])
            else:
                if parts[2] in types or parts[3] not in TYPES:
                    raise AssertionError("%s: bad or second TYPE %r" %
                                         (where, line))
                if parts[2] in seen_families:
                    raise AssertionError("%s: TYPE after samples" % where)
                types[parts[2]] = parts[3]
            continue
        if line.startswith("#") or line == "":
            raise AssertionError("%s: unexpected line %r" % (where, line))
        m = re.fullmatch(r"([^{ ]+)(\{(.*)\})? (\S+)( -?\d+)?", line)
        if not m or not NAME.match(m.group(1)):
            raise AssertionError("%s: bad sample %r" % (where, line))
        name = m.group(1)
        labels = parse_labels(m.group(3) or "", where)
        family = family_of(name, types)
        if family not in types:
            raise AssertionError("%s: %s has no TYPE" % (where, name))
        if types[family] == "counter" and not name.endswith("_total"):
            raise AssertionError("%s: counter %s without _total" %
                                 (where, name))
        if seen_families and seen_families[-1] != family:
            if family in seen_families:
                raise AssertionError("%s: family %s is split" %
                                     (where, family))
        if not seen_families or seen_families[-1] != family:
            seen_families.append(family)
        key = (name, tuple(sorted(labels.items())))
        if key in samples:
            raise AssertionError("%s: series %r twice" % (where, key))
        value = parse_value(m.group(4), where)
        if types[family] == "counter" and not value >= 0:
            raise AssertionError("%s: counter %s is %r" % (where, name,
                                                           value))
        samples[key] = value
    check_histograms(types, samples)
    return types, samples


def check_histograms(types, samples):
    """Buckets rise, the +Inf bucket equals _count."""
    for family, kind in types.items():
        if kind != "histogram":
            continue
        buckets = sorted((float(dict(k[1])["le"].replace("+Inf", "inf")), v)
                         for k, v in samples.items()
                         if k[0] == family + "_bucket")
        check(buckets and math.isinf(buckets[-1][0]),
              "%s: no +Inf bucket" % family)
        for (_, a), (_, b) in zip(buckets, buckets[1:]):
            check(a <= b, "%s: buckets fall" % family)
        check_eq(buckets[-1][1], samples[(family + "_count", ())],
                 "%s: +Inf bucket and _count" % family)


def check_exposition(text):
    """promtool's verdict when it is installed, the strict parser always."""
    if PROMTOOL is not None:
        r = subprocess.run([PROMTOOL, "check", "metrics"], input=text,
                           capture_output=True, text=True, timeout=60)
        check_eq(r.returncode, 0, "promtool check metrics (%s%s)" %
                 (r.stdout, r.stderr))
    else:
        print("promtool is not installed: checking with the parser only")
    return parse_metrics(text)


def value(samples, name, **labels):
    key = (name, tuple(sorted(labels.items())))
    check(key in samples, "no sample %s%r" % (name, labels))
    return samples[key]


# ---------------------------------------------------------------------------

def test_parser_rejects_bad_expositions(_d):
    """The fallback parser is strict: each of these breaks the format."""
    good = "# TYPE a_total counter\na_total 1\n"
    parse_metrics(good)
    bad = [
        "a_total 1\n",					# no TYPE
        "# TYPE a_total counter\na_total 1",		# no newline
        "# TYPE a_total counter\na_total one\n",		# bad value
        "# TYPE a counter\na 1\n",			# counter w/o _total
        "# TYPE a gauge\na{x=\"1\",x=\"2\"} 1\n",	# label twice
        "# TYPE a gauge\na{x=\"\\t\"} 1\n",		# bad escape
        "# TYPE a gauge\na 1\na 2\n",			# series twice
        "# TYPE a gauge\n# TYPE a gauge\na 1\n",		# TYPE twice
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\n"
        "h_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",	# buckets fall
        "# TYPE 1a gauge\n1a 1\n",			# bad name
    ]
    for text in bad:
        try:
            parse_metrics(text)
        except AssertionError:
            continue
        raise AssertionError("parser took %r" % text)


@with_daemon(sets=[LISTEN, "workers.max=2"])
def test_metrics_match_a_jobs_counts(d):
    """/metrics passes promtool, and its counters are the jobs' counts."""
    port = status_port(d)
    _, before = check_exposition(metrics(port))
    check_eq(value(before, "ember_tasks_completed_total"), 0, "tasks before")
    with d.client() as c:
        check_eq(c.count(range_plan(0, 100000, 8)), 100000, "count")
        records = c.iterate_all(range_plan(0, 1000, 4))
    check_eq(len(records), 1000, "records iterated")
    types, s = check_exposition(metrics(port))
    check_eq(value(s, "ember_tasks_completed_total"), 12, "tasks completed")
    check_eq(value(s, "ember_tasks_started_total"), 12, "tasks started")
    check_eq(value(s, "ember_tasks_failed_total"), 0, "tasks failed")
    check_eq(value(s, "ember_operations_started_total"), 2, "operations")
    check_eq(value(s, "ember_records_streamed_total"), 1000, "records")
    check_eq(value(s, "ember_bytes_streamed_total"),
             sum(4 + len(r) for r in records), "bytes streamed")
    check_eq(value(s, "ember_task_duration_seconds_count"), 12,
             "task duration observations")
    check_eq(value(s, "ember_task_first_record_seconds_count"), 4,
             "first-record observations (the streamed partitions)")
    check_eq(types["ember_task_duration_seconds"], "histogram", "type")
    forked = value(s, "ember_workers_forked_total")
    check(1 <= forked <= 2, "workers forked: %r" % forked)
    check_eq(value(s, "ember_pool_forks_total", uid="0"), forked,
             "the pool's forks")
    check_eq(value(s, "ember_pool_reuses_total", uid="0"),
             value(s, "ember_worker_reuses_total"), "the pool's reuses")
    idle = value(s, "ember_workers", state="idle")
    check_eq(idle + value(s, "ember_workers", state="busy"), forked,
             "workers by state")
    check_eq(value(s, "ember_pool_retirements_total", uid="0",
                   cause="failed"), 0, "retired for failure")
    check_eq(value(s, "ember_operations", state="attached"), 0, "attached")
    check(value(s, "process_resident_memory_bytes") > 1 << 20, "RSS")
    fds = len(os.listdir("/proc/%d/fd" % d.pid))
    check(abs(value(s, "process_open_fds") - fds) <= 3,
          "open fds %r, /proc says %d" % (value(s, "process_open_fds"), fds))
    start = value(s, "process_start_time_seconds")
    check(abs(start - time.time()) < 120, "start time %r" % start)


@with_daemon(sets=[LISTEN, "daemon.max_connections_per_uid=300"])
def test_heap_in_use_follows_sessions(d):
    """ember_heap_in_use_bytes grows with held sessions and comes back
    when they close, where the RSS keeps what the allocator holds."""
    port = status_port(d)

    def heap():
        _, s = check_exposition(metrics(port))
        return value(s, "ember_heap_in_use_bytes")

    with d.client() as c:
        check_eq(c.count(range_plan(0, 10, 1)), 10, "warm-up")
    start = heap()
    check(0 < start < value(check_exposition(metrics(port))[1],
                            "process_resident_memory_bytes"),
          "heap in use %r" % start)
    clients = [d.client() for _ in range(200)]
    held = heap()
    check(held - start >= 200 * 64, "200 sessions: heap %r -> %r"
          % (start, held))
    for c in clients:
        c.request_ok({"op": "close_session"})
        c.close()
    check(wait_until(lambda: heap() - start < 64 * 1024, 10),
          "heap in use %r after the sessions closed, %r before"
          % (heap(), start))


@with_daemon(sets=[LISTEN])
def test_metrics_are_documented(d):
    """docs/metrics.md names every metric family /metrics writes."""
    types, _ = check_exposition(metrics(status_port(d)))
    with open(os.path.join(SRCDIR, "docs", "metrics.md")) as f:
        doc = f.read()
    missing = [n for n in types if "`%s`" % n not in doc]
    check(not missing, "not in docs/metrics.md: %s" % missing)


@with_daemon(sets=[LISTEN, "status.users=*", "workers.max=1"])
def test_failures_in_metrics_and_status(d):
    """A failed task counts in /metrics and shows, with its message, in
    /status.json."""
    port = status_port(d)
    with d.client() as c:
        reply = c.execute(range_plan(0, 10, 1, ops=[
            {"pipe": {"command": "echo broken-on-purpose >&2; exit 3"}}]),
            "count")
    check(not reply["ok"], "the job failed")
    _, s = check_exposition(metrics(port))
    check_eq(value(s, "ember_tasks_failed_total"), 1, "tasks failed")
    check_eq(value(s, "ember_operations_failed_total"), 1, "ops failed")
    status, _, body = http_get(port, "/status.json")
    check_eq(status, 200, "/status.json")
    web = json.loads(body)
    failures = web["failures"]
    check_eq(len(failures), 1, "failures shown")
    check_eq(failures[0]["user"], "root", "whose failure")
    # The pool is named as ember status names it: by the user its
    # workers run as (root's jobs run as workers.root_user).
    check_eq([(p["user"], p["client"]) for p in web["pools"]],
             [("nobody" if os.geteuid() == 0 else failures[0]["user"],
               os.geteuid())], "whose pool")
    check(re.search(r" warn: operation [0-9a-f-]+: .*broken-on-purpose",
                    d.log_text()), "the failure is not logged as a warning")
    check("exit" in failures[0]["message"] or "status 3" in
          failures[0]["message"], "message: %r" % failures[0]["message"])
    check_eq(failures[0]["partition"], 0, "partition")


@with_daemon(sets=[LISTEN, "status.users=*", "workers.max=1"])
def test_failure_message_cut_between_characters(d):
    """A long failure message is kept in /status.json cut between two
    characters, whatever its length before the multi-byte ones."""
    port = status_port(d)
    for pad in ("", "a", "aa"):
        with d.client() as c:
            reply = c.execute(range_plan(0, 10, 1, ops=[
                {"pipe": {"command": "printf '%s' >&2; i=0; while [ $i -lt "
                          "700 ]; do printf '\\342\\202\\254' >&2; "
                          "i=$((i+1)); done; exit 3" % pad}}]), "count")
        check(not reply["ok"], "the job failed")
    status, _, body = http_get(port, "/status.json")
    check_eq(status, 200, "/status.json")
    failures = json.loads(body)["failures"]
    check_eq(len(failures), 3, "failures shown")
    for f in failures:
        check("\u20ac\u20ac" in f["message"], "message: %r" % f["message"][:200])
        check(len(f["message"].encode()) <= 1024, "message of %d bytes"
              % len(f["message"].encode()))


@with_daemon(sets=[LISTEN, "workers.max=1"])
def test_status_json_is_the_status_reply(d):
    """/status.json has the status request's fields, and by default no
    user's operations: only how many are hidden."""
    port = status_port(d)
    c = d.client()
    c.execute_ok(range_plan(0, 40, 4, ops=SLOW_OPS), "iterate")
    try:
        status, headers, body = http_get(port, "/status.json")
        check_eq(status, 200, "status")
        check_eq(headers.get("Content-Type"), "application/json", "type")
        web = json.loads(body)
        reply = d.client().status()
        for key in reply:
            if key != "ok":
                check(key in web, "/status.json lacks %r" % key)
        check_eq(web["operations"], [], "operations shown")
        check_eq(web["operations_hidden"], 1, "operations hidden")
        check_eq(web["sessions"], [], "sessions shown")
        check_eq(web["shown_users"], [], "shown users")
        for w in web["workers"]:
            check("operation" not in w.get("task", {}),
                  "a worker names a hidden operation: %r" % w)
    finally:
        c.close_abruptly()


@no_daemon
def test_status_users_shows_only_those_users(_):
    """status.users names a; b's operation stays hidden from the page."""
    if not ROOT:
        print("skip: needs root to create two users")
        return
    make_users()
    d = Daemon(sets=[LISTEN, "daemon.socket_mode=0666", "workers.max=2",
                     "status.users=" + USERS["a"][2]])
    os.chmod(d.tmpdir, 0o755)
    port = status_port(d)

    def hold(ctl):
        c = d.client()
        op = c.execute_ok(range_plan(0, 40, 8, ops=SLOW_OPS),
                          "iterate")["operation"]
        ctl.ready(op)
        ctl.wait_go()
        return op
    users = {tag: AsUser(USERS[tag], hold) for tag in ("a", "b")}
    try:
        ops = {tag: u.wait_ready() for tag, u in users.items()}
        web = json.loads(http_get(port, "/status.json")[2])
        shown = {o["id"]: o for o in web["operations"]}
        check(ops["a"] in shown, "a's operation not shown")
        check(ops["b"] not in shown, "b's operation shown")
        check_eq(shown[ops["a"]]["user"], USERS["a"][2], "user name")
        check_eq(shown[ops["a"]]["uid"], USERS["a"][0], "uid")
        check_eq(web["operations_hidden"], 1, "hidden")
        check(ops["b"] not in json.dumps(web), "b's id appears somewhere")
        check_eq(web["shown_users"], [USERS["a"][2]], "shown users")
    finally:
        for u in users.values():
            u.close()
        d.cleanup()


@skip_unless(CHROMIUM is not None,
             "no chromium installed: the page is not loaded in a browser")
@with_daemon(sets=[LISTEN, "status.users=*", "workers.max=2"])
def test_page_in_headless_chromium(d):
    """The page, in a real browser with a job running, shows the operation
    after its first fetch of /status.json; a screenshot is taken."""
    port = status_port(d)
    status, headers, body = http_get(port, "/")
    check_eq(status, 200, "/")
    check("text/html" in headers.get("Content-Type", ""), "HTML")
    check(b"http://" not in body and b"https://" not in body,
          "the page loads something from elsewhere")
    c = d.client()
    op = c.execute_ok(range_plan(0, 400, 40, ops=SLOW_OPS),
                      "iterate")["operation"]
    c.write_int(1)
    profile = d.path("chromium-profile")
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-dev-shm-usage", "--no-first-run",
            "--user-data-dir=" + profile, "--window-size=1280,1000",
            "--virtual-time-budget=4000"]
    env = dict(os.environ, HOME=d.tmpdir)
    url = "http://127.0.0.1:%d/" % port
    try:
        r = subprocess.run(base + ["--dump-dom", url], capture_output=True,
                           text=True, timeout=90, env=env)
        check_eq(r.returncode, 0, "chromium --dump-dom: %s" % r.stderr[-2000:])
        dom = r.stdout
        check(op in dom, "the operation %s is not on the page" % op)
        check("iterate" in dom and "partitions" in dom, "no progress shown")
        what = d.client().status()["operations"][0]["what"]
        check(what.startswith("range 0..400 | ") and
              html.escape(what, quote=False) in dom,
              "what the operation does (%r) is not on the page" % what)
        if os.geteuid() == 0:
            check("nobody (65534) for root" in dom, "the pool's user")
        check("live" in dom, "the page did not say it is live")
        check(re.search(r'<tbody id="workers"><tr><td class="mono">\d+',
                        dom), "no worker row")
        shot = d.path("status.png")
        r = subprocess.run(base + ["--screenshot=" + shot, url],
                           capture_output=True, text=True, timeout=90,
                           env=env)
        check_eq(r.returncode, 0, "chromium --screenshot: %s" %
                 r.stderr[-2000:])
        with open(shot, "rb") as f:
            png = f.read()
        check(png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG")
        width, height = struct.unpack(">II", png[16:24])
        check_eq((width, height), (1280, 1000), "screenshot size")
        check(len(png) > 20000, "a blank screenshot (%d bytes)" % len(png))
        keep = os.environ.get("EMBER_SCREENSHOT")
        if keep:
            shutil.copy(shot, keep)
    finally:
        c.close_abruptly()


@with_daemon(sets=[LISTEN, "daemon.log_format=json", "workers.max=1"],
             log_level="info")
def test_json_log_lines(d):
    """With daemon.log_format=json every line of emberd's log is a JSON
    object; a task's failure names its operation, partition, worker and
    session."""
    with d.client() as c:
        reply = c.execute(range_plan(0, 10, 2, ops=[
            {"pipe": {"command": "exit 7"}}]), "count")
        session = c.session
    check(not reply["ok"], "the job failed")

    def failure_logged():
        return "exited with status 7" in d.log_text()
    check(wait_until(failure_logged, 10), "no failure in the log")
    found = None
    for line in d.log_text().splitlines():
        obj = json.loads(line)
        for key in ("time", "level", "pid", "message"):
            check(key in obj, "%r lacks %s" % (line, key))
        check(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z",
                           obj["time"]), "time %r" % obj["time"])
        if "status 7" in obj["message"] and "operation" in obj:
            found = obj
    check(found is not None, "no failure line with its operation")
    check_eq(found["session"], session, "session")
    check(isinstance(found["partition"], int), "partition %r" % found)
    check(isinstance(found["worker"], int) and found["worker"] > 0,
          "worker %r" % found)
    check_eq(found["level"], "warn", "level")


def raw_request(port, data, timeout=5):
    """Send bytes, return what comes back until the server closes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk
            if b"\r\n\r\n" in out and b"Connection: close" not in out:
                return out
    finally:
        s.close()


@with_daemon(sets=[LISTEN])
def test_bad_requests_get_clear_errors(d):
    """Unknown paths, other methods, huge headers and a foreign Host each
    get a clear error, and emberd serves on."""
    port = status_port(d)
    status, _, body = http_get(port, "/nope")
    check_eq(status, 404, "unknown path")
    check(b"/metrics" in body, "404 says what exists: %r" % body)
    status, headers, body = http_get(port, "/metrics", method="POST",
                                     body=b"x=1")
    check_eq(status, 405, "POST")
    check_eq(headers.get("Allow"), "GET, HEAD", "Allow")
    status, _, body = http_get(port, "/", method="DELETE")
    check_eq(status, 405, "DELETE")
    status, _, _ = http_get(port, "/metrics",
                            headers={"X-Big": "a" * 20000})
    check(status in (400, 413, 431), "huge header: %d" % status)
    status, _, body = http_get(port, "/status.json",
                               headers={"Host": "attacker.example"})
    check_eq(status, 421, "foreign Host (DNS rebinding)")
    status, _, body = http_get(port, "/metrics",
                               headers={"Host": "localhost:%d" % port})
    check_eq(status, 200, "Host localhost")
    status, headers, body = http_get(port, "/", method="HEAD")
    check_eq((status, body), (200, b""), "HEAD")
    out = raw_request(port, b"\x00\xff garbage\r\n\r\n")
    check(out.startswith(b"HTTP/1.1 400"), "garbage: %r" % out[:80])
    with d.client() as c:
        check_eq(c.count(range_plan(0, 100, 2)), 100, "a job after")


def start_without_quarantine(sets):
    """A Daemon whose freed memory is freed: AddressSanitizer otherwise
    keeps up to 256 MiB of it in quarantine, which RSS counts."""
    saved = os.environ.get("ASAN_OPTIONS")
    os.environ["ASAN_OPTIONS"] = ((saved + ":") if saved else "") + \
        "quarantine_size_mb=0"
    try:
        return Daemon(sets=sets)
    finally:
        if saved is None:
            del os.environ["ASAN_OPTIONS"]
        else:
            os.environ["ASAN_OPTIONS"] = saved


@no_daemon
def test_stalled_and_slow_clients_never_block(_):
    """Slowloris-style stalled requests and a client that never reads:
    the listener closes them, others are served at once, and emberd's
    jobs and memory are unaffected."""
    d = start_without_quarantine([LISTEN, "status.timeout=3s",
                                  "status.max_connections=4"])
    port = status_port(d)
    stalled = []
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-a: ")
        stalled.append(s)
    # Waiting for the stalled ones to time out would take 5 x 3s.
    t0 = time.monotonic()
    status, _, _ = http_get(port, "/metrics", timeout=20)
    check_eq(status, 200, "a scrape past 20 stalled connections")
    check(time.monotonic() - t0 < 6, "the scrape waited %.1fs" %
          (time.monotonic() - t0))
    with d.client() as c:
        check_eq(c.count(range_plan(0, 1000, 4)), 1000, "a job meanwhile")
    # The newest stalled one is closed by status.timeout.
    last = stalled[-1]
    t0 = time.monotonic()
    check_eq(last.recv(100), b"", "a stalled connection is closed")
    check(time.monotonic() - t0 < 9, "closed after %.1fs" %
          (time.monotonic() - t0))
    for s in stalled:
        s.close()

    rss = d.rss_kb()
    reader = socket.create_connection(("127.0.0.1", port), timeout=10)
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    request = b"GET /status.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    reader.setblocking(False)
    sent = 0
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        try:
            sent += reader.send(request * 64)
        except BlockingIOError:
            time.sleep(0.01)
        except OSError:
            break
    check(d.rss_kb() - rss < 8192, "RSS grew %d KiB for a reader that "
          "does not read" % (d.rss_kb() - rss))
    # Still not reading, past status.timeout: emberd closes it.  (Were it
    # read now, emberd would go on answering the requests queued, each
    # one giving the connection its time again: under the sanitizers,
    # many seconds of them.)
    time.sleep(4.5)
    reader.settimeout(20)

    def closed():
        deadline = time.monotonic() + 30
        try:
            while reader.recv(65536):
                if time.monotonic() > deadline:
                    return False	# still answering: never closed
            return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
    check(closed(), "the unread connection stays open")
    reader.close()
    check_eq(http_get(port, "/metrics")[0], 200, "served after")
    check(d.alive(), "emberd died")
    d.cleanup()


@no_daemon
def test_listen_errors_name_the_key(_):
    """A bad status.listen or status.users stops emberd with the key."""
    for sets, needle in (
            (["status.listen=localhost:80"], "status.listen"),
            (["status.listen=127.0.0.1:99999"], "status.listen"),
            (["status.listen=relative/path"], "status.listen"),
            (["status.listen=127.0.0.1:0",
              "status.users=no-such-user-here"], "status.users")):
        tmp = Daemon(start=False)
        args = tmp.argv()
        for s in sets:
            args += ["--set", s]
        r = subprocess.run(args, capture_output=True, text=True, timeout=20)
        check(r.returncode != 0, "emberd started with %r" % sets)
        check(needle in r.stderr, "%r: %r" % (sets, r.stderr[-500:]))
        tmp.cleanup()


@with_daemon(sets=["status.users=*"])
def test_off_by_default(d):
    """No status.listen, no listener: emberd opens no TCP socket."""
    with d.client() as c:
        c.count(range_plan(0, 10, 1))
    check("status: listening" not in d.log_text(), "a listener started")
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % d.pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (d.pid, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    with open("/proc/net/tcp") as f4, open("/proc/net/tcp6") as f6:
        listening = [line.split()[9] for line in
                     f4.read().splitlines()[1:] + f6.read().splitlines()[1:]
                     if line.split()[3] == "0A"]
    check(not inodes & set(listening), "emberd listens on TCP")


def unix_get(path, target):
    """The whole reply to GET target on the Unix socket at path."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    s.sendall(b"GET %s HTTP/1.0\r\n\r\n" % target.encode())
    out = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    s.close()
    return out


@no_daemon
def test_unix_socket_listener(_):
    """status.listen as a Unix socket path serves the same pages."""
    d = Daemon(start=False)
    path = d.path("status.sock")
    d.sets = ["status.listen=" + path]
    d.start()
    out = unix_get(path, "/metrics")
    head, _, body = out.partition(b"\r\n\r\n")
    check(head.startswith(b"HTTP/1.0 200") or head.startswith(b"HTTP/1.1 200"),
          "reply: %r" % head[:100])
    check_exposition(body.decode())
    check_eq(os.stat(path).st_mode & 0o777, 0o666, "socket mode")
    d.stop()
    check(not os.path.exists(path), "the socket file is left behind")
    d.cleanup()


@no_daemon
def test_unix_listener_in_use_is_not_taken(_):
    """A second emberd whose status.listen names a socket the first
    serves on refuses to start, naming the key, and leaves the first's
    socket alone (a stale one it would replace)."""
    d = Daemon(start=False)
    path = d.path("status.sock")
    d.sets = ["status.listen=" + path]
    d.start()
    tmp = Daemon(start=False)
    r = subprocess.run(tmp.argv() + ["--set", "status.listen=" + path],
                       capture_output=True, text=True, timeout=20)
    check(r.returncode != 0, "a second emberd took the status socket")
    check("status.listen" in r.stderr and "listening there" in r.stderr,
          "the refusal: %r" % r.stderr[-500:])
    check(unix_get(path, "/metrics").startswith(b"HTTP/1."),
          "the first still serves")
    tmp.cleanup()
    d.stop()
    d.cleanup()


@skip_unless(ipv6_loopback(), "no IPv6 loopback on this machine")
@with_daemon(sets=["status.listen=[::1]:0"])
def test_ipv6_loopback_listener(d):
    """status.listen = [::1]:PORT serves the metrics over IPv6."""
    found = []

    def listening():
        m = re.search(r"status: listening on \[::1\]:(\d+)", d.log_text())
        if m:
            found.append(int(m.group(1)))
        return bool(found)
    check(wait_until(listening, 5), "no [::1] listener in the log")
    conn = http.client.HTTPConnection("::1", found[0], timeout=10)
    conn.request("GET", "/metrics", headers={"Host": "[::1]:%d" % found[0]})
    r = conn.getresponse()
    check_eq(r.status, 200, "/metrics over IPv6")
    check_exposition(r.read().decode())
    conn.close()


@no_daemon
def test_sighup_moves_the_listener(_):
    """A SIGHUP after status.listen changed in the conf file closes the old
    listener and opens the new one."""
    d = Daemon(start=False)
    conf = d.path("ember.conf")
    first, second = d.path("first.sock"), d.path("second.sock")
    write_file(conf, "[status]\nlisten = %s\n" % first)
    d.conf = conf
    d.start()
    check(os.path.exists(first), "no first socket")
    write_file(conf, "[status]\nlisten = %s\n" % second)
    d.signal(signal.SIGHUP)
    check(wait_until(lambda: os.path.exists(second), 10),
          "no second socket after SIGHUP")
    check(not os.path.exists(first), "the first socket is left")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(second)
    s.sendall(b"GET /status.json HTTP/1.0\r\n\r\n")
    check(s.recv(100).startswith(b"HTTP/1."), "no reply on the new socket")
    s.close()
    d.cleanup()


if __name__ == "__main__":
    run_tests(globals())
