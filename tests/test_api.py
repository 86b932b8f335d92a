"""`import electra`: cheap (no torch until a function is used), exposing the very functions the commands call, and
the example of docs/api.md running as written."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

from tests.helpers import ROOT, run_python


@pytest.mark.slow  # a fresh interpreter
def test_import_electra_loads_no_torch():
    script = (
        "import json, sys, electra; print(json.dumps({'heavy': [m for m in ('torch', 'transformers', "
        "'datasets') if m in sys.modules], 'dir': 'run_sweep' in dir(electra)}))"
    )
    done = run_python("-c", script, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"heavy": [], "dir": True}


def test_the_names_are_the_functions_the_commands_call():
    import electra

    assert electra.__all__ == [
        "train_tokenizer",
        "prepare",
        "load_config",
        "pretrain",
        "load_finetune_config",
        "SweepSpec",
        "run_sweep",
        "write_report",
        "StudySpec",
        "run_study",
        "export_run_to_hf",
        "import_run_from_hf",
        "from_hf",
        "to_hf",
    ]
    import electra.training.loop  # noqa: F401 - the module beside the function: importing it must not shadow it

    for name, module in electra.API.items():
        assert getattr(electra, name) is getattr(importlib.import_module(module), name), name
    assert callable(electra.pretrain) and electra.pretrain.__module__ == "electra.training.loop"
    with pytest.raises(AttributeError, match="no attribute 'pretrian'"):
        electra.pretrian  # noqa: B018


def docs_example() -> str:
    (code,) = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "api.md").read_text(), flags=re.S)
    return code


@pytest.mark.slow
def test_the_example_in_docs_api_md_runs_as_written(tmp_path, monkeypatch, capsys):
    """Pretraining on the synthetic corpus, fine-tuning on the synthetic tasks, the report (about 10 s)."""
    monkeypatch.chdir(tmp_path)
    exec(compile(docs_example(), "docs/api.md", "exec"), {})
    runs = tmp_path / "runs"
    steps = [json.loads(line)["step"] for line in (runs / "tiny" / "metrics.jsonl").read_text().splitlines()]
    assert steps[-1] == 40
    results = json.loads((runs / "glue" / "results.json").read_text())
    assert sorted(results["tasks"]) == ["syn-agree", "syn-entail", "syn-sim", "syn-topic"]
    for record in runs.glob("glue/runs/*/seed0/result.json"):  # its "loss A -> B" moved: A was B in every run
        r = json.loads(record.read_text())
        assert r["steps"] == 10 and r["loss_start"] != r["loss_end"], record
    assert (runs / "report" / "report.md").exists()
    assert f"report: {Path('runs/report/report.md')}" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["SweepSpec", "StudySpec"])
def test_help_on_a_spec_shows_each_field_with_its_type_default_and_docstring(name):
    """docs/api.md: `help(electra.SweepSpec)` lists the fields with their meaning. Python keeps no attribute
    docstrings, so `import electra` writes them into the class docstring."""
    import dataclasses
    import pydoc

    import electra
    from electra.utils.fielddocs import field_docs

    cls = getattr(electra, name)
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    flat = " ".join(" ".join(line.removeprefix(" |") for line in text.splitlines()).split())  # pydoc's margin off
    docs = field_docs(cls)
    assert len(docs) >= 8  # the documented fields: most of them
    for f in dataclasses.fields(cls):
        assert f"{f.name}: {f.type}" in flat, f.name
        if f.name in docs:
            assert f"{f.name}: {f.type}" in flat and docs[f.name] in flat, f.name
    if name == "SweepSpec":  # the default seeds, as `electra glue` takes them (README's commands pass --seeds 3)
        assert "seeds: list[int] = [0, 1, 2]" in flat
        assert "glue_dir: str | None = None A GLUE folder: the original TSVs (CoLA/, SST-2/, ...)" in flat
    assert cls.__doc__.count("Fields:") == 1 and getattr(electra, name) is cls  # written once
