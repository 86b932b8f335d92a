import pytest

from electra.config import ConfigError, load_config, preset_names


def test_presets_resolve_to_the_paper_sizes():
    assert {"tiny", "small", "small++", "base", "large"} <= set(preset_names())
    small = load_config("small")
    g = small.model.generator
    assert (g.hidden_size, g.num_heads, g.intermediate_size, g.num_layers) == (64, 1, 256, 12)
    assert small.num_mask_slots == 19  # int((0.15 + 0.005) * 128), OFF max_predictions_per_seq
    gpp = load_config("small++").model.generator
    assert (gpp.hidden_size, gpp.num_heads, gpp.intermediate_size) == (256, 4, 1024)
    base = load_config("base").model.generator
    assert (base.hidden_size, base.num_heads, base.intermediate_size) == (256, 4, 1024)
    large = load_config("large").model.generator
    assert (large.hidden_size, large.num_heads, large.intermediate_size) == (256, 4, 1024)
    tiny = load_config("tiny")
    assert (tiny.model.num_layers, tiny.model.hidden_size, tiny.data.seq_len) == (2, 64, 64)


def test_overrides_are_typed_and_applied_last():
    cfg = load_config("tiny", ["train.lr=1e-3", "model.generator_fraction=0.5", "train.micro_batch_size=8"])
    assert cfg.train.lr == 1e-3 and cfg.model.generator.hidden_size == 32 and cfg.train.micro_batch_size == 8
    assert load_config("tiny", ["train.micro_batch_size=null"]).train.micro_batch_size is None


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.lrr=1", "unknown key 'train.lrr'"),
        ("modle.hidden_size=1", "unknown key 'modle'"),
        ("train.max_steps=ten", "train.max_steps must be int"),
        ("train.optimizer=sgd", "train.optimizer must be one of"),
        ("train.compile=1", "train.compile must be bool"),
        ("model.num_heads=3", "divisible"),
    ],
)
def test_bad_overrides_fail_with_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config("tiny", [override])


def test_yaml_file_with_unknown_key_names_the_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("model:\n  hidden_sise: 32\n")
    with pytest.raises(ConfigError, match=r"mine\.yaml: unknown key 'model\.hidden_sise'"):
        load_config(path)
    with pytest.raises(ConfigError, match="unknown config"):
        load_config("no-such-preset")
