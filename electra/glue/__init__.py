"""GLUE fine-tuning and evaluation: tasks -> loading -> features -> heads -> optim -> finetune -> metrics -> report
-> submission, driven by `electra glue` (sweep.py). See docs/glue.md.
"""
