"""Numbers quoted from the literature, never measured here: every one is marked with its source. The report prints
them beside ours as "quoted" rows.

- The ELECTRA paper (Clark et al. 2020, "ELECTRA: Pre-training Text Encoders as Discriminators Rather Than
  Generators"), Table 1 and section 3.4: GLUE dev scores, training FLOPs, parameters, hardware.
- google-research/electra's README (OFF): per-task GLUE dev medians of ELECTRA-Small-OWT and ELECTRA-Small++.
- The ML Reproducibility Challenge 2020 study "Efficient transfer learning for NLP with ELECTRA" (cccwam/
  rc2020_electra, "the study", RC): its per-task GLUE dev scores (MNLI matched + mismatched merged into one
  accuracy) and its efficiency table.
- google-research/electra issue #73: a run with a generator as wide as the discriminator (1:1).
"""

from __future__ import annotations

# ELECTRA paper Table 1 and section 3.4 (GLUE dev score as the paper reports it; training FLOPs; parameters).
LITERATURE = (
    ("ELMo", 96e6, 3.3e18, 71.2),
    ("GPT", 117e6, 4.0e19, 78.8),
    ("BERT-Small", 14e6, 1.4e18, 75.1),
    ("BERT-Base", 110e6, 6.4e19, 82.2),
    ("ELECTRA-Small", 14e6, 1.4e18, 79.9),
    ("ELECTRA-Small 50%", 14e6, 7.1e17, 79.0),
    ("ELECTRA-Small 25%", 14e6, 3.6e17, 77.7),
    ("ELECTRA-Small 12.5%", 14e6, 1.8e17, 76.0),
    ("ELECTRA-Small 6.25%", 14e6, 8.9e16, 74.1),
    ("ELECTRA-Base", 110e6, 6.4e19, 85.1),
)

# The study's efficiency table (RC report; quoted): model, parameters, hardware, pfs-days by the OpenAI "AI and
# Compute" convention (days x GPUs x peak TFLOP/s x 0.33 / 1000), its score and what the score is.
STUDY_EFFICIENCY = (
    ("GPT", 110e6, "30 days on 8 P600", 0.95, 77.9, "GLUE dev average (its GLUE score: 75.4)"),
    ("DistilBERT", 67e6, "90 h on 8 V100", 0.16, 77.0, "GLUE score"),
    ("ELECTRA-Small (original)", 14e6, "4 days on 1 V100", 0.02, 80.4, "8-task GLUE dev average"),
    (
        "ELECTRA-Small (the study)",
        14e6,
        "3.75 days on 1 RTX 3090",
        0.03,
        79.2,
        "GLUE dev average, MNLI m+mm merged (its GLUE score: 76.7)",
    ),
)

# Per-task dev scores of ELECTRA-Small as published: OFF's README (ELECTRA-Small-OWT, medians; Small++ released),
# the reproduction study (RC, MNLI matched + mismatched merged), and a 1:1-generator run (google-research/electra#73).
REFERENCE_TASKS = {
    "OFF ELECTRA-Small-OWT": {
        "cola": 56.8,
        "sst2": 88.3,
        "mrpc": 87.4,
        "stsb": 86.8,
        "qqp": 88.3,
        "mnli": 78.9,
        "qnli": 87.9,
        "rte": 68.5,
    },
    "OFF ELECTRA-Small++": {
        "cola": 57.0,
        "sst2": 91.2,
        "mrpc": 88.0,
        "stsb": 87.5,
        "qqp": 89.0,
        "mnli": 81.3,
        "qnli": 88.4,
        "rte": 66.7,
    },
    "the study (RC)": {
        "cola": 53.5,
        "sst2": 88.7,
        "mrpc": 87.6,
        "stsb": 85.2,
        "qqp": 86.1,
        "mnli": 80.2,
        "qnli": 87.5,
        "rte": 61.5,
    },
    "1:1 generator (#73)": {
        "cola": 51.04,
        "sst2": 85.21,
        "mrpc": 83.58,
        "stsb": 84.79,
        "qqp": 87.16,
        "mnli": 75.01,
        "qnli": 84.79,
        "rte": 66.06,
    },
}
