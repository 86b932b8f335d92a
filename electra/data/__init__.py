"""Pretraining data: tokenizers, corpus preparation, and the example sources the training loop draws from.

The contract with the training loop is small and pure: an `ExampleSource` maps global example ids to token
arrays. The loop asks for ids [step * B, (step + 1) * B) and splits them across ranks and micro-batches, so a
resumed run sees exactly the batches it would have seen, ranks get disjoint data, and how a batch is split never
changes what it contains.
"""
