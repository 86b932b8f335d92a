"""GLUE fine-tuning and evaluation: tasks -> loading -> features -> heads -> optim -> finetune -> metrics -> report
-> submission, driven by `run_sweep` (sweep.py; `electra glue` in electra/cli/glue.py). See docs/glue.md.
"""
