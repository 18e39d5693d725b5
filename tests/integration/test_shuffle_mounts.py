"""
Each uid's shuffle directory is a tmpfs of its own, sized by
daemon.max_shuffle_per_uid, mounted in the host's namespace under
emberd's own LOCALDIR/shuffle (daemon/shufflefs.c).  A user's code can
write into its shuffle directory whatever it likes, and say it wrote
anything: the kernel still stops it at the bound, whatever the user's
processes hold open.  A uid's mount stays until emberd exits; the user's
helper empties it when the uid's last operation in stages ends.

Where no tmpfs can be mounted here (not root, no CAP_SYS_ADMIN), the
tests say why and skip.
"""

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *	# noqa: E402,F403
from users import *	# noqa: E402,F403

SHARED = ["daemon.socket_mode=0666"]
JUNK = 20 << 20		# what the attack writes per map task
INODE_MAX = 65536	# shufflefs.c's cap on a mount's nr_inodes


def bounds(d):
    return d.client().status()["shuffle_bounds"]


def _mount_why():
    """Why no tmpfs can be mounted here, or None."""
    if os.geteuid() != 0:
        return "not root"
    top = tempfile.mkdtemp(prefix="ember-probe-")
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k",
                            "ember-probe", top], capture_output=True,
                           text=True)
        if r.returncode != 0:
            return "mount -t tmpfs: %s" % r.stderr.strip()
        subprocess.run(["umount", top])
        return None
    finally:
        os.rmdir(top)


MOUNT_WHY = _mount_why()


def skip_unless_mounted(d, name):
    """Skip, saying why, where no tmpfs can be mounted; else emberd must
    mount them."""
    if MOUNT_WHY is not None:
        print("skip %s: no tmpfs mounts here: %s" % (name, MOUNT_WHY))
        return True
    b = d.client().status().get("shuffle_bounds")
    check(b is not None and b["by"] == "tmpfs per user",
          "shuffle_bounds: %r" % b)
    return False


def host_dir(d, uid):
    """The uid's shuffle directory."""
    return os.path.join(d.socket + ".local", "shuffle", str(uid))


@contextlib.contextmanager
def conf_file():
    """The path of an ember.conf in a directory of its own, removed
    after."""
    top = tempfile.mkdtemp(prefix="ember-conf-")
    try:
        yield os.path.join(top, "ember.conf")
    finally:
        shutil.rmtree(top)


def local_dir_of(d):
    """d's local_dir."""
    return d.socket + ".local"


def shuffle_mount_list(under, pid="self"):
    """The ember-shuffle mounts /proc/PID/mountinfo lists at or under the
    path under (other tests' emberds run beside this one), stacked ones
    each: [(mount point, its super options)]."""
    found = []
    with open("/proc/%s/mountinfo" % pid) as f:
        for line in f:
            left, right = line.split(" - ", 1)
            fstype, source, opts = right.split()[:3]
            point = left.split()[4]
            if source.startswith("ember-shuffle-") and (
                    point == under or point.startswith(under + "/")):
                found.append((point, opts))
    return found


def shuffle_mounts(under, pid="self"):
    """{mount point: its super options} of the ember-shuffle mounts at or
    under the path under."""
    return dict(shuffle_mount_list(under, pid))


def mount_size(top):
    """The size= of the mount on top, or None."""
    opts = shuffle_mounts(top).get(top)
    return None if opts is None else opts.split(",")[1]


def emptied(top, timeout=10):
    """Wait until the mount on top holds nothing."""
    return wait_until(lambda: os.listdir(top) == [], timeout)


def processes_with(tag):
    """The pids whose command line holds tag."""
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                if tag.encode() in f.read():
                    found.append(int(p))
        except OSError:
            pass
    return found


