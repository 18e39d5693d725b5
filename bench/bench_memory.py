#!/usr/bin/env python3
"""bench_memory: what emberd holds per idle session and per detached
operation, and what it gives back once they are gone.

Each round, against one emberd (its pid from `status`, its figures from
the /metrics of its status listener):

- bare: N connections that say nothing (not even hello): emberd's price
  of an accepted connection, the baseline a session is read against;
  then closed;
- sessions: N connections, each with its own session (hello, then
  nothing); the bytes per session; then each closes its session
  (close_session) and its connection, and what is left over the start
  of the round is printed;
- detached: N iterate operations of one partition (a range of 10
  records), each on a connection of one session that asks for the
  partition, reads its "1" and is reset: the records sit in the
  operation's retry buffer, the operation detached; the bytes per
  operation; then one connection releases them all, and what is left.

After the rounds, once: N more detached operations, left to the reaper
(the emberd's operation.detached_timeout, given as --detached-timeout),
and what is left once it has removed them all: their tombstones, at
most operation.tombstones of one uid.

emberd is quiet between the phases: no session, no operation, no more
descriptors than at the start, as its /metrics says (a status of 10,000
operations would allocate megabytes of JSON itself).  Memory is emberd's
heap in use, ember_heap_in_use_bytes of its /metrics
(mallinfo2: malloc'd and not freed), so that what one round freed and
the allocator kept does not hide the next round's cost, and a leak shows
in what is left.  /proc/PID/smaps_rollup's Private_Dirty (every page
emberd wrote, the heap the allocator keeps included) is printed beside
it: its growth over the first round is what the kernel charges; what
each round keeps (read once it settles: emberd gives pages back on a
tick) is printed against what the round held at its peak.  The
figures are medians over the rounds.  The emberd needs room
for N connections and operations of one uid (daemon.max_connections*,
daemon.max_operations*) and this process N descriptors (raised here to
the hard limit).

usage: bench_memory.py --socket PATH --status HOST:PORT [--count N]
                       [--runs N] [--detached-timeout SECONDS]
"""

import argparse
import json
import resource
import socket
import statistics
import struct
import sys
import time

REQUEST_NEXT = 1
STREAM_PARTITION = 1
PLAN = {"source": {"range": {"start": 0, "end": 10}}, "partitions": 1}


