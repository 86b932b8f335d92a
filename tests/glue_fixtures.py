"""Builders for the GLUE tests: format-exact GLUE folders (the layout download_glue_data.py writes), a custom
task, a tiny pretrained model folder (its model: tests/helpers.py glue_model_config), a tokenizer. The test_glue_*
files import these; test_glue_fixtures.py checks that the fixture files have the exact layout of the real GLUE
files.

GLUE_DATA: a real GLUE folder for the few tests that read one (skipped without it); $GLUE_DIR overrides where.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

from tests.helpers import SHARED_DATA, glue_model_config

GLUE_DATA = Path(os.environ.get("GLUE_DIR", SHARED_DATA / "glue"))

WORDS = "the a film movie plot actor story man woman dog cat house city car tree river music food day night".split()
GOOD, BAD = "wonderful", "terrible"  # the signal word of the learnable fixture labels


def sentence(rng: random.Random, label: int | None = None) -> str:
    words = rng.choices(WORDS, k=rng.randint(3, 9))
    if label is not None:
        words.insert(rng.randint(0, len(words)), GOOD if label == 1 else BAD)
    return " ".join(words) + " ."


def _write(path: Path, lines: list[str], bom: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "\n".join(lines) + "\n"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + data.encode("utf-8"))


def write_glue(root: Path, n_train: int = 32, n_dev: int = 16, n_test: int = 8, seed: int = 0) -> Path:
    """A GLUE folder with all nine tasks and the diagnostic set, in the layout of download_glue_data.py.

    Labels of the binary and NLI tasks depend on a signal word in the first sentence, so a model can learn them.
    Returns `root`. Row i of each split has label `labels_of(task)[i]` (see `label_of`).
    """
    rng = random.Random(seed)
    nli2, nli3 = ["entailment", "not_entailment"], ["entailment", "neutral", "contradiction"]

    def rows(n: int, make) -> list[str]:
        return [make(i, i % 2) for i in range(n)]

    # one file per statement, laid out like the files themselves
    # fmt: off
    for split, n in (("train", n_train), ("dev", n_dev)):
        # CoLA: no header; source, label, original annotation ('*' for unacceptable), sentence
        _write(root / "CoLA" / f"{split}.tsv",
               rows(n, lambda i, y: f"gj04\t{y}\t{'' if y else '*'}\t{sentence(rng, y)}"))
        _write(root / "SST-2" / f"{split}.tsv", ["sentence\tlabel"] + rows(n, lambda i, y: f"{sentence(rng, y)} \t{y}"))
        # MRPC: a UTF-8 BOM, and a stray quote character that quoting must not swallow
        _write(root / "MRPC" / f"{split}.tsv",
               ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
               + rows(n, lambda i, y: f"{y}\t{1000 + i}\t{2000 + i}\t\" {sentence(rng, y)}\t{sentence(rng)}"), bom=True)
        _write(root / "STS-B" / f"{split}.tsv",
               ["index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"]
               + rows(n, lambda i, y: f"{i}\tmain-captions\tMSRvid\t2012test\t{i:04d}\tnone\tnone\t"
                                      f"{sentence(rng, y)}\t{sentence(rng)}\t{(i % 6) * 0.8 + y:.3f}"))
        _write(root / "QQP" / f"{split}.tsv",
               ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate"]
               + rows(n, lambda i, y: f"{i}\t{2 * i}\t{2 * i + 1}\t{sentence(rng, y)}\t{sentence(rng)}\t{y}"))
        _write(root / "QNLI" / f"{split}.tsv", ["index\tquestion\tsentence\tlabel"]
               + rows(n, lambda i, y: f"{i}\t{sentence(rng, y)}\t{sentence(rng)}\t{nli2[y]}"))
        _write(root / "RTE" / f"{split}.tsv", ["index\tsentence1\tsentence2\tlabel"]
               + rows(n, lambda i, y: f"{i}\t{sentence(rng, y)}\t{sentence(rng)}\t{nli2[y]}"))
        _write(root / "WNLI" / f"{split}.tsv", ["index\tsentence1\tsentence2\tlabel"]
               + rows(n, lambda i, y: f"{i}\t{sentence(rng, y)}\t{sentence(rng)}\t{y}"))
    mnli_cols = "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t" \
                "sentence2_parse\tsentence1\tsentence2"
    def mnli_row(i: int, labels: int) -> str:  # noqa: E306  (annotator labels, then gold_label, unless test)
        a, b, gold = sentence(rng, i % 2), sentence(rng), nli3[i % 3]
        cells = [str(i), str(i), f"{i}e", "fiction", f"( {a} )", f"( {b} )", f"(ROOT {a})", f"(ROOT {b})", a, b]
        return "\t".join(cells + ([gold] * (labels + 1) if labels else []))
    _write(root / "MNLI" / "train.tsv", [f"{mnli_cols}\tlabel1\tgold_label"] + [mnli_row(i, 1) for i in range(n_train)])
    dev_header = f"{mnli_cols}\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label"
    for name in ("dev_matched", "dev_mismatched"):
        _write(root / "MNLI" / f"{name}.tsv", [dev_header] + [mnli_row(i, 5) for i in range(n_dev)])
    for name in ("test_matched", "test_mismatched"):
        _write(root / "MNLI" / f"{name}.tsv", [mnli_cols] + [mnli_row(i, 0) for i in range(n_test)])

    # test files: a header with an index column (QQP: id), no labels
    _write(root / "CoLA" / "test.tsv", ["index\tsentence"] + [f"{i}\t{sentence(rng)}" for i in range(n_test)])
    _write(root / "SST-2" / "test.tsv", ["index\tsentence"] + [f"{i}\t{sentence(rng)}" for i in range(n_test)])
    _write(root / "MRPC" / "test.tsv", ["index\t#1 ID\t#2 ID\t#1 String\t#2 String"]
           + [f"{i}\t{i}\t{i}\t{sentence(rng)}\t{sentence(rng)}" for i in range(n_test)])
    _write(root / "STS-B" / "test.tsv",
           ["index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"]
           + [f"{i}\tmain-news\theadlines\t2015\t{i:04d}\tnone\tnone\t{sentence(rng)}\t{sentence(rng)}"
              for i in range(n_test)])
    _write(root / "QQP" / "test.tsv", ["id\tquestion1\tquestion2"]
           + [f"{i}\t{sentence(rng)}\t{sentence(rng)}" for i in range(n_test)])
    _write(root / "QNLI" / "test.tsv", ["index\tquestion\tsentence"]
           + [f"{i}\t{sentence(rng)}\t{sentence(rng)}" for i in range(n_test)])
    for task in ("RTE", "WNLI"):
        _write(root / task / "test.tsv", ["index\tsentence1\tsentence2"]
               + [f"{i}\t{sentence(rng)}\t{sentence(rng)}" for i in range(n_test)])
    _write(root / "diagnostic" / "diagnostic.tsv", ["index\tsentence1\tsentence2"]
           + [f"{i}\t{sentence(rng)}\t{sentence(rng)}" for i in range(n_test)])
    # fmt: on
    return root


def label_of(task: str, i: int) -> int | float:
    """The label id (or score) of row i of a fixture train/dev file."""
    if task == "mnli":
        return i % 3  # entailment, neutral, contradiction in the hub's order
    if task in ("qnli", "rte"):
        return i % 2  # row label is entailment (id 0) for even i
    if task == "stsb":
        return round((i % 6) * 0.8 + i % 2, 3)
    return i % 2


def write_custom_task(root: Path, name: str = "syn-agree", n_train: int = 64, n_dev: int = 32, seed: int = 1) -> Path:
    """A custom single-sentence task in the task.json layout; label 1 iff the sentence has the GOOD word."""
    rng = random.Random(seed)
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    spec = {
        "name": name,
        "text_a": "sentence",
        "text_b": None,
        "label": "label",
        "labels": ["0", "1"],
        "metrics": ["accuracy", "mcc"],
        "main_metric": "accuracy",
        "epochs": 3,
    }
    (folder / "task.json").write_text(json.dumps(spec, indent=1))
    for split, n in (("train", n_train), ("dev", n_dev)):
        _write(folder / f"{split}.tsv", ["sentence\tlabel"] + [f"{sentence(rng, i % 2)}\t{i % 2}" for i in range(n)])
    _write(folder / "test.tsv", ["index\tsentence"] + [f"{i}\t{sentence(rng, i % 2)}" for i in range(8)])
    return folder


def make_tokenizer(folder: Path, texts: list[str] | None = None):
    """A tiny WordPiece tokenizer with our special tokens and the [CLS] A [SEP] B [SEP] post-processor."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    from electra.data.tokenizer import SPECIAL_TOKENS

    texts = texts or [" ".join(WORDS + [GOOD, BAD, "wnli", "rte"]) + " . , ' \" ?"] * 4
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=200, special_tokens=SPECIAL_TOKENS))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    return tok


def make_run(run: Path, seed: int = 0, **sizes) -> Path:
    """A pretraining run folder as `electra pretrain` leaves it: a step-0 checkpoint and run/tokenizer/."""
    import torch

    from electra.config import PretrainConfig
    from electra.modeling.electra import ElectraForPretraining
    from electra.training.checkpoint import checkpoint_dir, save_config, save_model_checkpoint

    torch.manual_seed(seed)
    cfg = PretrainConfig(model=glue_model_config(**sizes))
    make_tokenizer(run / "tokenizer")
    save_config(cfg, run / "config.yaml")
    save_model_checkpoint(ElectraForPretraining(cfg.model), cfg, checkpoint_dir(run, 0))
    return run
