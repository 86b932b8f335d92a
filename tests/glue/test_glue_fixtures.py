"""The GLUE fixture files (tests/glue_fixtures.py) have the exact layout of the real GLUE files: CoLA's missing
header, MRPC's BOM, the column counts, byte for byte where it matters."""

from __future__ import annotations

import pytest

from tests.glue_fixtures import GLUE_DATA, write_glue

# -- the fixtures are format-exact -------------------------------------------------------------------------------


def test_fixture_layout_matches_glue(tmp_path):
    root = write_glue(tmp_path)
    mrpc = (root / "MRPC" / "train.tsv").read_bytes()
    assert mrpc.startswith(b"\xef\xbb\xbfQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n")
    cola = (root / "CoLA" / "train.tsv").read_text().splitlines()
    assert cola[0].split("\t")[:3] == ["gj04", "0", "*"] and len(cola) == 32  # no header row
    assert (root / "CoLA" / "test.tsv").read_text().startswith("index\tsentence\n")
    widths = {
        "MNLI/train.tsv": 12,
        "MNLI/dev_matched.tsv": 16,
        "MNLI/test_matched.tsv": 10,
        "STS-B/dev.tsv": 10,
        "STS-B/test.tsv": 9,
        "QQP/train.tsv": 6,
        "QQP/test.tsv": 3,
        "SST-2/train.tsv": 2,
    }
    for name, width in widths.items():
        assert {len(line.split("\t")) for line in (root / name).read_text().splitlines()} == {width}, name


@pytest.mark.skipif(not GLUE_DATA.is_dir(), reason="shared GLUE data not present")
def test_fixture_headers_equal_the_real_files(tmp_path):
    root = write_glue(tmp_path)
    for name in (
        "SST-2/train.tsv",
        "MRPC/train.tsv",
        "RTE/train.tsv",
        "WNLI/train.tsv",
        "QNLI/dev.tsv",
        "SST-2/test.tsv",
        "RTE/test.tsv",
        "QNLI/test.tsv",
    ):
        real = (GLUE_DATA / name).read_bytes().split(b"\n", 1)[0]
        assert (root / name).read_bytes().split(b"\n", 1)[0] == real, name
