"""Runs as pid 1 of fresh pid/net/mount namespaces (started by `sandbox.py` via `unshare`).

It makes every mount read-only except the task's temp dir, gives the child a private /dev
with only null/zero/random/urandom (when root), sets resource limits, drops every
capability from the bounding set, and execs the test runner, which then has no way to write
outside its temp dir, reach a network, or see host processes. Stdlib only; argv:
  workdir  memory_bytes  cpu_seconds  nproc  fsize_bytes  runner_path
"""

import ctypes
import os
import resource
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP = 38, 24
KEEP_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC | 1024 | 2048 | (1 << 21)  # + noatime flags

libc = ctypes.CDLL(None, use_errno=True)


def mount(src, target, fstype, flags, data=None):
    if libc.mount(src and src.encode(), target.encode(), fstype and fstype.encode(), flags,
                  data and data.encode()) != 0:
        raise OSError(ctypes.get_errno(), f"mount {target}")


def mount_points():
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            points.append(line.split()[4].replace("\\040", " "))
    return points


def main():
    workdir, mem, cpu, nproc, fsize, runner = sys.argv[1:7]
    root = os.geteuid() == 0 and os.environ.get("JAXTOM_SANDBOX_USERNS") != "1"
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount(workdir, workdir, None, MS_BIND | MS_REC)
    if root:  # a private /dev: the host's block devices stay out of reach
        mount("tmpfs", "/dev", "tmpfs", MS_NOSUID, "mode=755,size=16m")
        for name, minor in (("null", 3), ("zero", 5), ("random", 8), ("urandom", 9)):
            os.mknod(f"/dev/{name}", 0o20666, os.makedev(1, minor))
            os.chmod(f"/dev/{name}", 0o666)
        os.mkdir("/dev/shm", 0o1777)
        for i, name in enumerate(("stdin", "stdout", "stderr")):
            os.symlink(f"/proc/self/fd/{i}", f"/dev/{name}")
        os.symlink("/proc/self/fd", "/dev/fd")
    for target in ("/proc/sys", "/proc/sysrq-trigger"):
        try:
            mount(target, target, None, MS_BIND)
        except OSError:
            pass
    skip = {os.path.realpath(workdir), "/dev", "/dev/shm"} if root else {os.path.realpath(workdir)}
    for point in mount_points():
        if point in skip or point.startswith(os.path.realpath(workdir) + "/"):
            continue
        if point == "/proc":
            continue  # this namespace's own procfs (sys and sysrq-trigger are bound ro above)
        try:
            keep = os.statvfs(point).f_flag & KEEP_FLAGS
            mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)
        except OSError:
            pass
    probe = os.path.join(os.path.dirname(os.path.realpath(workdir)), f".probe{os.getpid()}")
    try:
        open(probe, "w").close()
        os.unlink(probe)
        sys.exit("sandbox setup failed: the file system outside the work dir is writable")
    except OSError:
        pass
    for lim, value in ((resource.RLIMIT_AS, int(mem)), (resource.RLIMIT_CPU, int(cpu)),
                       (resource.RLIMIT_NPROC, int(nproc)), (resource.RLIMIT_FSIZE, int(fsize)),
                       (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NOFILE, 128)):
        resource.setrlimit(lim, (value, value))
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    os.chdir(workdir)
    os.execv(sys.executable, [sys.executable, "-I", runner, workdir])


if __name__ == "__main__":
    main()
