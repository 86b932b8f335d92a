"""The pretraining loop and what it runs on: the step, optimizer, precision, memory, prefetch, the stop
vote, checkpoints and resume, held-out evaluation and trackers."""