def make_files_cmd(top, n, fail):
    """A pipe command that makes up to n empty files in top, then passes
    its records on; it stops at the first error, saying it, and with
    fail exits 1 then."""
    script = ("import os,sys\n"
              "d=os.open(sys.argv[1],os.O_RDONLY|os.O_DIRECTORY)\n"
              "i=0\n"
              "try:\n"
              " while i<%d:\n"
              "  os.close(os.open('f%%d'%%i,os.O_CREAT|os.O_WRONLY,0o600,"
              "dir_fd=d)); i+=1\n"
              "except OSError as e:\n"
              " sys.stderr.write('made %%d files: %%s\\n'%%(i,e.strerror))\n"
              " sys.exit(%d)\n" % (n, 1 if fail else 0))
    return "python3 -c \"%s\" %s </dev/null || exit 1; cat" % (
        script, top)


def disk_bytes(top, same_fs=False):
    """The bytes the files under top take; with same_fs, only those on
    top's own filesystem."""
    total = 0
    dev = os.stat(top).st_dev
    for root, dirs, files in os.walk(top):
        if same_fs and os.stat(root).st_dev != dev:
            dirs[:] = []
            continue
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


def attack_plan(top, junk=JUNK, partitions=2):
    """Map tasks whose code (a pipe, as the user) writes junk bytes into
    the uid's shuffle directory, outside its operation's own, ignores
    whatever the write says, and passes its records on."""
    cmd = ("head -c %d /dev/zero > %s/junk.$$ 2>/dev/null; cat" %
           (junk, top))
    return range_plan(0, 1000, partitions, ops=[{"pipe": {"command": cmd}},
                                      {"key_by": {}},
                                      {"group_by_key": {}}])


@needs_users
@with_daemon(sets=SHARED + ["daemon.max_shuffle_per_uid=1m"])
def test_a_user_cannot_fill_local_dir(d):
    """User a's map tasks write 20 MiB each into a's shuffle directory
    with max_shuffle_per_uid at 1m: the kernel stops them, the operation
    fails saying which key bounds it, local_dir's filesystem gets none
    of it, and a's mount is emptied with a's last operation in stages.
    User b's sort runs through it."""
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
    check_error(r, "TASK_FAILED", "No space left on device",
                "daemon.max_shuffle_per_uid")
    # What landed: in a's mount, at most its size.
    mounts = shuffle_mounts(local_dir_of(d))
    check_eq(mount_size(top), "size=1024k", "a's mount (%r)" % mounts)
    check(host_dir(d, b_uid) in mounts, "b's mount: %r" % mounts)
    junk = disk_bytes(top)
    check(junk <= (1 << 20), "a's files take %d bytes" % junk)
    check(any(n.startswith("junk.") for n in os.listdir(top)),
          "the attack wrote nothing")
    # None of it on local_dir's own filesystem.
    local = disk_bytes(d.socket + ".local", same_fs=True)
    check(local < (1 << 20), "%d bytes in local_dir on its own "
          "filesystem" % local)
    a.go()
    check_eq(a.result(), 20000, "a's own sort")
    # a's last operation in stages ended: its mount stays, emptied.
    check(emptied(top), "a's files outlived a's operations: %r" %
          os.listdir(top))
    check_eq(mount_size(top), "size=1024k", "a's mount after")
    b.go()
    check_eq(b.result(), 20000, "b's sort")
    check(emptied(host_dir(d, b_uid)), "b's files left")
    check_eq(len(shuffle_mount_list(local_dir_of(d))), 2, "one mount per uid")
    check(d.alive(), "emberd died")
    # At exit, emberd unmounts them all.
    check_eq(d.stop(), 0, "emberd's exit")
    check_eq(mounts_under(d.socket + ".local"), [], "mounts after exit")


