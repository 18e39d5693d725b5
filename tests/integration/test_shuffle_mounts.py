"""
Each uid's shuffle directory is a tmpfs of its own, sized by
daemon.max_shuffle_per_uid, in a mount namespace of emberd's
(daemon/shufflefs.c).  A user's code can write into its shuffle directory
whatever it likes, and say it wrote anything: the kernel still stops it at
the bound, the files go with the uid's last operation in stages, and
nothing of it reaches local_dir's filesystem or the host's mounts.

The tests look at what emberd sees through /proc/PID/root and
/proc/PID/mountinfo.  Where emberd cannot make its namespace (not root,
no CAP_SYS_ADMIN), they say why and skip.
"""

import os
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *	# noqa: E402,F403
from users import *	# noqa: E402,F403

SHARED = ["daemon.socket_mode=0666"]
JUNK = 20 << 20		# what the attack writes per map task


def bounds(d):
    return d.client().status()["shuffle_bounds"]


def _namespace_why():
    """Why emberd cannot make a mount namespace here, or None."""
    if os.geteuid() != 0:
        return "not root"
    r = subprocess.run(["unshare", "--mount", "true"], capture_output=True,
                       text=True)
    if r.returncode != 0:
        return "unshare --mount: %s" % r.stderr.strip()
    return None


NAMESPACE_WHY = _namespace_why()


def skip_unless_mounted(d, name):
    """Skip, saying why, where no mount namespace can be made; else
    emberd must have made one."""
    if NAMESPACE_WHY is not None:
        print("skip %s: no mount namespace here: %s" % (name, NAMESPACE_WHY))
        return True
    b = d.client().status().get("shuffle_bounds")
    check(b is not None and b["by"] == "tmpfs per user",
          "shuffle_bounds: %r" % b)
    return False


def host_dir(d, uid):
    """The uid's shuffle directory as the host sees it."""
    return os.path.join(d.socket + ".local", "shuffle", str(uid))


def in_emberd(d, path):
    """path as resolved in emberd's mount namespace."""
    return "/proc/%d/root%s" % (d.pid, path)


def shuffle_mounts(pid="self"):
    """The ember-shuffle mounts /proc/PID/mountinfo lists: {mount point:
    its super options}."""
    found = {}
    with open("/proc/%s/mountinfo" % pid) as f:
        for line in f:
            left, right = line.split(" - ", 1)
            fstype, source, opts = right.split()[:3]
            if source.startswith("ember-shuffle-"):
                found[left.split()[4]] = opts
    return found


def disk_bytes(top):
    """The bytes the files under top take on their filesystem."""
    total = 0
    for root, dirs, files in os.walk(top):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def sort_plan(n=20000, partitions=4):
    return records_plan(["%05d" % ((i * 7919) % n) for i in range(n)],
                        partitions, ops=[{"key_by": {}}, {"sort_by": {}}])


def hold_stream(d):
    """A client whose sort has its map stage done and partition 0 read:
    its operation holds the uid's shuffle directory."""
    c = d.client()
    c.held = c.execute_ok(sort_plan(), "iterate",
                          {"prefetch": 0})["operation"]
    c.write_int(REQUEST_NEXT)
    status, part = c.read_partition()
    check_eq(status, STREAM_PARTITION, "the held stream's partition 0")
    c.got = list(part)
    return c


def end_stream(c):
    """Read a held stream to its end and release it; its records."""
    while True:
        c.write_int(REQUEST_NEXT)
        status, part = c.read_partition()
        if status == STREAM_DONE:
            break
        check_eq(status, STREAM_PARTITION, "the held stream")
        c.got += part
    c.request_ok({"op": "release", "operation": c.held, "all": True})
    c.close()
    return len(c.got)


def attack_plan(top):
    """Map tasks whose code (a pipe, as the user) writes JUNK bytes into
    the uid's shuffle directory, outside its operation's own, ignores
    whatever the write says, and passes its records on."""
    cmd = ("head -c %d /dev/zero > %s/junk.$$ 2>/dev/null; cat" %
           (JUNK, top))
    return range_plan(0, 1000, 2, ops=[{"pipe": {"command": cmd}},
                                      {"key_by": {}},
                                      {"group_by_key": {}}])


