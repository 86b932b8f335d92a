"""The ELECTRA model, masking and sampling, FLOPs, and conversion to and from transformers."""