@with_daemon(sets=["daemon.max_shuffle_per_uid=2m"])
def test_a_held_descriptor_gains_nothing(d):
    """A user's process started by a map task keeps its cwd in the uid's
    mount after the operation ends, and writes there later: the next
    operation finds the same mount, with what that process wrote
    counted, and fails at the bound; never a fresh mount beside a
    detached one."""
    if skip_unless_mounted(d, "test_a_held_descriptor_gains_nothing"):
        return
    top = host_dir(d, 0)
    tag = "ember-holder-%d" % os.getpid()
    holder = ("while [ ! -e go ]; do sleep 0.05; done; "
              "head -c 1500000 /dev/zero > held; exec sleep 300 # %s" % tag)
    cmd = ("(cd %s && exec setsid sh -c '%s' </dev/null >/dev/null 2>&1 &);"
           " cat" % (top, holder))
    plan = range_plan(0, 100, 1, ops=[{"pipe": {"command": cmd}},
                                      {"key_by": {}}, {"group_by_key": {}}])
    try:
        check_eq(d.client().count(plan), 100, "the first operation")
        check(wait_until(lambda: processes_with(tag), 10), "no holder")
        cwd = "/proc/%d/cwd" % processes_with(tag)[0]
        emptied(cwd)	# only where the mount stays is it emptied
        write_file(os.path.join(cwd, "go"), b"")
        check(wait_until(lambda: os.path.exists(os.path.join(cwd, "held"))
                         and os.stat(os.path.join(cwd, "held")).st_size ==
                         1500000, 10), "the holder wrote nothing")
        # 1.5 MB more: it would fit in a fresh mount, not beside held.
        with d.client() as c:
            r = c.execute(attack_plan(top, 1500000, 1), "count")
        check_error(r, "TASK_FAILED", "No space left on device",
                    "daemon.max_shuffle_per_uid")
        check_eq([p for p, _ in shuffle_mount_list(local_dir_of(d), d.pid)],
                 [top], "uid 0's mounts")
    finally:
        for pid in processes_with(tag):
            kill_quietly(pid)


@with_daemon()
def test_emptying_a_full_mount_leaves_the_loop_free(d):
    """A job makes as many empty files as its mount takes (at most
    65536 by its nr_inodes, else a million); when its operation ends,
    they are removed off emberd's loop: another client's status round
    trips stay quick meanwhile."""
    if skip_unless_mounted(d, "test_emptying_a_full_mount_leaves_the_loop"):
        return
    top = host_dir(d, 0)
    plan = range_plan(0, 10, 1, ops=[
        {"pipe": {"command": make_files_cmd(top, 1000000, False)}},
        {"key_by": {}}, {"group_by_key": {}}])
    lat = []
    stop = []

    def ping():
        with d.client() as c:
            while not stop:
                t = time.monotonic()
                c.status()
                lat.append(time.monotonic() - t)
                time.sleep(0.02)

    th = threading.Thread(target=ping)
    th.start()
    try:
        with d.client() as c:
            c.execute(plan, "count")	# full: its own file may not fit
        check(emptied(top, 30), "files left: %d" % len(os.listdir(top)))
        time.sleep(0.3)
    finally:
        stop.append(1)
        th.join()
    check(max(lat) < 0.5, "emberd's loop stalled %.2fs" % max(lat))
    check(top in shuffle_mounts(local_dir_of(d)), "the mount went")


@with_daemon()
def test_files_past_the_cap_fail_with_enospc(d):
    """A mount holds at most 65536 files, whatever its size: the job
    that makes more gets ENOSPC, and the operation's error says which
    bound it met."""
    if skip_unless_mounted(d, "test_files_past_the_cap_fail_with_enospc"):
        return
    top = host_dir(d, 0)
    plan = range_plan(0, 10, 1, ops=[
        {"pipe": {"command": make_files_cmd(top, 100000, True)}},
        {"key_by": {}}, {"group_by_key": {}}])
    with d.client() as c:
        r = c.execute(plan, "count")
    msg = check_error(r, "TASK_FAILED", "No space left on device",
                      "daemon.max_shuffle_per_uid", "%d files" % INODE_MAX)
    check("nr_inodes=%d" % INODE_MAX in shuffle_mounts(local_dir_of(d))[top],
          "the mount: %r" % shuffle_mounts(local_dir_of(d)))
    check("made %d files" % (INODE_MAX - 1) in msg or "made %d files" %
          (INODE_MAX - 2) in msg, "the job's count: %s" % msg[-300:])
    print("error: %s" % msg[-300:])