class Conn:
    """One raw client connection (docs/protocol.md section 1)."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # Blocking: a full listen backlog makes connect wait, not fail.
        self.sock.connect(path)
        self.sock.settimeout(60)

    def recv_exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise RuntimeError("emberd closed the connection")
            buf += chunk
        return buf

    def read_int(self):
        return struct.unpack(">i", self.recv_exact(4))[0]

    def request(self, obj):
        data = json.dumps(obj).encode()
        self.sock.sendall(struct.pack(">i", len(data)) + data)
        reply = json.loads(self.recv_exact(self.read_int()))
        if not reply.get("ok"):
            raise RuntimeError("%s: %r" % (obj.get("op"), reply))
        return reply

    def hello(self, session=None):
        req = {"op": "hello", "version": 1}
        if session is not None:
            req["session"] = session
        return self.request(req)["session"]

    def close(self, reset=False):
        if reset:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                 struct.pack("ii", 1, 0))
        self.sock.close()


STATUS = None		# (host, port) of emberd's status listener


def metrics():
    """emberd's /metrics samples: {'name{labels}': value}."""
    s = socket.create_connection(STATUS, timeout=30)
    s.sendall(("GET /metrics HTTP/1.1\r\nHost: %s:%d\r\nConnection: "
               "close\r\n\r\n" % STATUS).encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    samples = {}
    for line in data.decode().split("\r\n\r\n", 1)[-1].splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def memory_kb(pid, m=None):
    """(heap in use, Private_Dirty) of emberd in kB."""
    if m is None:
        m = metrics()
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            parts = line.split()
            if parts[0] == "Private_Dirty:":
                dirty = int(parts[1])
    return m["ember_heap_in_use_bytes"] / 1024.0, dirty


def settled_dirty(pid, settle=1.0, timeout=10.0):
    """Private_Dirty in kB once it holds within 64 kB for settle seconds:
    emberd gives freed pages back on a tick, not at the instant the last
    client went (at most timeout seconds)."""
    def dirty():
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Private_Dirty:"):
                    return int(line.split()[1])
    end = time.monotonic() + timeout
    last = dirty()
    while True:
        time.sleep(settle)
        now = dirty()
        if abs(now - last) < 64 or time.monotonic() > end:
            return now
        last = now


def wait_for(what, pred, timeout=120):
    """Poll /metrics until pred(samples) holds; return them."""
    end = time.monotonic() + timeout
    while True:
        m = metrics()
        if pred(m):
            return m
        if time.monotonic() > end:
            sys.exit("bench_memory: emberd never had %s" % what)
        time.sleep(0.05)


def held(m):
    """Sessions and operations emberd holds."""
    return m["ember_sessions"] + sum(
        m['ember_operations{state="%s"}' % s]
        for s in ("attached", "detached", "complete"))


def quiet(pid, fds):
    """Wait until emberd holds no session, no operation and no more
    descriptors than fds, then read its memory."""
    m = wait_for("no sessions, operations and connections left",
                 lambda m: held(m) == 0 and m["process_open_fds"] <= fds)
    return memory_kb(pid, m)


def per(held, start, n):
    """Bytes per item of (heap, Private_Dirty) growth."""
    return ((held[0] - start[0]) * 1024.0 / n,
            (held[1] - start[1]) * 1024.0 / n)


def detach(path, session, n):
    """n iterates on session, each detached with its records sent: their
    ids."""
    ops = []
    for _ in range(n):
        c = Conn(path)
        c.hello(session)
        reply = c.request({"op": "execute", "plan": PLAN,
                           "action": "iterate"})
        c.sock.sendall(struct.pack(">i", REQUEST_NEXT))
        if c.read_int() != STREAM_PARTITION:
            sys.exit("bench_memory: no partition")
        c.close(reset=True)
        ops.append(reply["operation"])
    return ops


def expire(path, pid, fds, n, timeout):
    """n detached operations left to the reaper: the heap per operation,
    and what is left (kB) once they are reaped."""
    start = quiet(pid, fds)
    owner = Conn(path)
    session = owner.hello()
    detach(path, session, n)
    m = wait_for("%d detached operations" % n,
                 lambda m: m['ember_operations{state="detached"}'] >= n)
    per_op = per(memory_kb(pid, m), start, n)[0]
    wait_for("the detached operations reaped",
             lambda m: m['ember_operations{state="detached"}'] == 0,
             timeout=timeout + 60)
    left = memory_kb(pid)[0] - start[0]
    owner.request({"op": "close_session"})
    owner.close()
    quiet(pid, fds)
    return per_op, left


def round_(path, pid, fds, n, base_dirty):
    """One round of the three phases: its figures and the memory at its
    end.  base_dirty: emberd's Private_Dirty at rest before the rounds,
    which the round's peak and what it keeps are read against."""
    out = {}
    start = quiet(pid, fds)

    conns = [Conn(path) for _ in range(n)]
    m = wait_for("%d connections" % n,
                 lambda m: m["process_open_fds"] >= fds + n)
    held = memory_kb(pid, m)
    peak = held[1]
    out["bare_b"], out["bare_dirty_b"] = per(held, start, n)
    for c in conns:
        c.close()
    end = quiet(pid, fds)
    out["bare_left_kb"] = end[0] - start[0]

    start = end
    conns = []
    for _ in range(n):
        c = Conn(path)
        c.hello()
        conns.append(c)
    held = memory_kb(pid)
    peak = max(peak, held[1])
    out["session_b"], out["session_dirty_b"] = per(held, start, n)
    for c in conns:
        c.request({"op": "close_session"})
        c.close()
    end = quiet(pid, fds)
    out["session_left_kb"] = end[0] - start[0]

    start = end
    owner = Conn(path)
    session = owner.hello()
    ops = detach(path, session, n)
    m = wait_for("%d detached operations" % n,
                 lambda m: m['ember_operations{state="detached"}'] >= n and
                 m["process_open_fds"] <= fds + 1)
    held = memory_kb(pid, m)
    peak = max(peak, held[1])
    out["detached_b"], out["detached_dirty_b"] = per(held, start, n)
    for op in ops:
        owner.request({"op": "release", "operation": op, "all": True})
    owner.request({"op": "close_session"})
    owner.close()
    end = quiet(pid, fds)
    out["detached_left_kb"] = end[0] - start[0]
    out["at_once_dirty_kb"] = end[1] - base_dirty
    end = (end[0], settled_dirty(pid))
    out["peak_dirty_kb"] = peak - base_dirty
    out["kept_dirty_kb"] = end[1] - base_dirty
    return out, end


def main():
    global STATUS
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--status", required=True, help="HOST:PORT")
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--detached-timeout", type=float, default=0,
                    help="the emberd's operation.detached_timeout in "
                    "seconds; 0: no expiry phase")
    args = ap.parse_args()
    host, port = args.status.rsplit(":", 1)
    STATUS = (host, int(port))

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < args.count + 64:
        sys.exit("bench_memory: RLIMIT_NOFILE %d is below %d connections"
                 % (hard, args.count))
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    # One warm-up operation, so that a worker and its pool are there.
    c = Conn(args.socket)
    c.hello()
    pid = c.request({"op": "status"})["pid"]
    first = memory_kb(pid)
    c.request({"op": "execute", "plan": PLAN, "action": "count"})
    c.request({"op": "close_session"})
    c.close()
    wait_for("the warm-up gone", lambda m: held(m) == 0)
    time.sleep(0.5)
    fds = metrics()["process_open_fds"]
    start = quiet(pid, fds)
    start = (start[0], settled_dirty(pid))
    print("emberd %d at rest: heap in use %.0f kB, Private_Dirty %d kB "
          "(before the warm-up %.0f kB)" % (pid, start[0], start[1],
                                            first[0]))

    rounds = []
    for i in range(args.runs):
        r, end = round_(args.socket, pid, fds, args.count, start[1])
        rounds.append(r)
        print("round %d (%d each): bare connection %.0f B (Private_Dirty "
              "%.0f B), left %.0f kB | session %.0f B (%.0f B), left %.0f "
              "kB | detached operation %.0f B (%.0f B), left %.0f kB | "
              "now heap %.0f kB, Private_Dirty %d kB (at its peak %d kB "
              "over the start, kept %d kB, at once %d kB)" %
              (i + 1, args.count, r["bare_b"], r["bare_dirty_b"],
               r["bare_left_kb"], r["session_b"], r["session_dirty_b"],
               r["session_left_kb"], r["detached_b"], r["detached_dirty_b"],
               r["detached_left_kb"], end[0], end[1], r["peak_dirty_kb"],
               r["kept_dirty_kb"], r["at_once_dirty_kb"]))
        sys.stdout.flush()
    print("after %d rounds: heap in use %.0f kB, %.0f kB over the start; "
          "Private_Dirty %d kB, %d kB over the start" %
          (args.runs, end[0], end[0] - start[0], end[1], end[1] - start[1]))

    if args.detached_timeout > 0:
        exp_b, exp_left = expire(args.socket, pid, fds, args.count,
                                 args.detached_timeout)
        print("expiry (%d detached operations left to the reaper): %.0f B "
              "each, left once reaped %.0f kB" % (args.count, exp_b,
                                                  exp_left))
        print("result mem_expired_b %.0f" % exp_b)
        print("result mem_expired_left_kb %.0f" % exp_left)

    def med(k):
        return statistics.median(r[k] for r in rounds)

    print("result mem_count %d" % args.count)
    for k in ("bare_b", "session_b", "detached_b"):
        print("result mem_%s %.0f" % (k, med(k)))
        print("result mem_%s_min %.0f" % (k, min(r[k] for r in rounds)))
        print("result mem_%s_max %.0f" % (k, max(r[k] for r in rounds)))
    for k in ("bare_left_kb", "session_left_kb", "detached_left_kb"):
        print("result mem_%s %.0f" % (k, med(k)))
    # The kernel's view: the first round's growth (later rounds reuse
    # what the allocator kept), and what the allocator keeps at the end.
    for k in ("bare_dirty_b", "session_dirty_b", "detached_dirty_b"):
        print("result mem_first_%s %.0f" % (k, rounds[0][k]))
    print("result mem_drift_kb %.0f" % (end[0] - start[0]))
    print("result mem_dirty_growth_kb %d" % (end[1] - start[1]))
    print("result mem_dirty_at_once_kb %d" % rounds[-1]["at_once_dirty_kb"])
    # What each round kept, against what it held at its peak.
    for k in ("kept_dirty_kb", "peak_dirty_kb"):
        print("result mem_%s %.0f" % (k, med(k)))
        print("result mem_%s_min %.0f" % (k, min(r[k] for r in rounds)))
        print("result mem_%s_max %.0f" % (k, max(r[k] for r in rounds)))
    print("result mem_kept_ratio %.3f" % statistics.median(
        r["kept_dirty_kb"] / max(r["peak_dirty_kb"], 1) for r in rounds))
    print("result mem_start_kb %.0f" % start[0])


if __name__ == "__main__":
    main()