@needs_users
@with_daemon(sets=SHARED + ["daemon.max_shuffle_per_uid=1m"])
def test_a_user_cannot_fill_local_dir(d):
    """User a's map tasks write 20 MiB each into a's shuffle directory
    with max_shuffle_per_uid at 1m: the kernel stops them, the operation
    fails saying which key bounds it, local_dir's filesystem gets none
    of it, and it all goes with a's last operation in stages.  User b's
    sort runs through it."""
    if skip_unless_mounted(d, "test_a_user_cannot_fill_local_dir"):
        return
    a_uid, b_uid = USERS["a"][0], USERS["b"][0]
    top = host_dir(d, a_uid)

    def b_sorts(ctl):
        c = hold_stream(d)
        ctl.ready(1)
        ctl.wait_go()
        return end_stream(c)

    def a_attacks(ctl):
        held = hold_stream(d)
        with d.client() as c:
            r = c.execute(attack_plan(top), "count")
        ctl.ready(r)
        ctl.wait_go()
        return end_stream(held)

    b = AsUser(USERS["b"], b_sorts)
    b.wait_ready()
    a = AsUser(USERS["a"], a_attacks)
    r = a.wait_ready()
    msg = check_error(r, "TASK_FAILED", "No space left on device",
                      "daemon.max_shuffle_per_uid")
    # What landed, as emberd sees it: in a's mount, at most its size.
    mounts = shuffle_mounts(d.pid)
    check_eq(mounts.get(top, "").split(",")[1:2], ["size=1024k"],
             "a's mount in emberd's namespace (%r)" % mounts)
    check(host_dir(d, b_uid) in mounts, "b's mount: %r" % mounts)
    junk = disk_bytes(in_emberd(d, top))
    check(junk <= (1 << 20), "a's files take %d bytes" % junk)
    check(any(n.startswith("junk.") for n in
              os.listdir(in_emberd(d, top))), "the attack wrote nothing")
    # The host sees neither the mounts nor the files.
    check_eq(shuffle_mounts(), {}, "ember-shuffle mounts on the host")
    local = disk_bytes(d.socket + ".local")
    check(local < (1 << 20), "%d bytes in local_dir on its own "
          "filesystem" % local)
    check_eq(os.listdir(top), [], "a's directory on the host")
    a.go()
    check_eq(a.result(), 20000, "a's own sort")
    # a's last operation in stages ended: its mount and files are gone.
    check(wait_until(lambda: top not in shuffle_mounts(d.pid), 10),
          "a's mount outlived a's operations: %r" % shuffle_mounts(d.pid))
    check(not os.path.exists(in_emberd(d, top)), "a's directory is left")
    b.go()
    check_eq(b.result(), 20000, "b's sort")
    check(wait_until(lambda: shuffle_mounts(d.pid) == {}, 10),
          "mounts left: %r" % shuffle_mounts(d.pid))
    check(d.alive(), "emberd died")


@no_daemon
def test_sighup_resizes_live_mounts(_):
    """A SIGHUP that changes max_shuffle_per_uid remounts the live
    mounts with the new size."""
    conf_dir = tempfile.mkdtemp(prefix="ember-conf-")
    conf = os.path.join(conf_dir, "ember.conf")
    try:
        write_file(conf, b"[daemon]\nmax_shuffle_per_uid = 1m\n")
        with Daemon(conf=conf) as d:
            if skip_unless_mounted(d, "test_sighup_resizes_live_mounts"):
                return
            top = host_dir(d, 0)
            c = hold_stream(d)
            check_eq(shuffle_mounts(d.pid).get(top, "").split(",")[1:2],
                     ["size=1024k"], "the mount's size at start")
            write_file(conf, b"[daemon]\nmax_shuffle_per_uid = 3m\n")
            d.signal(signal.SIGHUP)
            check(wait_until(lambda: shuffle_mounts(d.pid).get(
                top, "").split(",")[1:2] == ["size=3072k"], 10),
                "the mount after SIGHUP: %r" % shuffle_mounts(d.pid))
            check_eq(bounds(d)["max_per_uid"], 3 << 20, "status' bound")
            check_eq(end_stream(c), 20000, "the held sort")
            check(wait_until(lambda: shuffle_mounts(d.pid) == {}, 10),
                  "mounts left: %r" % shuffle_mounts(d.pid))
    finally:
        for name in os.listdir(conf_dir):
            os.unlink(os.path.join(conf_dir, name))
        os.rmdir(conf_dir)


def test_a_crash_leaves_no_mount_and_no_files(d):
    """A SIGKILL of emberd ends its namespace: the mount and what it held
    go with it, and the next start runs stages on the same path."""
    if skip_unless_mounted(d, "test_a_crash_leaves_no_mount_and_no_files"):
        return
    top = host_dir(d, 0)
    c = hold_stream(d)
    check(os.listdir(in_emberd(d, top)) != [], "no shuffle files held")
    check(top in shuffle_mounts(d.pid), "no mount in emberd's namespace")
    d.signal(signal.SIGKILL)
    d.wait()
    d.kill_leftovers()
    c.close()
    check_eq(shuffle_mounts(), {}, "ember-shuffle mounts on the host")
    check(not os.path.exists(top) or os.listdir(top) == [],
          "files on the host: %r" % os.listdir(top))
    d.start()
    check_eq(d.client().count(sort_plan()), 20000, "a sort after the start")
    check(wait_until(lambda: shuffle_mounts(d.pid) == {}, 10),
          "mounts left: %r" % shuffle_mounts(d.pid))
    # A crash leaves the mount point, root's: a start without mounts
    # removes it, rather than refuse it as no user's directory.
    d.signal(signal.SIGKILL)
    d.wait()
    d.kill_leftovers()
    d.sets.append("daemon.shuffle_mounts=no")
    d.start()
    check_eq(d.client().count(sort_plan()), 20000,
             "a sort after a start without mounts")


def test_status_says_how_shuffle_files_are_bounded(d):
    b = bounds(d)
    check(b["by"] in ("tmpfs per user", "as reported"), "by: %r" % b)
    check_eq(b["max_per_uid"], 16 << 30, "max_per_uid")
    if b["by"] == "as reported":
        check(b.get("why"), "no reason given: %r" % b)
    elif os.geteuid() == 0:
        check("shuffle bounds: a tmpfs per user" in d.log_text(),
              "the start's log line")


@with_daemon(sets=["daemon.shuffle_mounts=no"])
def test_shuffle_mounts_no_keeps_plain_directories(d):
    b = bounds(d)
    check_eq(b["by"], "as reported", "by")
    want = "shuffle_mounts is no" if os.geteuid() == 0 else "not root"
    check(want in b["why"], "why: %r" % b["why"])
    check_eq(d.client().count(sort_plan()), 20000, "a sort")
    check_eq(shuffle_mounts(d.pid), {}, "mounts with shuffle_mounts=no")


if __name__ == "__main__":
    run_tests(globals())