def test_an_operation_starting_while_emptying_keeps_its_files(d):
    """The uid's mount is emptied as a sort starts: what the sort's map
    tasks write is newer than the emptying, and stays."""
    if skip_unless_mounted(d, "test_an_operation_starting_while_emptying"):
        return
    top = host_dir(d, 0)
    plan = range_plan(0, 10, 1, ops=[
        {"pipe": {"command": make_files_cmd(top, 60000, False)}},
        {"key_by": {}}, {"group_by_key": {}}])
    check_eq(d.client().count(plan), 10, "the files' operation")
    c = hold_stream(d)
    check(wait_until(lambda: not [n for n in os.listdir(top)
                                  if n.startswith("f")], 30),
          "files left: %d" % len(os.listdir(top)))
    check_eq(os.listdir(top), [c.held], "what the emptying left")
    check_eq(end_stream(c), 20000, "the sort held meanwhile")
    check(emptied(top), "files left: %r" % os.listdir(top))
    check("SHUFFLE_LOST" not in d.log_text(), "a sort lost its files")
    check("emptying" not in d.log_text(), "an emptying failed")


def test_a_filesystem_mounted_after_start_is_seen(d):
    """emberd and its jobs see the host's mounts, made before it started
    or after: a text plan reads a file on a tmpfs mounted now."""
    if os.geteuid() != 0:
        print("skip test_a_filesystem_mounted_after_start_is_seen: "
              "not root")
        return
    mnt = d.path("later")
    os.makedirs(mnt)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755",
                    "ember-later", mnt], check=True)
    try:
        write_file(os.path.join(mnt, "data.txt"), b"x\ny\n")
        os.chmod(os.path.join(mnt, "data.txt"), 0o644)
        check_eq(d.client().count(text_plan([os.path.join(mnt,
                                                          "data.txt")])),
                 2, "the text plan's records")
    finally:
        subprocess.run(["umount", "-l", mnt])


@no_daemon
def test_sighup_resizes_live_mounts(_):
    """A SIGHUP that changes max_shuffle_per_uid remounts the live
    mounts with the new size.  A shrink below what a mount holds is
    refused by the kernel: status shows the bound in force, and the
    mount gets the new size once its files are removed."""
    with conf_file() as conf:
        write_file(conf, b"[daemon]\nmax_shuffle_per_uid = 1m\n")
        with Daemon(conf=conf) as d:
            if skip_unless_mounted(d, "test_sighup_resizes_live_mounts"):
                return
            top = host_dir(d, 0)
            c = hold_stream(d)
            check_eq(mount_size(top), "size=1024k", "the size at start")
            write_file(conf, b"[daemon]\nmax_shuffle_per_uid = 3m\n")
            d.signal(signal.SIGHUP)
            check(wait_until(lambda: mount_size(top) == "size=3072k", 10),
                  "the mount after SIGHUP: %r" %
                  shuffle_mounts(local_dir_of(d)))
            check_eq(bounds(d)["max_per_uid"], 3 << 20, "status' bound")
            check_eq(bounds(d)["resize_pending"], 0, "resizes pending")
            # Shrink below what the held sort's files take (~390k).
            write_file(conf, b"[daemon]\nmax_shuffle_per_uid = 8k\n")
            d.signal(signal.SIGHUP)
            check(wait_until(lambda: "remount" in d.log_text(), 10),
                  "no refused remount logged")
            check_eq(mount_size(top), "size=3072k", "the mount, refused")
            b = bounds(d)
            check_eq((b["max_per_uid"], b["configured"],
                      b["resize_pending"]), (3 << 20, 8 << 10, 1),
                     "status after a refused shrink (%r)" % b)
            check_eq(end_stream(c), 20000, "the held sort")
            check(wait_until(lambda: mount_size(top) == "size=8k", 10),
                  "the mount after its files went: %r" %
                  shuffle_mounts(local_dir_of(d)))
            b = bounds(d)
            check_eq((b["max_per_uid"], b["resize_pending"]), (8 << 10, 0),
                     "status after the resize (%r)" % b)


