"""Table 1 for a continued run (`pretrain --init`, issue 48): the FLOPs of its own steps, with the FLOPs already
spent in the model it started from beside them (unknown for a model trained elsewhere), and a note saying so."""

from __future__ import annotations

from electra.config import load_config
from electra.modeling.flops import off_train_flops
from electra.report.results import Entry, PretrainRun, compute_row
from electra.report.tables import CONTINUED_NOTE, compute_table
from tests.report.test_report import rows


def test_table_1_shows_the_sources_flops_beside_a_continued_runs_own(tmp_path):
    cfg = load_config("tiny")

    def entry(name: str, meta: dict) -> Entry:
        return Entry(name, PretrainRun(tmp_path, cfg, {"step": 300, "sessions": [], **meta}, [], []), None)

    ours = entry("tapt", {"init": {"source": "runs/base", "step": 9000, "flops": 2.5e13}})
    released = entry("dapt", {"init": {"source": "google/electra-small-discriminator", "step": None, "flops": None}})
    scratch = entry("scratch", {})
    assert compute_row(ours)["flops"] == off_train_flops(cfg, 300)  # its own steps only
    assert (compute_row(ours)["source_flops"], compute_row(released)["continued"]) == (2.5e13, True)
    text = "\n".join(compute_table([ours, released, scratch]))
    table = {r[0]: r for r in rows(text, "### Table 1: compute per experiment")}
    own = f"{off_train_flops(cfg, 300):.3g}"
    assert table["tapt"][4] == f"{own} (+ 2.5e+13 in its source)"
    assert table["dapt"][4] == f"{own} (+ unknown in its source)"
    assert table["scratch"][4] == own
    assert CONTINUED_NOTE in text
    assert CONTINUED_NOTE not in "\n".join(compute_table([scratch]))
