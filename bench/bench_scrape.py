#!/usr/bin/env python3
"""bench_scrape: what serving /metrics costs emberd's task throughput.

The task-overhead benchmark (bench_tasks: a count of many empty
partitions) runs in pairs, once with a scraper fetching /metrics from
emberd's status listener ten times a second and once without, the order
alternating from pair to pair so that neither side gets the quieter
machine.  The ratio of the two per-task times, pair by pair, is what
serving the metrics costs; its median over the pairs is the figure.
emberd's own CPU time per scrape, measured alone, says the same in
absolute terms.

usage: bench_scrape.py --socket PATH --status HOST:PORT [--pairs N]
                       [--partitions N] [--runs N] [--rate N]
                       [--tasks PROGRAM]
"""

import argparse
import http.client
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time


class Scraper(threading.Thread):
    """GET /metrics at a fixed rate on one keep-alive connection, as
    Prometheus does; every reply is checked.  A raw socket rather than
    http.client, whose header parsing would cost this machine more than
    the server's reply does."""

    REQUEST = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"

    def __init__(self, host, port, rate):
        super().__init__(daemon=True)
        self.host, self.port, self.period = host, port, 1.0 / rate
        self.stop = threading.Event()
        self.count = 0
        self.latencies = []
        self.error = None

    def fetch(self, sock):
        """One scrape: the body's length, checked."""
        sock.sendall(self.REQUEST)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                raise RuntimeError("the listener closed the connection")
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        m = re.search(rb"\r\nContent-Length: (\d+)", head)
        if not head.startswith(b"HTTP/1.1 200") or m is None:
            raise RuntimeError("bad reply: %r" % head[:200])
        while len(body) < int(m.group(1)):
            chunk = sock.recv(65536)
            if not chunk:
                raise RuntimeError("short reply")
            body += chunk
        if b"ember_tasks_completed_total" not in body:
            raise RuntimeError("a reply without the metrics")
        return len(body)

    def run(self):
        sock = socket.create_connection((self.host, self.port), timeout=10)
        next_at = time.monotonic()
        try:
            while not self.stop.is_set():
                t0 = time.monotonic()
                self.fetch(sock)
                self.latencies.append(time.monotonic() - t0)
                self.count += 1
                next_at += self.period
                self.stop.wait(max(0.0, next_at - time.monotonic()))
        except Exception as e:		# reported by the main thread
            self.error = e
        finally:
            sock.close()


def run_tasks(program, sock, partitions, runs):
    """One bench_tasks run (timed counts after a warm-up); its best
    microseconds per task, as the task-overhead figure is."""
    r = subprocess.run([program, "--socket", sock, "--partitions",
                        str(partitions), "--runs", str(runs), "--jobs", "1",
                        "--round-trips", "1"], capture_output=True,
                       text=True, timeout=600)
    if r.returncode != 0:
        sys.exit("bench_scrape: bench_tasks failed:\n" + r.stdout + r.stderr)
    m = re.search(r"^result task_us (\S+)$", r.stdout, re.M)
    return float(m.group(1))


def emberd_cpu(pid):
    """emberd's CPU time, in seconds: from schedstat (nanoseconds) where
    the kernel has it, else from stat (clock ticks)."""
    try:
        with open("/proc/%d/schedstat" % pid) as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        pass
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cost_per_scrape(host, port, n=1000):
    """emberd's CPU time per /metrics, scraped back to back n times."""
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request("GET", "/status.json")
    r = conn.getresponse()
    pid = int(re.search(rb'"pid":(\d+)', r.read()).group(1))
    size = 0
    before = emberd_cpu(pid)
    t0 = time.monotonic()
    for _ in range(n):
        conn.request("GET", "/metrics")
        r = conn.getresponse()
        size = len(r.read())
    took = time.monotonic() - t0
    cpu = emberd_cpu(pid) - before
    conn.close()
    return cpu / n * 1e6, took / n * 1e6, size


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--status", required=True, help="HOST:PORT")
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=100000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument("--tasks", default=os.path.join(
        os.environ.get("EMBER_BUILDDIR", "."), "bench", "bench_tasks"))
    a = ap.parse_args()
    host, port = a.status.rsplit(":", 1)
    port = int(port)

    cpu_us, wall_us, size = cost_per_scrape(host, port)
    print("one scrape alone: emberd CPU %.0f us, round trip %.0f us, "
          "%d bytes" % (cpu_us, wall_us, size))
    print("at %g scrapes/s: %.3f%% of one CPU" %
          (a.rate, cpu_us * a.rate / 1e4))

    off, on, ratios, scrapes, lat = [], [], [], 0, []
    for i in range(a.pairs):
        got = {}
        for scraped in ((False, True) if i % 2 == 0 else (True, False)):
            s = None
            if scraped:
                s = Scraper(host, port, a.rate)
                s.start()
            t0 = time.monotonic()
            got[scraped] = run_tasks(a.tasks, a.socket, a.partitions,
                                     a.runs)
            if s is not None:
                s.stop.set()
                s.join()
                if s.error is not None:
                    sys.exit("bench_scrape: scraper: %s" % s.error)
                rate = s.count / (time.monotonic() - t0)
                scrapes += s.count
                lat += s.latencies
        off.append(got[False])
        on.append(got[True])
        ratios.append(got[True] / got[False])
        print("pair %d: without scraper %.2f us/task, with %.2f us/task "
              "(%.1f scrapes/s), ratio %.4f" % (i + 1, got[False],
                                                got[True], rate,
                                                ratios[-1]))
    lat.sort()
    print("scrapes during the runs: %d, latency median %.2f ms, p99 %.2f "
          "ms" % (scrapes, statistics.median(lat) * 1e3,
                  lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3))
    print("result scrape_off_us %.2f" % statistics.median(off))
    print("result scrape_on_us %.2f" % statistics.median(on))
    print("result scrape_ratio %.4f" % statistics.median(ratios))
    print("result scrape_cpu_us %.0f" % cpu_us)
    print("result scrape_bytes %d" % size)
    print("result scrape_count %d" % scrapes)


if __name__ == "__main__":
    main()
