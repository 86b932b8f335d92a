"""The next steps' batches read in a background thread, so that the device never waits on the host.

Reading a step's examples (a gather from the prepared corpus's memmap, `ExampleSource.examples`) and pinning them
takes host time that a fast GPU step would otherwise wait for between steps. A thread reads `depth` steps ahead
into a bounded queue; the loop then only copies the pinned tensors to the device without blocking (numpy's
gathers and the copies release the GIL). The batches are a pure function of the step (`load(step)`), so the
sequence is the same as without the thread, after a resume too (tests/training/test_gpu_paths.py).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable
from typing import Any

PREFETCH_STEPS = 2


class Prefetcher:
    """`load(step)` for each of `steps`, computed ahead in a daemon thread; `get(step)` in the same order."""

    def __init__(self, load: Callable[[int], Any], steps: Iterable[int], depth: int = PREFETCH_STEPS):
        self._load, self._steps = load, iter(steps)
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, name="electra-prefetch", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        for step in self._steps:
            try:
                item: tuple[int, Any, BaseException | None] = (step, self._load(step), None)
            except BaseException as err:  # noqa: BLE001 - raised again in the loop's thread, at that step
                item = (step, None, err)
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if self._stop.is_set() or item[2] is not None:
                return

    def get(self, step: int) -> Any:
        """The batches of `step`: the next one the thread read (steps are asked for in order)."""
        got, value, err = self._queue.get()
        if got != step:
            raise RuntimeError(f"prefetch out of order: step {step} asked for, step {got} read")
        if err is not None:
            raise err
        return value

    def close(self) -> None:
        """Stop the thread (it may be blocked on a full queue) and wait for it."""
        self._stop.set()
        while self._thread.is_alive():
            try:
                self._queue.get(timeout=0.1)
            except queue.Empty:
                pass
        self._thread.join()

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
