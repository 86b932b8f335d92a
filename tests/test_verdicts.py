"""The verdicts say "pretraining helped" / "ELECTRA beats MLM" only when the difference of the task means exceeds
twice its standard error over seeds, on tasks where the model that scores higher is above chance level; otherwise
that nothing can be concluded."""

from __future__ import annotations

import math

import numpy as np
import pytest

from electra.verdicts import SPREAD_FACTOR, compare
from tests.helpers import glue_results as results


def test_a_difference_beyond_the_seeds_spread_is_a_verdict():
    a = results({"rte": [70.0, 72.0, 71.0], "sst2": [80.0, 81.0, 82.0]})
    b = results({"rte": [60.0, 61.0, 62.0], "sst2": [70.0, 72.0, 71.0]})
    c = compare("electra", a, "mlm", b, ["rte", "sst2"])
    assert c.concluded and c.a_better and c.delta == pytest.approx(10.0)
    expected = (
        SPREAD_FACTOR
        * math.sqrt(sum(np.var(v, ddof=1) / 3 for v in ([70, 72, 71], [80, 81, 82], [60, 61, 62], [70, 72, 71])))
        / 2
    )
    assert c.margin == pytest.approx(expected)
    assert c.sentence("ELECTRA beats MLM", "no").startswith("ELECTRA beats MLM: electra +10.0 points vs mlm")


def test_within_the_spread_nothing_can_be_concluded():
    a = results({"rte": [60.0, 70.0, 65.0]})
    b = results({"rte": [58.0, 68.0, 63.0]})
    c = compare("electra", a, "none", b, ["rte"])
    assert not c.concluded and not c.a_better and c.delta == pytest.approx(2.0)
    assert "nothing can be concluded (the difference is within the seeds' spread)" in c.sentence("helped", "hurt")


def test_one_seed_concludes_nothing_however_large_the_difference():
    c = compare("electra", results({"rte": [90.0]}), "none", results({"rte": [50.0]}), ["rte"])
    assert not c.concluded and c.margin is None
    assert c.sentence("helped", "hurt").endswith("nothing can be concluded (one fine-tuning seed: the spread over "
                                                 "seeds is unknown)")  # fmt: skip


def test_tasks_at_chance_are_left_out_and_all_at_chance_concludes_nothing():
    a = results({"rte": [70.0, 71.0, 72.0], "wnli": [56.0, 56.0, 56.0]}, at_chance=("wnli",))
    b = results({"rte": [60.0, 61.0, 62.0], "wnli": [40.0, 41.0, 42.0]})
    c = compare("electra", a, "none", b, ["rte", "wnli"])
    assert c.tasks == ["rte"] and c.at_chance == ["wnli"] and c.delta == pytest.approx(10.0) and c.concluded
    assert "(wnli left out: at chance level)" in c.sentence("helped", "hurt")
    c = compare("electra", a, "none", b, ["wnli"])
    assert not c.concluded and "every task (wnli) is at chance level" in c.reason


def test_a_task_counts_when_the_better_model_is_above_chance_though_the_other_is_at_it():
    """A baseline at chance and a pretrained model clearly above it: "pretraining helped" (the baseline at chance
    used to drop the task, so it could never be said); both at chance: left out; the seeds' spread still rules."""
    above = results({"rte": [70.0, 71.0, 72.0]})
    chance = results({"rte": [50.0, 51.0, 52.0]}, at_chance=("rte",))
    c = compare("electra", above, "none", chance, ["rte"])
    assert c.tasks == ["rte"] and c.at_chance == [] and c.a_better and c.delta == pytest.approx(20.0)
    assert c.sentence("pretraining helped", "no").startswith("pretraining helped: electra +20.0 points vs none")
    c = compare("none", chance, "electra", above, ["rte"])  # the same with the roles swapped
    assert c.tasks == ["rte"] and c.b_better
    both = compare("electra", results({"rte": [53.0, 54.0, 55.0]}, at_chance=("rte",)), "none", chance, ["rte"])
    assert both.tasks == [] and both.at_chance == ["rte"] and not both.concluded
    noisy = compare("electra", results({"rte": [45.0, 75.0, 60.0]}), "none", chance, ["rte"])
    assert noisy.tasks == ["rte"] and not noisy.concluded and "within the seeds' spread" in noisy.reason


def test_a_better_baseline_is_said_when_it_is_beyond_the_spread():
    a = results({"rte": [50.0, 51.0, 52.0]})
    b = results({"rte": [70.0, 71.0, 72.0]})
    c = compare("mlm", a, "none", b, ["rte"])
    assert c.b_better and c.sentence("helped", "did NOT help").startswith("did NOT help: mlm -20.0 points")
