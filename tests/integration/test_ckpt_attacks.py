"""
Checkpoints under attack by a local user: hostile manifests in her own
reliable-checkpoint directory, a checkpoint.dir inside a directory a user
owns (and the tree swapped under emberd's feet), and bytes written
straight into her checkpoint directories.

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
@with_daemon(sets=SHARED + ["checkpoint.clean_interval=300ms"])
def test_hostile_manifests(d):
    """Ten 3 MB manifests of {"a":[{},{},...]} in a's own directory: the
    cleaner's scans leave emberd small and b's status quick."""
    uid_a = USERS["a"][0]
    sock = d.socket

    def make():
        with Client(sock) as c:
            return checkpoint_ok(c, small_plan())
    cid = as_user("a", make)
    top = reliable_dir(d, uid_a)
    body = '{"a":[' + ",".join(["{}"] * MB) + "]}"
    for _ in range(10):
        path = os.path.join(top, str(uuid.uuid4()))
        os.mkdir(path, 0o700)
        write_file(os.path.join(path, "manifest.json"), body)
        give(os.path.join(path, "manifest.json"), "a")
        give(path, "a")
    before = cleans_of(d, uid_a)

    def poll():
        worst = 0.0
        with Client(sock) as c:
            end = time.monotonic() + 4
            while time.monotonic() < end:
                t = time.monotonic()
                c.status()
                worst = max(worst, time.monotonic() - t)
                time.sleep(0.02)
        return worst
    worst = as_user("b", poll)
    check(wait_until(lambda: cleans_of(d, uid_a) >= before + 2, 60),
          "the cleaner did not scan a's directory twice: %s" % d.log_tail())
    hwm = vm_hwm_kb(d.pid)
    check(hwm < 400 * 1024, "emberd's peak RSS is %d kB" % hwm)
    check(worst < 1.0, "b's status took %.2fs" % worst)

    def still():
        with Client(sock) as c:
            return c.count({"source": {"checkpoint": cid}, "ops": []})
    check_eq(as_user("a", still), 100, "a's own checkpoint")


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
    # Logged at start-up; the socket takes connections before that.
    check(wait_until(lambda: "checkpoint.dir: %s" % home in d.log_text(),
                     10), "start-up log: %s" % d.log_tail())
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


@needs_users
@with_daemon(sets=SHARED + ["checkpoint.clean_interval=200ms",
                            "daemon.max_checkpoint_bytes_per_uid=1m"])
def test_bytes_written_directly(d):
    """a writes 2 MB into each of her checkpoint directories behind
    emberd's back: the bytes are charged (status shows them, the bytes
    limit refuses her next checkpoint) and what no checkpoint owns is
    removed by the cleaner, however its times were set."""
    uid_a = USERS["a"][0]
    sock = d.socket
    future = time.time() + 3600

    def attack(ctl):
        out = {}
        with Client(sock) as c:
            rel = checkpoint_ok(c, small_plan())
            loc = checkpoint_ok(c, small_plan(), local=True)
            junk = []
            for top, cid in ((reliable_dir(d, uid_a), rel),
                             (local_dir(d, uid_a), loc)):
                with open(os.path.join(top, cid, "part-00000"), "ab") as f:
                    f.write(os.urandom(2 * MB))
                inside = os.path.join(top, cid, "junk")
                write_file(inside, "x" * MB)
                stray = os.path.join(top, "stray")
                os.mkdir(stray)
                write_file(os.path.join(stray, "big"), "y" * MB)
                for p in (inside, stray, os.path.join(stray, "big")):
                    try:
                        os.utime(p, (future, future))
                    except FileNotFoundError:
                        pass	# the cleaner was quicker: as well
                junk += [inside, stray]
            ctl.ready(junk)

            def charged():
                return sum(e["bytes"] for e in c.status()["checkpoints"])
            wait_until(lambda: charged() >= 4 * MB, 10)
            out["charged"] = charged()
            r = checkpoint(c, small_plan())
            out["next"] = r.get("error", {}).get("class")
            out["message"] = r.get("error", {}).get("message")
            out["count"] = c.count({"source": {"checkpoint": rel},
                                    "ops": []})
        return out
    child = AsUser(USERS["a"], attack)
    junk = child.wait_ready()
    gone = wait_until(lambda: not any(os.path.exists(p) for p in junk), 10)
    out = child.result()
    check(gone, "the cleaner left %r" % [p for p in junk
                                         if os.path.exists(p)])
    check(out["charged"] >= 4 * MB, "a is charged %d bytes" % out["charged"])
    check_eq(out["next"], "LIMIT_EXCEEDED", "a's next checkpoint")
    check("daemon.max_checkpoint_bytes_per_uid" in (out["message"] or ""),
          "message: %r" % out["message"])
    check_eq(out["count"], 100, "a's checkpoint, read after")


@needs_users
@with_daemon(sets=SHARED)
def test_swapped_checkpoint_dir(d):
    """checkpoint.dir swapped under a running emberd (as the owner of its
    parent could, were it allowed) for a tree holding forged partition
    files in b's name: b's reads and writes go through the directories
    emberd opened, never the names, and never see the forgery."""
    import struct
    uid_b = USERS["b"][0]
    sock = d.socket

    def make():
        with Client(sock) as c:
            return checkpoint_ok(c, small_plan())
    cid = as_user("b", make)
    real = os.path.join(d.tmpdir, "checkpoints")
    os.rename(real, real + ".real")
    forged = os.path.join(reliable_dir(d, uid_b), cid)
    os.makedirs(forged)
    for p in range(2):
        frame = b"rm -rf ~"
        write_file(os.path.join(forged, "part-%05d" % p), "")
        with open(os.path.join(forged, "part-%05d" % p), "wb") as f:
            f.write(struct.pack(">i", len(frame)) + frame +
                    struct.pack(">i", -1))
    for root, dirs, files in os.walk(reliable_dir(d, uid_b)):
        for n in dirs + files + ["."]:
            give(os.path.join(root, n), "b")

    def read():
        with Client(sock) as c:
            c.execute_ok({"source": {"checkpoint": cid}, "ops": []},
                         "collect")
            got = [r.decode() for part in c.read_stream(False)
                   for r in part]
            r = checkpoint(c, small_plan())
            return [got, r.get("checkpoint", repr(r))]
    got, new = as_user("b", read)
    check("rm -rf ~" not in got, "b read the forged records")
    check_eq(sorted(got, key=int), [str(i) for i in range(100)],
             "b's records")
    check(os.path.isdir(os.path.join(real + ".real", str(uid_b), new)),
          "b's new checkpoint is not in the directory emberd opened")
    check(not os.path.exists(os.path.join(reliable_dir(d, uid_b), new)),
          "b's new checkpoint went where the name now points")


if __name__ == "__main__":
    run_tests(globals())
