"""A corpus too small to split into training and held-out documents (a text without blank lines is one document
under the default separator) is refused in one line saying why and what to do: at `data prepare`, before any
folder is kept, and at `pretrain` for a corpus prepared before that refusal existed, before its run folder is
written. It used to end in a divide-by-zero warning and an IndexError 20 lines deep."""

from __future__ import annotations

import json

import pytest

import electra.data.prepare as prepare_module
from electra.cli import main
from electra.data.corpus import split_documents
from electra.data.tokenizer import train_tokenizer
from electra.utils.errors import InputError
from tests.helpers import write_synthetic_text

# one document: lines of prose with no blank line between them
ONE_DOCUMENT = "\n".join(
    f"Line {i} of a diary kept without blank lines, about the weather on day {i}." for i in range(40)
)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tok")
    write_synthetic_text(folder / "train.txt", num_documents=40)
    return train_tokenizer("bpe", 400, [str(folder / "train.txt")], folder / "bpe", show_progress=False).parent


def prepare_args(tokenizer, text, out) -> list[str]:
    return ["data", "prepare", "--tokenizer", str(tokenizer), "--out", str(out), str(text), "--quiet", "--workers", "1"]


def test_data_prepare_refuses_a_one_document_text_naming_the_separator_to_use(tokenizer, tmp_path, capsys):
    text = tmp_path / "diary.txt"
    text.write_text(ONE_DOCUMENT + "\n")
    out = tmp_path / "corpus"
    assert main(prepare_args(tokenizer, text, out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"electra data: error: {text}: 1 document, too few to split into training and held-out documents "
        "(pretraining holds at least one out for its evaluation and needs 2): a document ends at a blank line and the "
        "text has none between documents; if each line of the text is a document, prepare it with --doc-separator line"
    ]
    assert not out.exists() and not list(tmp_path.glob(".corpus*"))  # nothing kept, not even a temporary folder
    assert main([*prepare_args(tokenizer, text, out), "--doc-separator", "line"]) == 0  # what the line says works
    assert json.loads((out / "metadata.json").read_text())["num_documents"] == 40


def test_pretrain_refuses_a_one_document_corpus_prepared_before_and_writes_no_run_folder(
    tokenizer, tmp_path, monkeypatch, capsys
):
    text = tmp_path / "diary.txt"
    text.write_text(ONE_DOCUMENT + "\n")
    with monkeypatch.context() as m:  # as `data prepare` wrote it before it refused such a corpus
        m.setattr(prepare_module, "check_splittable", lambda *a: None)
        assert main(prepare_args(tokenizer, text, tmp_path / "old")) == 0
    capsys.readouterr()
    run = tmp_path / "run"
    argv = ["pretrain", "--config", "tiny", "--data", str(tmp_path / "old"), "--out", str(run), "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"electra pretrain: error: {tmp_path / 'old'}: 1 document, too few to split into training and held-out "
        "documents (pretraining holds at least one out for its evaluation and needs 2); prepare its text again "
        "(electra data prepare), with --doc-separator line if each of its lines is a document"
    ]
    assert not run.exists() and not list(tmp_path.glob(".run*"))


def test_the_split_itself_refuses_fewer_than_two_documents():
    with pytest.raises(InputError, match="^the corpus: 1 document, too few to split"):
        split_documents(1, 0.01)
    train, held = split_documents(2, 0.01)
    assert len(train) == len(held) == 1 and set(train) | set(held) == {0, 1}
