"""A study: the grid of pretraining settings, its plan, and the built-in demo."""
