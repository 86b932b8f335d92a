"""The `electra` command. Each subcommand lives in the module that does the work, as two plain functions:
`add_arguments(parser)` and `run(args) -> int`. Only the chosen subcommand's module is imported.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

# name -> (module, one-line help), in pipeline order
COMMANDS = {
    "tokenizer": ("electra.data.tokenizer", "train a byte-level BPE or WordPiece tokenizer"),
    "data": ("electra.data.prepare", "prepare a tokenized pretraining corpus"),
    "pretrain": ("electra.pretrain", "pretrain ELECTRA (generator + discriminator)"),
    "glue": ("electra.glue.sweep", "fine-tune and evaluate on GLUE over several seeds, with a report"),
    "export-hf": ("electra.cli", "write a run's model in transformers format"),
    "import-hf": ("electra.cli", "make a run folder from transformers ELECTRA folders"),
    "flops": ("electra.flops", "training FLOPs and pfs-days of a configuration"),
    "bench": ("electra.bench", "time a pretraining or fine-tuning step"),
    "demo": ("electra.cli", "a short pretraining run of the tiny model on the built-in corpus"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    top = argparse.ArgumentParser(
        prog="electra",
        description="ELECTRA pretraining and GLUE transfer on a small compute budget.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands:\n" + "\n".join(f"  {n:<10} {h}" for n, (_, h) in COMMANDS.items()),
    )
    top.add_argument("command", choices=COMMANDS, metavar="COMMAND", help="one of the commands below")
    if not argv or argv[0] in ("-h", "--help"):
        top.print_help()
        return 0
    if argv[0] not in COMMANDS:
        top.parse_args(argv[:1])  # exits with argparse's "invalid choice" message
    name = argv[0]
    module_name, help_text = COMMANDS[name]
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"electra {name}", description=help_text)
    add, run = _handlers(module, name)
    add(parser)
    args = parser.parse_args(argv[1:])
    try:
        return run(args) or 0
    except KeyboardInterrupt:
        return 130
    except (ValueError, FileNotFoundError, OSError) as err:
        # Errors we raise for bad input carry the file and line; show them as one line, not a traceback.
        print(f"electra {name}: error: {err}", file=sys.stderr)
        return 2


def _handlers(module, name: str):
    if module.__name__ == __name__:
        suffix = name.replace("-", "_")
        return globals()[f"add_{suffix}_arguments"], globals()[f"run_{suffix}"]
    return module.add_arguments, module.run


# -- the small commands that live here -----------------------------------------------------------------------


def add_export_hf_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="a run folder (its newest checkpoint) or a checkpoint folder")
    p.add_argument("out", help="output folder: writes OUT/discriminator and OUT/generator")


def run_export_hf(args: argparse.Namespace) -> int:
    from electra.checkpoint import find_tokenizer, load_pretraining_model, resolve_checkpoint
    from electra.hf_compat import to_hf

    ckpt = resolve_checkpoint(args.run)
    model, _ = load_pretraining_model(ckpt)
    out = to_hf(model, args.out, find_tokenizer(ckpt))
    print(f"wrote {out / 'discriminator'} and {out / 'generator'} (from {ckpt})")
    return 0


def add_import_hf_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--discriminator", required=True, help="transformers ElectraForPreTraining folder")
    p.add_argument("--generator", required=True, help="transformers ElectraForMaskedLM folder")
    p.add_argument("--out", required=True, help="run folder to create (a step-0 checkpoint)")


def run_import_hf(args: argparse.Namespace) -> int:
    import shutil
    from pathlib import Path

    from electra.checkpoint import checkpoint_dir, find_tokenizer, save_config, save_model_checkpoint
    from electra.config import PretrainConfig
    from electra.hf_compat import from_hf

    model = from_hf(args.discriminator, args.generator)
    cfg = PretrainConfig.for_model(model.cfg)
    out = Path(args.out)
    save_config(cfg, out / "config.yaml")
    tok = find_tokenizer(Path(args.discriminator))
    if tok is not None:
        (out / "tokenizer").mkdir(parents=True, exist_ok=True)
        for name in ("tokenizer.json", "vocab.txt"):
            if (tok / name).exists():
                shutil.copy(tok / name, out / "tokenizer" / name)
    ckpt = save_model_checkpoint(model, cfg, checkpoint_dir(out, 0))
    print(f"imported into {ckpt}" + ("" if tok else " (no tokenizer found beside the discriminator)"))
    return 0


def add_demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="runs/demo", help="run folder (replaced if it exists)")
    p.add_argument("--max-steps", type=int, default=None, help="pretraining steps (default: the tiny preset's)")


def run_demo(args: argparse.Namespace) -> int:
    from electra.demo import demo

    return demo(args.out, args.max_steps)


if __name__ == "__main__":
    sys.exit(main())
