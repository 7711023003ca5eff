"""How much of the machine's CPU went to anything but the processes a benchmark watches.

A timed run on a small shared machine measures whatever else runs beside it: a build, a test
suite, another benchmark (on a 2-core machine one busy process takes half the CPU from a
2-thread server), or the hypervisor's other guests (a VM's "steal" time). CpuWatch reads the
machine's counters (/proc/stat) and the watched processes' own CPU time (/proc/PID/stat, all
their threads) at the start and end of a run; what the machine spent beyond the watched
processes is someone else's, reported as a share of all CPUs over the run, so a report can
say which of its points were disturbed instead of presenting them as the servers' alone.

Linux only; elsewhere (no /proc) the shares are None.

    watch = CpuWatch([server.pid, os.getpid()])
    ...run...
    share = watch.stop()     # {"other": 0.03, "steal": 0.01} of the machine's CPUs
"""
import os
import time

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def machine_ticks():
    """(busy, steal) ticks of all CPUs since boot: busy is user, nice, system, irq and softirq
    (guest time is inside user); idle and iowait are not busy, steal is the hypervisor's."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    steal = fields[7] if len(fields) > 7 else 0
    return user + nice + system + irq + softirq, steal


def process_ticks(pid):
    """utime + stime of every thread of pid (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()  # the name may hold spaces; fields after it
    except OSError:
        return 0
    return int(rest[11]) + int(rest[12])  # fields 14 and 15 of proc(5): utime, stime


class CpuWatch:
    def __init__(self, pids):
        self.pids = list(pids)
        try:
            self.start = (time.monotonic(), machine_ticks(), sum(process_ticks(p) for p in self.pids))
        except (OSError, ValueError):
            self.start = None

    def stop(self):
        """{"other": share, "steal": share} of all CPUs over the run, each in 0-1 (None without /proc).
        Read it before the watched processes exit: a process that is gone counts nothing."""
        if self.start is None:
            return {"other": None, "steal": None}
        t0, (busy0, steal0), own0 = self.start
        try:
            busy1, steal1 = machine_ticks()
        except (OSError, ValueError):
            return {"other": None, "steal": None}
        own1 = sum(process_ticks(p) for p in self.pids)
        capacity = (time.monotonic() - t0) * TICKS * (os.cpu_count() or 1)
        if capacity <= 0:
            return {"other": None, "steal": None}
        other = max(0.0, (busy1 - busy0) - (own1 - own0)) / capacity
        return {"other": min(other, 1.0), "steal": min((steal1 - steal0) / capacity, 1.0)}
