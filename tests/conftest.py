import os
import signal
from pathlib import Path

import pytest
import torch

from tests.helpers import SHARED_DATA

# The tests use tiny models: one thread is as fast, and immune to the stalls two OpenMP threads suffer when the
# other core is busy (measured here: 15 ms vs 830 ms per overfitting step with a second process running).
# OMP_NUM_THREADS makes train.threads / finetune.threads = auto keep that one thread too: a run in this process that
# took both cores would make results depend on the machine's load (a killed run resumed beside a busier test is no
# longer bit-equal) and would hang every child forked after it (GNU OpenMP cannot start a second thread team in a
# fork of a process that used one).
os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)

# A suite started in the background of a non-interactive shell (`make test &`, nohup) inherits SIGINT ignored, and so
# would every run it starts: the Ctrl-C tests would then see their runs finish instead of stopping. A handled signal
# is reset to its default in a child at exec, so catching it here gives the runs a terminal's SIGINT back.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _deterministic_torch():
    torch.manual_seed(0)
    yield


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


# The longest tests, measured idle on 2 cores (Intel Xeon family 6 model 167, `make test --durations=20`): started
# first, so that neither worker is left alone with one of them at the end.
LONGEST_FIRST = (
    "tests/test_dress_rehearsal.py",  # 292 s
    "tests/training/test_discriminator_collapse.py",  # 150 s
    "tests/training/test_learnability_english.py",  # 115 s, two tests
    "tests/training/test_gpu_paths.py",  # 75 s in one test
)


def pytest_collection_modifyitems(items):
    """The longest modules first, then the other modules with slow tests, then the rest; each module's tests kept
    together and in order (module fixtures are built once). On several workers (`make test`) the long end-to-end
    tests start early and the many short ones fill in at the end, rather than one worker running a long test alone
    while the other has nothing left to do."""
    slow_modules = {item.module for item in items if item.get_closest_marker("slow")}

    def order(item) -> tuple[int, int]:
        path = item.path.relative_to(item.config.rootpath).as_posix()
        if path in LONGEST_FIRST:
            return 0, LONGEST_FIRST.index(path)
        return (1 if item.module in slow_modules else 2), 0

    items.sort(key=order)
