"""A Ctrl-C that lands while an object's finaliser runs is not lost (electra.utils.processes
interrupts_outside_finalizers): Python cannot raise out of a `__del__`, so it would print "Exception ignored" and go
on, and a sweep would run to its end instead of stopping."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from electra.utils.processes import interrupts_outside_finalizers


class Finalised:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)  # the Ctrl-C arrives while the finaliser runs
        time.sleep(0.05)


def test_a_ctrl_c_inside_a_finaliser_is_raised_once_the_finaliser_has_returned():
    unraisable, hook = [], sys.unraisablehook
    sys.unraisablehook = unraisable.append
    before = signal.getsignal(signal.SIGINT)
    try:
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            with interrupts_outside_finalizers():
                obj = Finalised()
                del obj
                time.sleep(2.0)  # the interrupt, sent again, lands here
        assert time.monotonic() - start < 1.0
    finally:
        sys.unraisablehook = hook
    assert unraisable == []  # nothing swallowed in the finaliser
    assert signal.getsignal(signal.SIGINT) is before  # the previous handler is back
