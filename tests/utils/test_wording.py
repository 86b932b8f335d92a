"""The arguments a message names, in the caller's words: the library's Python argument, the command line's flag."""

from __future__ import annotations

from electra.utils.wording import argument, as_flags

FLAGS = {"resume": "--resume", "run_dir": "--out", "glue_dir": "--glue-dir", "predict_test": "--predict-test"}


def test_a_message_names_python_arguments_and_the_cli_turns_them_into_flags():
    message = (
        f"runs/a b already holds checkpoints: pass {argument('resume', 'auto')} to continue, or another "
        f"{argument('run_dir')}; {argument('finetune.predict_test', True)}; {argument('glue_dir', 'my glue')}"
    )
    assert message == (
        'runs/a b already holds checkpoints: pass `resume="auto"` to continue, or another `run_dir`; '
        '`finetune.predict_test=True`; `glue_dir="my glue"`'
    )
    assert as_flags(message, FLAGS) == (
        "runs/a b already holds checkpoints: pass --resume auto to continue, or another --out; --predict-test; "
        "--glue-dir 'my glue'"  # quoted as a shell needs it
    )


def test_only_the_commands_arguments_become_flags():
    """Other text between backticks (a package's name, an argument the command has no flag for) stays."""
    message = f"not a readable `datasets` folder; {argument('loggers', 'wandb')}"
    assert as_flags(message, FLAGS) == message
