"""`train.threads=auto` follows the load while a CPU run trains. The threads chosen at the start
(electra.utils.machine.choose_threads) are right only while the machine stays as it was: other work that starts
mid-run makes a team of OpenMP threads wait for the core it shares (a step of 46 ms took 131-1296 ms beside a busy
process on a 2-core Xeon with 2 threads, 66-90 ms with 1), and work that ends leaves cores idle.

So the loop times its steps, and looks at the machine again when they slow down (the median of the last
RECENT_STEPS steps over SLOWDOWN x the best such median since the threads were last chosen, starting from the
median of BASELINE_STEPS steps after a warm-up) or every RECHECK_STEPS steps: what
other processes kept busy of this process's usable cores since the last look (no extra wait: the CPU clocks of
two moments), and the threads that leaves (electra.utils.machine.auto_threads). A change is said in one line and
the metrics rows carry the threads of each window. An explicit `train.threads=N` or OMP_NUM_THREADS is never
changed (and is what a bit-for-bit resume needs); a GPU run's CPU threads are not watched.
"""

from __future__ import annotations

import logging
import statistics
from collections import deque

import torch

from electra.utils.machine import auto_threads, busy_mark, busy_since
from electra.utils.processes import usable_cpus

log = logging.getLogger("electra.pretrain")

RECHECK_STEPS = 500
"""Steps between two looks at the machine while nothing slows down (a look costs two reads of /proc/stat)."""
SLOWDOWN = 1.5
"""Steps this much slower than when the threads were chosen: look now."""
WARMUP_STEPS = 10
"""Steps left out after each choice: a new thread team, the allocator's first blocks (a fresh run's first steps
took ~125 ms where it settled at ~45: the `cpu` preset, 2 threads, Intel Xeon family 6 model 167)."""
BASELINE_STEPS = 20
"""Steps timed after the warm-up, whose median is what later steps are compared with."""
RECENT_STEPS = 10
"""Steps whose median is compared with the baseline: one slow step (an evaluation, a save, a page fault) is not a
slowdown."""


class ThreadWatch:
    """The threads of one CPU process under `auto`, chosen again as the load changes (see the module)."""

    def __init__(self, threads: int, share: int = 1):
        self.threads, self.share = threads, share
        self.mark = busy_mark()
        self.times: list[float] = []
        self.recent: deque[float] = deque(maxlen=RECENT_STEPS)
        self.baseline: float | None = None
        self.since_look = 0

    def after_step(self, seconds: float) -> int | None:
        """Note one training step's seconds; returns the new thread count when it changed (already set)."""
        self.since_look += 1
        if self.baseline is None:
            self.times.append(seconds)
            if len(self.times) >= WARMUP_STEPS + BASELINE_STEPS:
                self.baseline = statistics.median(self.times[WARMUP_STEPS:])
            return None
        self.recent.append(seconds)
        recent = statistics.median(self.recent) if len(self.recent) == RECENT_STEPS else None
        slow = recent is not None and recent > SLOWDOWN * self.baseline
        if recent is not None and recent < self.baseline:  # a run still warming up settles faster: its best pace
            self.baseline = recent
        if not slow and self.since_look < RECHECK_STEPS:
            return None
        return self.look(recent if slow else None)

    def look(self, slow: float | None = None) -> int | None:
        """Choose again from what other work kept busy since the last look; `slow`: the recent steps' median, when
        a slowdown asked for the look."""
        busy = busy_since(self.mark)
        self.mark, self.since_look = busy_mark(), 0
        if busy is None:
            return None
        cores = max(1, usable_cpus() // self.share)
        threads = auto_threads(cores, busy)
        if threads == self.threads:
            if slow is not None:  # slower for another reason (the run's own phase): the new normal
                self.baseline = slow
            self.recent.clear()
            return None
        why = f"steps took {slow * 1e3:.0f} ms against {self.baseline * 1e3:.0f}, " if slow else ""
        log.info(
            "threads %d -> %d (%s%.1f of %d usable cores busy with other work)",
            self.threads, threads, why, busy, usable_cpus(),
        )  # fmt: skip
        torch.set_num_threads(threads)
        self.threads, self.times, self.baseline = threads, [], None
        self.recent.clear()
        return threads
