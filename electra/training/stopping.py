"""Stopping a run on every rank at the same step.

A checkpoint is a collective (every rank's RNG state is gathered), so the ranks must decide together to stop:
a rank that stops alone leaves the others in the step's all-reduce, and the run hangs without a checkpoint. Here
each rank's signal flag (SIGTERM from a preemption, Ctrl-C) is reduced (max) over ranks once per step, so a signal
that reached one rank only (one node preempted) stops them all; and rank 0's collapse verdict (only rank 0
evaluates) is broadcast. The vote is read one step late, so that no step waits for its own: on CUDA the reduced
flag comes back by a non-blocking copy, and the host reads it at the next step after waiting on an event recorded
behind it, i.e. for the device to finish the previous step. So the host runs at most one step ahead of the GPU
(the device still has the current step queued while the host prepares the next one).

A signal repeated within REPEAT_GRACE_S of the first is the same stop request delivered twice, and is ignored:
torchrun forwards the SIGTERM it gets to its workers, and a scheduler (SLURM) or a terminal's Ctrl-C signals
every process of the group, so a worker often gets two within milliseconds. A repeat after that escalates: the
process dies at once by the signal (the first is not being honoured, e.g. a peer died mid-collective).
"""

from __future__ import annotations

import os
import signal
import time
from types import FrameType

import torch
import torch.distributed as dist

from electra.utils.errors import RankFailedError

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)
"""SIGUSR2: SLURM's warning before it preempts a job or ends it at its time limit (`sbatch --signal=USR2@90`,
submitit's default): the run saves a checkpoint and stops, and the job is requeued (electra/study/run.py
`pretrain_in_job`)."""
FAILED = 255
"""The vote's value when a rank failed in work that it cannot share (reading its batches): larger than any signal,
so the max over ranks says "stop" and that it was a failure."""
REPEAT_GRACE_S = 2.0
"""A repeated signal within this many seconds of the first is the same request delivered twice (ignored); a later
one kills the process at once."""


class StopVote:
    """The ranks' agreement on a stop signal; install its handler with `listen`, `cast` after every step."""

    def __init__(self, device: torch.device, world: int):
        self.device, self.world = device, world
        self.local = 0
        """The signal this process received (0: none); set by the handler."""
        self._first_at = 0.0  # time.monotonic() of that signal
        self.failed = False
        """This process failed (set by the loop): the next cast says FAILED instead of its signal."""
        self._previous: dict[signal.Signals, object] = {}
        # Made once: a step uploads nothing (fill_ takes the flag as a kernel argument) and reads the host copy
        # through a numpy view, not through a tensor read.
        self._flag = torch.zeros(1, dtype=torch.int32, device=device)
        cuda = device.type == "cuda"
        self._host = torch.zeros(1, dtype=torch.int32, pin_memory=True) if cuda else self._flag
        self._host_view = self._host.numpy()
        self._event = torch.cuda.Event() if cuda else None
        self._cast = False

    def handle(self, num: int, _frame: FrameType | None) -> None:
        now = time.monotonic()
        if self.local:
            if now - self._first_at < REPEAT_GRACE_S:
                return  # the same stop delivered twice (torchrun's forward, the process group's signal)
            signal.signal(num, signal.SIG_DFL)  # a later one: the first is not being honoured; die by this one
            os.kill(os.getpid(), num)
        self.local, self._first_at = num, now

    def listen(self) -> None:
        self._previous = {s: signal.signal(s, self.handle) for s in STOP_SIGNALS}

    def restore(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}

    def cast(self) -> int:
        """Return the result of the previous cast (the signal every rank now agrees to stop for, FAILED, or 0: the
        same on every rank at the same step), then reduce this rank's flag over the ranks (one 4-byte all-reduce,
        max)."""
        agreed = self._read()
        self._flag.fill_(FAILED if self.failed else self.local)
        if self.world > 1:
            dist.all_reduce(self._flag, op=dist.ReduceOp.MAX)
        if self._event is not None:
            self._host.copy_(self._flag, non_blocking=True)
            self._event.record()
        self._cast = True
        return agreed

    def _read(self) -> int:
        if not self._cast:
            return 0
        if self._event is not None:
            self._event.synchronize()  # waits for the previous step to finish on the device (the current one is queued)
        return int(self._host_view[0])


def agree_on_collapse(collapsed: bool, device: torch.device, world: int) -> bool:
    """Rank 0's collapse verdict on every rank (the others do not evaluate); a host sync, at evaluations only."""
    if world == 1:
        return collapsed
    flag = torch.tensor([int(collapsed)], device=device)
    dist.broadcast(flag, src=0)
    return bool(flag.item())


def agree_on_failure(error: BaseException | None, rank: int, world: int) -> None:
    """Every rank learns here whether any rank failed since the last agreement (an exception in work one rank does
    alone: rank 0's evaluation, metrics line, checkpoint write or export; caught and passed in as `error`), so all
    leave at the same step instead of the others waiting in the next collective until its timeout. The failing
    rank re-raises its error; the others raise RankFailedError("rank R failed: <message>"). One all-gather of
    the messages: at points every rank reaches, in place of a barrier."""
    messages = [None if error is None else f"{type(error).__name__}: {error}"]
    if world > 1:
        messages = [None] * world
        dist.all_gather_object(messages, None if error is None else f"{type(error).__name__}: {error}")
    if error is not None:
        raise error
    for r, message in enumerate(messages):
        if message is not None:
            raise RankFailedError(f"rank {r} failed: {message}")
