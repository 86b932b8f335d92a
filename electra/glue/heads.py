"""The fine-tuning model: the pretrained discriminator body plus one of three task heads.

    cls-linear  the original (OFF classification_tasks.py: get_pooled_output(), which modeling.py defines as the
                [CLS] hidden state, no pooler -> dropout 0.1 -> tf.layers.dense): [CLS] -> dropout -> Linear(H, n)
    mean-mlp    the study (RC): mean over non-pad tokens -> dropout -> Linear(H, H) -> GELU -> Linear(H, n)
    hf          transformers' ElectraClassificationHead: [CLS] -> dropout -> Linear(H, H) -> GELU -> dropout
                -> Linear(H, n), with its parameter names, so the model exports to ElectraForSequenceClassification

Binary tasks use two logits and argmax (RC's sigmoid of logit 1 was a bug); regression uses one output. The
head's Linear layers start as TF's default Glorot uniform (what OFF's tf.layers.dense without an initializer gets)
or normal(0, initializer_range) (transformers); biases 0.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from electra.config import HeadName, ModelConfig
from electra.glue.tasks import Task
from electra.modeling.convert_hf import hf_config, save_hf_tokenizer, save_quietly
from electra.modeling.electra import ElectraModel

HEADS = typing.get_args(HeadName)
HEAD_INITS = ("glorot_uniform", "normal")


class ClsLinearHead(nn.Module):
    def __init__(self, hidden: int, num_outputs: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(hidden, num_outputs)

    def forward(self, h: Tensor, attention_mask: Tensor) -> Tensor:
        return self.out_proj(self.dropout(h[:, 0]))  # (B, n)


class MeanMLPHead(nn.Module):
    def __init__(self, hidden: int, num_outputs: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.dense = nn.Linear(hidden, hidden)
        self.out_proj = nn.Linear(hidden, num_outputs)

    def forward(self, h: Tensor, attention_mask: Tensor) -> Tensor:
        m = attention_mask.to(h.dtype)[..., None]  # (B, T, 1)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1)  # (B, H): padding must not change the mean
        return self.out_proj(F.gelu(self.dense(self.dropout(pooled))))


class HFClassificationHead(nn.Module):
    """transformers' ElectraClassificationHead, same names (dense, out_proj) and order of operations."""

    def __init__(self, hidden: int, num_outputs: int, dropout: float):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(hidden, num_outputs)

    def forward(self, h: Tensor, attention_mask: Tensor) -> Tensor:
        x = F.gelu(self.dense(self.dropout(h[:, 0])))  # exact erf GELU, as transformers' get_activation("gelu")
        return self.out_proj(self.dropout(x))


_HEAD_CLASSES = {"cls-linear": ClsLinearHead, "mean-mlp": MeanMLPHead, "hf": HFClassificationHead}


class GlueModel(nn.Module):
    """`electra.*` (the body, transformers ElectraModel names) + `classifier.*` (the head)."""

    def __init__(
        self, body: ElectraModel, cfg: ModelConfig, head: str, num_outputs: int, head_init: str = "glorot_uniform"
    ):
        super().__init__()
        if head not in _HEAD_CLASSES:
            raise ValueError(f"unknown head {head!r}: expected one of {HEADS}")
        if head_init not in HEAD_INITS:
            raise ValueError(f"unknown head initialisation {head_init!r}: expected one of {HEAD_INITS}")
        self.cfg = cfg
        self.head_name = head
        self.electra = body
        self.classifier = _HEAD_CLASSES[head](cfg.hidden_size, num_outputs, cfg.dropout)
        for module in self.classifier.modules():
            if isinstance(module, nn.Linear):
                if head_init == "glorot_uniform":  # TF's default: U(-a, a), a = sqrt(6 / (fan_in + fan_out))
                    nn.init.xavier_uniform_(module.weight)
                else:
                    nn.init.normal_(module.weight, std=cfg.initializer_range)
                nn.init.zeros_(module.bias)

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> Tensor:
        h = self.electra(input_ids, attention_mask, token_type_ids)  # (B, T, H)
        return self.classifier(h, attention_mask)  # (B, n) logits, or (B, 1) scores


def export_hf(model: GlueModel, task: Task, out_dir: str | Path, tokenizer_dir: Path | None = None) -> Path:
    """Write a transformers `ElectraForSequenceClassification` folder (the `hf` head only).

    Regression scores come out in the model's training scale (STS-B: ÷5 when targets were scaled).
    """
    from transformers import ElectraConfig, ElectraForSequenceClassification

    if model.head_name != "hf":
        raise ValueError(f"only the hf head exports to ElectraForSequenceClassification, not {model.head_name!r}")
    fields = hf_config(model.cfg, "discriminator")
    fields.update(architectures=["ElectraForSequenceClassification"], num_labels=task.num_outputs)
    if task.labels is None:
        fields["problem_type"] = "regression"
    else:
        fields["problem_type"] = "single_label_classification"
        fields["id2label"] = dict(enumerate(task.labels))
        fields["label2id"] = {label: i for i, label in enumerate(task.labels)}
    hf_model = ElectraForSequenceClassification(ElectraConfig(**fields))
    state = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    result = hf_model.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if not k.endswith(("position_ids", "token_type_ids"))]
    if missing or result.unexpected_keys:
        raise ValueError(f"export to transformers: missing {missing[:5]}, unexpected {result.unexpected_keys[:5]}")
    out_dir = Path(out_dir)
    save_quietly(hf_model, out_dir)
    (out_dir / "glue_task.json").write_text(json.dumps({"task": task.name, "labels": task.labels}, indent=1))
    if tokenizer_dir is not None:
        save_hf_tokenizer(tokenizer_dir, out_dir)
    return out_dir


def build_model(
    body_state: dict[str, Tensor], cfg: ModelConfig, head: str, task: Task, seed: int, head_init: str = "glorot_uniform"
) -> GlueModel:
    """A fresh fine-tuning model: the pretrained body (copied) and a head initialised from `seed`."""
    torch.manual_seed(seed)
    body = ElectraModel(cfg)
    body.load_state_dict(body_state)
    return GlueModel(body, cfg, head, task.num_outputs, head_init)
