"""
Checkpoints under attack by a local user: hostile manifests in her own
reliable-checkpoint directory, a checkpoint.dir inside a directory a user
owns, and bytes written straight into her checkpoint directories.

Run as root (as CI does), emberd runs as root and the attacks come from
two unprivileged users the tests create (tests/integration/users.py); not
root, the tests say so and do nothing.
"""

import os
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *	# noqa: E402,F403
from users import *	# noqa: E402,F403

SHARED = ["daemon.socket_mode=0666"]
MB = 1024 * 1024


def small_plan(n=100, parts=2):
    return {"source": {"range": {"start": 0, "end": n}}, "partitions": parts,
            "ops": []}


def checkpoint(c, plan, **options):
    return c.request({"op": "execute", "plan": plan, "action": "checkpoint",
                      "options": options})


def checkpoint_ok(c, plan, **options):
    reply = checkpoint(c, plan, **options)
    if not reply.get("ok"):
        raise RequestFailed(reply)
    return reply["checkpoint"]


def reliable_dir(d, uid):
    return os.path.join(d.tmpdir, "checkpoints", str(uid))


def local_dir(d, uid):
    return os.path.join(d.socket + ".local", "checkpoints", str(uid))


def vm_hwm_kb(pid):
    """Peak resident set size of pid in kB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM for pid %d" % pid)


def give(path, tag):
    os.chown(path, USERS[tag][0], USERS[tag][1])


def cleans_of(d, uid):
    """How many cleans of uid's directories a helper answered."""
    return d.log_text().count("(checkpoint_clean, uid %d): answered" % uid)


@needs_users
@with_daemon(sets=SHARED, start=False)
def test_checkpoint_dir_in_a_users_directory(d):
    """A checkpoint.dir under a directory user a owns is refused at start:
    a could swap b's checkpoints for her own files."""
    home = d.path("home_a")
    os.mkdir(home, 0o755)
    give(home, "a")
    d.sets.append("checkpoint.dir=" + os.path.join(home, "checkpoints"))
    d.start()
    check("checkpoint.dir: %s" % home in d.log_text(),
          "start-up log: %s" % d.log_tail())
    sock = d.socket

    def try_b():
        with Client(sock) as c:
            r = checkpoint(c, small_plan())
            return [r.get("ok"), r.get("error", {}).get("class"),
                    r.get("error", {}).get("message")]
    ok, cls, msg = as_user("b", try_b)
    check(not ok, "b's reliable checkpoint was made under a's directory")
    check_eq(cls, "CHECKPOINT_FAILED", "class")
    check(home in msg and "owned by uid %d" % USERS["a"][0] in msg,
          "the message: %s" % msg)


if __name__ == "__main__":
    run_tests(globals())
