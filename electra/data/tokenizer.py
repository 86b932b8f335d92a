"""Tokenizers: loading an existing one (ours, or a BERT `vocab.txt`). Training is added below.

Special tokens and their ids are fixed for tokenizers we train: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4.
A BERT vocab.txt keeps its own ids ([PAD]=0, [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103).
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from electra.data import TokenizerInfo

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def load_tokenizer(path: str | Path) -> Tokenizer:
    """A `tokenizers.Tokenizer` from a folder (or file) holding tokenizer.json, or a BERT-style vocab.txt.

    Sequences are encoded with [CLS] A [SEP] (B [SEP]) and token type ids 0/1; no padding or truncation is set.
    """
    path = Path(path)
    if path.is_dir():
        if (path / "tokenizer.json").exists():
            path = path / "tokenizer.json"
        elif (path / "vocab.txt").exists():
            path = path / "vocab.txt"
        else:
            raise FileNotFoundError(f"{path}: no tokenizer.json or vocab.txt in this folder")
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such tokenizer file")
    if path.name.endswith(".txt"):
        from tokenizers.implementations import BertWordPieceTokenizer

        tok = BertWordPieceTokenizer(str(path), lowercase=True, strip_accents=True)
        return tok._tokenizer
    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:
        raise ValueError(f"{path}: not a valid tokenizer.json: {err}") from err


def tokenizer_info(path: str | Path) -> TokenizerInfo:
    tok = load_tokenizer(path)
    ids = {}
    for token in SPECIAL_TOKENS:
        token_id = tok.token_to_id(token)
        if token_id is None:
            raise ValueError(f"{path}: tokenizer has no {token} token")
        ids[token] = token_id
    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    return TokenizerInfo(
        vocab_size=tok.get_vocab_size(),
        pad_id=ids["[PAD]"], unk_id=ids["[UNK]"], cls_id=ids["[CLS]"], sep_id=ids["[SEP]"], mask_id=ids["[MASK]"],
        path=folder,
    )  # fmt: skip
