from pathlib import Path

import pytest
import torch

from tests.helpers import SHARED_DATA

# The tests use tiny models: one thread is as fast, and immune to the stalls two OpenMP threads suffer when the
# other core is busy (measured here: 15 ms vs 830 ms per overfitting step with a second process running).
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _deterministic_torch():
    torch.manual_seed(0)
    yield


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA
