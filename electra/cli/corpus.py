"""`electra tokenizer train` and `electra data prepare`: text to a tokenizer, and text to a pretraining corpus."""

from __future__ import annotations

import argparse

from electra.cli.common import add_quiet


def add_tokenizer(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("train", help="train a tokenizer and write OUT/tokenizer.json")
    kinds = "bpe: byte-level BPE, cased (the study); wordpiece: uncased WordPiece (the original)"
    p.add_argument("--kind", choices=["bpe", "wordpiece"], default="bpe", help=kinds)
    p.add_argument("--vocab-size", type=int, default=30522, help="vocabulary size, special tokens included")
    p.add_argument("--out", required=True, help="output folder (tokenizer.json is written into it)")
    p.add_argument("--overwrite", action="store_true", help="replace the tokenizer that --out already holds")
    _add_input_arguments(p)
    add_quiet(p)


INPUTS_HELP = (
    ".txt/.jsonl/.parquet/.arrow files, tar archives (OpenWebText's openwebtext.tar.xz or its urlsf_subset*.xz), "
    "folders of those, a folder written by datasets' save_to_disk, or a hub dataset NAME[:CONFIG] (offline: from "
    "the local datasets cache)"
)


def _add_input_arguments(p: argparse.ArgumentParser) -> None:
    """The inputs and how to read them: shared by `tokenizer train` and `data prepare`."""
    from electra.data.sources import BINARY_RATE, DOC_SEPARATORS, ReadOptions

    d = ReadOptions()
    separators = (
        ".txt files: blank: a blank line ends a document (default); file: each file is one document, blank lines "
        "separate its paragraphs (OpenWebText); line: each non-empty line is a document"
    )
    column = "the text field of .jsonl rows, the text column of Parquet/Arrow/datasets rows (default: text)"
    p.add_argument("inputs", nargs="+", metavar="INPUT", help=INPUTS_HELP)
    p.add_argument("--doc-separator", choices=DOC_SEPARATORS, default=d.doc_separator, help=separators)
    p.add_argument("--text-column", default=d.text_column, help=column)
    p.add_argument("--split", default=d.split, help="the split of a DatasetDict folder or hub dataset (default: train)")
    binary = (
        f"read inputs that are not UTF-8 text (over {BINARY_RATE * 100:g}%% of their bytes invalid UTF-8 or NUL: a "
        "binary file, or another encoding), invalid sequences as U+FFFD"
    )
    p.add_argument("--allow-binary", action="store_true", help=binary)


def _read_options(args: argparse.Namespace):
    from electra.data.sources import ReadOptions

    return ReadOptions(doc_separator=args.doc_separator, text_column=args.text_column, split=args.split)


def run_tokenizer(args: argparse.Namespace) -> int:
    import time

    from electra.data.tokenizer import load_tokenizer, train_tokenizer

    start = time.perf_counter()
    path = train_tokenizer(
        args.kind,
        args.vocab_size,
        args.inputs,
        args.out,
        show_progress=not args.quiet,
        read_options=_read_options(args),
        overwrite=args.overwrite,
        allow_binary=args.allow_binary,
    )
    vocab = load_tokenizer(path).get_vocab()
    print(f"wrote {path} ({len(vocab)} tokens) in {time.perf_counter() - start:.1f}s{_vocab_overshoot(vocab, args)}")
    return 0


def _vocab_overshoot(vocab: dict[str, int], args: argparse.Namespace) -> str:
    """Why a WordPiece vocabulary came out larger than --vocab-size: its trainer keeps every character of the
    text's alphabet (each alone and as a ##continuation), whatever the size asked for; "" when it did not."""
    if len(vocab) <= args.vocab_size:
        return ""
    chars = sum(len(t.removeprefix("##")) == 1 for t in vocab)
    return (
        f"; {len(vocab) - args.vocab_size:,} more than --vocab-size {args.vocab_size:,}: WordPiece keeps every "
        f"character of the text's alphabet ({chars:,} single-character entries here, ## forms included); "
        "a byte-level BPE (--kind bpe) keeps the size"
    )


def add_data(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("prepare", help="tokenize text into a memory-mapped pretraining corpus folder")
    tokenizer = (
        "folder with tokenizer.json (or a BERT vocab.txt), or the file; or a model's: a run folder or checkpoint, our "
        "transformers export, a transformers folder or hub id ORG/NAME[@REVISION] (the text a model continues on)"
    )
    p.add_argument("--tokenizer", required=True, help=tokenizer)
    p.add_argument("--out", required=True, help="output folder (created atomically)")
    _add_input_arguments(p)
    workers = "tokenizer processes (default: one per core; one on machines with two cores or fewer)"
    p.add_argument("--workers", type=int, default=None, help=workers)
    p.add_argument("--overwrite", action="store_true", help="replace an existing, different prepared folder")
    unknown = "prepare a corpus even when most of its tokens are [UNK] (the tokenizer cannot read it)"
    p.add_argument("--allow-unknown-tokens", action="store_true", help=unknown)
    add_quiet(p)


def run_data(args: argparse.Namespace) -> int:
    from electra.data.prepare import prepare, summary
    from electra.modeling.hub import resolve_model

    meta = prepare(
        args.inputs,
        resolve_model(args.tokenizer),  # a hub id: its cached snapshot; a model folder: its tokenizer (prepare)
        args.out,
        args.workers,
        args.overwrite,
        not args.quiet,
        read_options=_read_options(args),
        allow_unknown_tokens=args.allow_unknown_tokens,
        allow_binary=args.allow_binary,
    )
    print(summary(meta, args.out))
    return 0