def test_a_start_removes_a_killed_runs_mount(d):
    """A SIGKILL of emberd leaves its mounts (they are the host's): the
    next start on the same local_dir unmounts them, and removes their
    mount points, before it uses the directory; with mounts, or
    without."""
    if skip_unless_mounted(d, "test_a_start_removes_a_killed_runs_mount"):
        return
    top = host_dir(d, 0)
    c = hold_stream(d)
    check(os.listdir(top) != [], "no shuffle files held")
    d.signal(signal.SIGKILL)
    d.wait()
    d.kill_leftovers()
    c.close()
    check_eq([p for p, _ in shuffle_mount_list(local_dir_of(d))], [top],
             "the killed run's mount")
    d.start()
    check_eq(shuffle_mount_list(local_dir_of(d)), [], "mounts after the start")
    check(not os.path.exists(top), "the mount point is left")
    check("unmounting %s, left by an earlier run" % top in d.log_text(),
          "the start's log")
    check_eq(d.client().count(sort_plan()), 20000, "a sort after the start")
    check_eq([p for p, _ in shuffle_mount_list(local_dir_of(d))], [top],
             "the new mount")
    # A start without mounts removes it too, rather than refuse it as no
    # user's directory.
    d.signal(signal.SIGKILL)
    d.wait()
    d.kill_leftovers()
    d.sets.append("daemon.shuffle_mounts=no")
    d.start()
    check_eq(shuffle_mount_list(local_dir_of(d)), [],
             "mounts after a start without")
    check_eq(d.client().count(sort_plan()), 20000,
             "a sort after a start without mounts")
    check_eq(shuffle_mount_list(local_dir_of(d)), [],
             "mounts with shuffle_mounts=no")


@no_daemon
def test_a_killed_runs_mount_under_an_odd_path(_):
    """mountinfo escapes a space, a tab, a backslash in a mount point: a
    start still finds the mount a killed emberd left under a local_dir
    with them in its path, and unmounts it."""
    if MOUNT_WHY is not None:
        print("skip test_a_killed_runs_mount_under_an_odd_path: %s" %
              MOUNT_WHY)
        return
    top = tempfile.mkdtemp(prefix="ember-test-odd-", dir="/tmp")
    try:
        os.chmod(top, 0o755)
        odd = os.path.join(top, "a b\tc\\d")
        os.mkdir(odd, 0o755)
        with Daemon(socket_path=os.path.join(odd, "emberd.sock")) as d:
            uid_dir = host_dir(d, 0)
            c = hold_stream(d)
            d.signal(signal.SIGKILL)
            d.wait()
            d.kill_leftovers()
            c.close()
            check_eq(mounts_under(odd), [uid_dir], "the killed run's mount")
            d.start()
            check_eq(mounts_under(odd), [], "mounts after the start")
            check_eq(d.client().count(sort_plan()), 20000, "a sort")
            check_eq(mounts_under(odd), [uid_dir], "the new mount")
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_a_refused_probe_leaves_plain_directories(d):
    """A mount that fails at start (here: its probe's mount point is a
    file) leaves the plain directories, and the log and status say why,
    rather than every map task failing later."""
    if skip_unless_mounted(d, "test_a_refused_probe_leaves_plain"):
        return
    d.stop()
    base = os.path.join(d.socket + ".local", "shuffle")
    for p in (d.socket + ".local", base):	# emberd removed them at exit
        os.makedirs(p, exist_ok=True)
        os.chmod(p, 0o711)
    write_file(os.path.join(base, ".probe"), b"")
    d.start()
    b = bounds(d)
    check_eq(b["by"], "as reported", "by")
    check("a probe mount failed" in b["why"] and ".probe" in b["why"],
          "why: %r" % b["why"])
    check("shuffle bounds: as reported by map tasks, not by the kernel: "
          "a probe mount failed" in d.log_text(), "the start's log")
    check_eq(d.client().count(sort_plan()), 20000, "a sort")
    check_eq(shuffle_mount_list(local_dir_of(d)), [], "mounts")


