"""Moving a batch from the example source to the device, and masking it for the objective."""

from __future__ import annotations

import numpy as np
import torch

from electra.config import PretrainConfig
from electra.data.tokenizer import TokenizerInfo
from electra.modeling.masking import mask_tokens


def host_batch(arrays: dict[str, np.ndarray], ids: np.ndarray, pin: bool) -> dict[str, torch.Tensor]:
    """Examples as CPU tensors (pinned when `pin`, so the copy to the GPU can be non-blocking), with their ids.
    `no_padding` (a host bool, read without touching the device) says whether the attention mask is all ones."""
    batch = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}
    batch["example_ids"] = torch.from_numpy(ids)
    if pin:
        batch = {k: v.pin_memory() for k, v in batch.items()}
    batch["no_padding"] = bool(arrays["attention_mask"].all())
    return batch


def to_device(batch: dict, device: torch.device) -> dict:
    """The tensors of a `host_batch` on the device (non-blocking from pinned memory); other values as they are."""
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def batch_to_device(arrays: dict[str, np.ndarray], ids: np.ndarray, device: torch.device) -> dict:
    return to_device(host_batch(arrays, ids, pin=device.type == "cuda"), device)


def masked_batch(cfg: PretrainConfig, tokens: TokenizerInfo, batch: dict, special: torch.Tensor):
    return mask_tokens(
        batch["input_ids"],
        batch["attention_mask"],
        batch["example_ids"],
        cfg.train.seed,
        cfg.objective,
        cfg.num_mask_slots,
        tokens.mask_id,
        special,
        tokens.vocab_size,
    )
