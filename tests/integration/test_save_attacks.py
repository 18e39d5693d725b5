"""
The save action's commit under attack: links planted and swapped while a
save runs, saves to places the user cannot write, one user's saves against
another's output, saves racing for one path, and a task started again after
its worker was killed halfway through its part file.

Run as root (as CI does), emberd runs as root and the attacks come from
two unprivileged users the tests create (tests/integration/users.py); not
root, the tests that need them say so and do nothing.  Each test checks
that the files outside the save's own are exactly as they were.
"""

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *	# noqa: E402,F403
from users import *	# noqa: E402,F403


def parts(path):
    """The part files in path, sorted."""
    return sorted(n for n in os.listdir(path) if n.startswith("part-"))


def check_saved(out, n):
    """out holds n part files, _SUCCESS, and nothing else."""
    check_eq(sorted(os.listdir(out)),
             ["_SUCCESS"] + ["part-%05d" % i for i in range(n)],
             "what %s holds" % out)


@no_daemon
def test_reuse_switched_mid_save(_):
    """A SIGHUP that turns workers.reuse off while a save runs kills the
    worker that had started the next partition's part file; the partition
    runs again on a new worker and must not trip over that file."""
    d = Daemon(conf=None, start=False)
    conf = write_file(d.path("ember.conf"),
                      "[workers]\nmax = 1\nreuse = true\n")
    d.conf = conf
    d.start()
    out = d.path("out")
    c = d.client()
    plan = range_plan(0, 8, 4, ops=[{"pipe": {"command": "cat; sleep 0.5"}}])
    c.send_json({"op": "execute", "plan": plan, "action": "save",
                 "options": {"path": out}})
    d.worker_running("sleep 0.5")
    write_file(conf, "[workers]\nmax = 1\nreuse = false\n")
    d.signal(signal.SIGHUP)
    r = c.recv_json()
    check(r.get("ok"), "the save failed: %r" % r)
    check_eq((r["files"], r["records"]), (4, 8), "files and records")
    check_saved(out, 4)
    lines = []
    for p in parts(out):
        with open(os.path.join(out, p), "rb") as f:
            lines += f.read().splitlines()
    check_eq(lines, numbers(8), "saved records")


if __name__ == "__main__":
    run_tests(globals())