def test_status_says_how_shuffle_files_are_bounded(d):
    b = bounds(d)
    check(b["by"] in ("tmpfs per user", "as reported"), "by: %r" % b)
    check_eq(b["max_per_uid"], 16 << 30, "max_per_uid")
    if b["by"] == "as reported":
        check(b.get("why"), "no reason given: %r" % b)
    elif os.geteuid() == 0:
        check("shuffle bounds: a tmpfs per user" in d.log_text(),
              "the start's log line")
        check_eq(mounts_under(d.socket + ".local"), [],
                 "the probe's mount")


@with_daemon(sets=["daemon.shuffle_mounts=no"])
def test_shuffle_mounts_no_keeps_plain_directories(d):
    b = bounds(d)
    check_eq(b["by"], "as reported", "by")
    want = "shuffle_mounts is no" if os.geteuid() == 0 else "not root"
    check(want in b["why"], "why: %r" % b["why"])
    check_eq(d.client().count(sort_plan()), 20000, "a sort")
    check_eq(shuffle_mounts(local_dir_of(d)), {},
             "mounts with shuffle_mounts=no")


@no_daemon
def test_a_mount_stacked_on_a_users_directory_is_not_emberds(_):
    """A mount stacked on the uid's mount point (a user's FUSE mount on
    the directory it owns; a root tmpfs stands in for it here) is never
    taken for the uid's: a SIGHUP resizes emberd's own mount, tasks still
    write into it, and emberd unmounts its own at exit."""
    with conf_file() as conf:
        write_file(conf, b"[daemon]\nmax_shuffle_per_uid = 1m\n")
        with Daemon(conf=conf) as d:
            if skip_unless_mounted(d, "test_a_mount_stacked_on_a_users_"
                                   "directory_is_not_emberds"):
                return
            check_eq(d.client().count(sort_plan()), 20000, "a first sort")
            top = host_dir(d, 0)
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k",
                            "user-stack", top], check=True)
            try:
                write_file(conf, b"[daemon]\nmax_shuffle_per_uid = 3m\n")
                d.signal(signal.SIGHUP)
                check(wait_until(lambda: "SIGHUP: shuffle" in
                                 d.log_text(), 10), "no resize logged")
                opts = [o for p, o in shuffle_mount_list(local_dir_of(d))
                        if p == top]
                check(len(opts) == 1 and "size=3072k" in opts[0],
                      "emberd's mount after the SIGHUP: %r" % opts)
                check_eq(d.client().count(sort_plan()), 20000,
                         "a sort under the stacked mount (4k would not "
                         "hold its files)")
                d.stop()
                check_eq([p for p, _ in shuffle_mount_list(local_dir_of(d))
                          if p == top], [], "emberd's mount after its exit")
            finally:
                subprocess.run(["umount", "-l", top])


@no_daemon
def test_root_user_changed_by_sighup(_):
    """Root's jobs run as workers.root_user, by a pool made once: after a
    SIGHUP changes the key, root's next sort still runs, its mount the
    pool's user's, as its workers are."""
    if not ROOT:
        print("skip test_root_user_changed_by_sighup: needs root to create "
              "a user")
        return
    make_users()
    with conf_file() as conf:
        write_file(conf, b"[workers]\nroot_user = nobody\n")
        with Daemon(conf=conf) as d:
            if skip_unless_mounted(d, "test_root_user_changed_by_sighup"):
                return
            top = host_dir(d, 0)
            check_eq(d.client().count(sort_plan()), 20000, "a first sort")
            nobody = pwd.getpwnam("nobody").pw_uid
            check_eq(os.stat(top).st_uid, nobody, "the mount's owner")
            write_file(conf, ("[workers]\nroot_user = %s\n" %
                              USERS["a"][2]).encode())
            d.signal(signal.SIGHUP)
            check(wait_until(lambda: "SIGHUP: conf reloaded" in
                             d.log_text(), 10), "no reload logged")
            with d.client() as c:
                check_eq(c.count(sort_plan()), 20000, "a sort after it")
                pools = [(p["uid"], p["client"]) for p in
                         c.status()["pools"]]
            check_eq(pools, [(nobody, 0)], "root's pool")
            check_eq(os.stat(top).st_uid, nobody, "the mount's owner after")

if __name__ == "__main__":
    run_tests(globals())
