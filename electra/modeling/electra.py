"""ELECTRA in one file, ordered by data flow: embeddings -> attention -> feed-forward -> layer -> encoder ->
generator and discriminator -> the pretraining models (ELECTRA paper sections 2-3 and appendix A; OFF
model/modeling.py and run_pretraining.py; the MLM baseline of BERT, Devlin et al. 2019).

Module and parameter names follow transformers' `modeling_electra.py` (`attention.self.query`,
`intermediate.dense`, `output.LayerNorm`, ...) so that `hf_compat` maps Google/HF weights one-to-one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from electra.config import EncoderSize, ModelConfig, ObjectiveConfig, PretrainConfig
from electra.modeling.masking import (
    STREAM_RANDOM_TOKEN,
    STREAM_UNIFORM_MIX,
    MaskedBatch,
    keyed_uniform,
    sample_replacements,
    scatter_replacements,
    uniform_tokens,
)


def cheap_dropout(x: Tensor, p: float) -> Tensor:
    """Training-mode dropout from a uniform draw: on CPU `torch.rand_like` is about twice as fast as the
    `bernoulli_` that F.dropout uses, and dropout draws ~31M numbers per ELECTRA-Small step at batch 16.
    Measured (1M elements, fwd+bwd, 2 threads): 6.9 ms vs 10.4 ms."""
    return x * torch.rand_like(x).ge_(p).div_(1 - p)


class Dropout(nn.Dropout):
    """nn.Dropout with the cheaper mask on CPU (see `cheap_dropout`); on accelerators F.dropout's fused kernel."""

    def forward(self, x: Tensor) -> Tensor:
        if self.training and self.p > 0 and x.device.type == "cpu":
            return cheap_dropout(x, self.p)
        return super().forward(x)


class Embeddings(nn.Module):
    """Word + position + token-type embeddings -> LayerNorm -> dropout; shared by generator and discriminator.
    With rotary positions there is no position table: positions enter in attention (`RotaryPositions`), as in
    transformers' RoFormerEmbeddings."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.embedding_size)
        if cfg.position_embedding == "learned":
            self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.embedding_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.embedding_size)
        self.LayerNorm = nn.LayerNorm(cfg.embedding_size, eps=cfg.layer_norm_eps)
        self.dropout = Dropout(cfg.dropout)

    def forward(
        self, input_ids: Tensor, token_type_ids: Tensor | None = None, word_table: Tensor | None = None
    ) -> Tensor:
        """`word_table`: look words up there instead (the discriminator's, under gradient-disentangled sharing)."""
        x = self.word_embeddings(input_ids) if word_table is None else F.embedding(input_ids, word_table)  # (B, T, E)
        if hasattr(self, "position_embeddings"):
            x = x + self.position_embeddings.weight[: input_ids.shape[1]]
        if token_type_ids is None:
            x = x + self.token_type_embeddings.weight[0]
        else:
            x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x))


class RotaryPositions(nn.Module):
    """Rotary position embedding (RoFormer, Su et al. 2021, section 3.4.2), computed as transformers' RoFormer
    does: each pair of query/key features (2i, 2i+1) of a head is rotated by the angle t * 10000^(-2i/d) at
    position t, so q.k depends on the positions only through their difference. Tables are fixed, not learned
    (non-persistent buffers: no weights in the checkpoint)."""

    def __init__(self, head_dim: int, max_positions: int):
        super().__init__()
        inv_freq = 10000.0 ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (d/2,)
        angles = torch.arange(max_positions, dtype=torch.float64)[:, None] * inv_freq  # (P, d/2), float64 as HF
        self.register_buffer("cos", angles.cos().float().repeat_interleave(2, -1), persistent=False)  # (P, d)
        self.register_buffer("sin", angles.sin().float().repeat_interleave(2, -1), persistent=False)

    def forward(self, T: int) -> tuple[Tensor, Tensor]:
        return self.cos[:T], self.sin[:T]  # (T, d) each


def rotate(x: Tensor, rope: tuple[Tensor, Tensor]) -> Tensor:
    """(B, nh, T, d) queries or keys rotated pairwise: x * cos + (-x_{2i+1}, x_{2i}) * sin, in fp32 whatever the
    dtype of `x` (transformers' RoFormer rotates in fp32: bf16 tables and products lose the small angle differences
    that the rotation encodes), cast back to the dtype of `x`."""
    cos, sin = rope  # fp32 tables
    xf = x.float()
    rotated = torch.stack((-xf[..., 1::2], xf[..., 0::2]), dim=-1).flatten(-2)
    return (xf * cos + rotated * sin).to(x.dtype)


class SelfAttention(nn.Module):
    def __init__(self, size: EncoderSize, cfg: ModelConfig):
        super().__init__()
        H = size.hidden_size
        self.num_heads = size.num_heads
        self.query = nn.Linear(H, H)
        self.key = nn.Linear(H, H)
        self.value = nn.Linear(H, H)
        self.dropout_p = cfg.attention_dropout

    def forward(self, x: Tensor, mask: Tensor | None, rope: tuple[Tensor, Tensor] | None = None) -> Tensor:
        B, T, H = x.shape
        shape = (B, T, self.num_heads, H // self.num_heads)
        q, k, v = (proj(x).view(shape).transpose(1, 2) for proj in (self.query, self.key, self.value))  # (B, nh, T, hd)
        if rope is not None:
            q, k = rotate(q, rope), rotate(k, rope)
        if self.training and self.dropout_p > 0 and x.device.type == "cpu":
            y = _attention_with_cheap_dropout(q, k, v, mask, self.dropout_p)
        else:
            dropout_p = self.dropout_p if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        return y.transpose(1, 2).reshape(B, T, H)


def _attention_with_cheap_dropout(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, p: float) -> Tensor:
    """softmax(q k^T / sqrt(d)) v with dropout on the probabilities, written out for CPU training: SDPA's CPU
    kernels have no dropout, so it falls back to a math path that draws the mask with `bernoulli_`
    (this one is faster: docs/benchmarks.md)."""
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-1, -2)  # (B, nh, T, T)
    if mask is not None:  # the dtype's minimum, not -inf: a row with no key left (an all-pad row) stays finite
        scores.masked_fill_(~mask, torch.finfo(scores.dtype).min)
    return cheap_dropout(scores.softmax(-1), p) @ v


class Output(nn.Module):
    """Projection back to the hidden size, dropout, residual, then LayerNorm (post-LN, as BERT/ELECTRA): the end
    of the attention block (from the hidden size) and of the feed-forward block (from the intermediate size)."""

    def __init__(self, in_size: int, size: EncoderSize, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(in_size, size.hidden_size)
        self.LayerNorm = nn.LayerNorm(size.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = Dropout(cfg.dropout)

    def forward(self, y: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(self.dropout(self.dense(y)) + residual)


class Attention(nn.Module):
    def __init__(self, size: EncoderSize, cfg: ModelConfig):
        super().__init__()
        self.self = SelfAttention(size, cfg)
        self.output = Output(size.hidden_size, size, cfg)

    def forward(self, x: Tensor, mask: Tensor | None, rope: tuple[Tensor, Tensor] | None = None) -> Tensor:
        return self.output(self.self(x, mask, rope), x)


class Intermediate(nn.Module):
    def __init__(self, size: EncoderSize):
        super().__init__()
        self.dense = nn.Linear(size.hidden_size, size.intermediate_size)

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(self.dense(x))  # exact erf GELU, as the original (not the tanh approximation)


class Layer(nn.Module):
    def __init__(self, size: EncoderSize, cfg: ModelConfig):
        super().__init__()
        self.attention = Attention(size, cfg)
        self.intermediate = Intermediate(size)
        self.output = Output(size.intermediate_size, size, cfg)

    def forward(self, x: Tensor, mask: Tensor | None, rope: tuple[Tensor, Tensor] | None = None) -> Tensor:
        x = self.attention(x, mask, rope)
        return self.output(self.intermediate(x), x)


class Encoder(nn.Module):
    def __init__(self, size: EncoderSize, cfg: ModelConfig):
        super().__init__()
        self.layer = nn.ModuleList(Layer(size, cfg) for _ in range(size.num_layers))
        rotary = cfg.position_embedding == "rotary"  # one table per stack: generator and discriminator heads differ
        head_dim = size.hidden_size // size.num_heads
        self.rotary = RotaryPositions(head_dim, cfg.max_position_embeddings) if rotary else None

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        rope = None if self.rotary is None else self.rotary(x.shape[1])
        for layer in self.layer:
            x = layer(x, mask, rope)
        return x


def attention_bias(attention_mask: Tensor | None) -> Tensor | None:
    """(B, T) 1/0 padding mask -> (B, 1, 1, T) boolean mask over keys for SDPA; None means no padding."""
    return None if attention_mask is None else attention_mask[:, None, None, :].bool()


class Transformer(nn.Module):
    """`embeddings_project` (only when embedding and hidden sizes differ, as HF) followed by the encoder.

    The body of both the generator and the discriminator; HF prefix `electra.`.
    """

    def __init__(self, size: EncoderSize, cfg: ModelConfig):
        super().__init__()
        differ = cfg.embedding_size != size.hidden_size
        self.embeddings_project = nn.Linear(cfg.embedding_size, size.hidden_size) if differ else nn.Identity()
        self.encoder = Encoder(size, cfg)

    def forward(self, embedded: Tensor, mask: Tensor | None) -> Tensor:
        return self.encoder(self.embeddings_project(embedded), mask)  # (B, T, H)


class GeneratorPredictions(nn.Module):
    """Linear(H_g -> E) -> GELU -> LayerNorm; the logits then use the shared word table (tied)."""

    def __init__(self, size: EncoderSize, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(size.hidden_size, cfg.embedding_size)
        self.LayerNorm = nn.LayerNorm(cfg.embedding_size, eps=cfg.layer_norm_eps)

    def forward(self, h: Tensor) -> Tensor:
        return self.LayerNorm(F.gelu(self.dense(h)))


class DiscriminatorPredictions(nn.Module):
    """Linear(H -> H) -> GELU -> Linear(H -> 1): one replaced-or-original logit per token."""

    def __init__(self, size: EncoderSize):
        super().__init__()
        self.dense = nn.Linear(size.hidden_size, size.hidden_size)
        self.dense_prediction = nn.Linear(size.hidden_size, 1)

    def forward(self, h: Tensor) -> Tensor:
        return self.dense_prediction(F.gelu(self.dense(h))).squeeze(-1)


class Generator(nn.Module):
    """A masked LM: ELECTRA's small generator, or (`size` = the discriminator's) the MLM baseline. Its output
    layer is the shared word table (passed in) plus its own bias."""

    def __init__(self, cfg: ModelConfig, size: EncoderSize | None = None):
        super().__init__()
        size = size or cfg.generator
        self.electra = Transformer(size, cfg)
        self.generator_predictions = GeneratorPredictions(size, cfg)
        self.lm_head_bias = nn.Parameter(torch.zeros(cfg.vocab_size))  # HF: generator_lm_head.bias

    def logits(self, h: Tensor, word_table: Tensor) -> Tensor:
        return F.linear(self.generator_predictions(h), word_table, self.lm_head_bias)  # (..., V)

    def at_slots(self, embedded: Tensor, mask: Tensor | None, masked: MaskedBatch, word_table: Tensor):
        """(B, N, V) fp32 logits at the N chosen slots only (OFF gathers them: no B x T x V tensor) and their (B, N)
        cross-entropy against the original tokens. The head runs with autocast off: logits from a 16-bit matmul,
        upcast afterwards, would feed the sampler rounded values (and fp16 ones overflow: pytorch/pytorch#41663)."""
        h = self.electra(embedded, mask)  # (B, T, H)
        h = h.gather(1, masked.positions[..., None].expand(-1, -1, h.shape[-1]))  # (B, N, H)
        with without_autocast(h):
            logits = self.logits(h.float(), word_table)  # (B, N, V) fp32
        ce = F.cross_entropy(logits.flatten(0, 1), masked.targets.flatten(), reduction="none")
        return logits, ce.view(masked.positions.shape)


def without_autocast(x: Tensor):
    """A region computed in fp32 whatever autocast the caller entered (on the device of `x`)."""
    return torch.autocast(x.device.type, enabled=False)


class Discriminator(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.electra = Transformer(cfg.discriminator, cfg)
        self.discriminator_predictions = DiscriminatorPredictions(cfg.discriminator)


def init_weights(module: nn.Module, cfg: ModelConfig) -> None:
    """Zero biases, unit LayerNorms, and weights by `cfg.init`: "normal" is normal(0, std) (transformers);
    "original" is OFF's: truncated normal(0, std) cut at 2 std (modeling.py create_initializer, i.e.
    tf.truncated_normal_initializer), except the two dense layers OFF builds with no initializer, which get
    TF's default Glorot uniform: `embeddings_project` (modeling.py BertModel) and the discriminator's output
    layer (run_pretraining.py _get_discriminator_output). `apply` visits children before their parent, so
    the parents below overwrite what their Linear children got."""
    std = cfg.initializer_range
    original = cfg.init == "original"
    if isinstance(module, (nn.Linear, nn.Embedding)):
        if original:
            nn.init.trunc_normal_(module.weight, mean=0.0, std=std, a=-2 * std, b=2 * std)
        else:
            nn.init.normal_(module.weight, mean=0.0, std=std)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
    if isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)
    if original and isinstance(module, Transformer) and isinstance(module.embeddings_project, nn.Linear):
        nn.init.xavier_uniform_(module.embeddings_project.weight)
    if original and isinstance(module, DiscriminatorPredictions):
        nn.init.xavier_uniform_(module.dense_prediction.weight)
    if isinstance(module, DiscriminatorPredictions):
        nn.init.constant_(module.dense_prediction.bias, cfg.disc_output_bias)


STAT_NAMES = (
    "mlm_loss_sum",
    "mlm_count",
    "mlm_correct",
    "sampled_correct",
    "masked_count",
    "masked_correct",
    "masked_loss_sum",
    "disc_loss_sum",
    "disc_count",
    "disc_correct",
    "disc_true_pos",
    "disc_pred_pos",
    "disc_pos",
)


@dataclass
class PretrainOutput:
    loss: Tensor
    """generator_weight * MLM loss + discriminator_weight * disc loss, each normalised by its target count."""
    mlm_loss: Tensor
    disc_loss: Tensor
    stats: dict[str, Tensor]
    """Detached sums and counts (see STAT_NAMES) that add across micro-batches and ranks into exact metrics."""
    disc_logits: Tensor
    """(B, T) discriminator logits (for AUC at evaluation)."""
    disc_labels: Tensor
    """(B, T) 1.0 where the token was replaced."""
    disc_mask: Tensor
    """(B, T) bool: positions that count in the discriminator loss."""
    disc_hidden: Tensor | None = None
    """(B, T, H) the discriminator's last-layer token states, detached (their effective rank at evaluation); None
    for the masked LM."""


class ElectraForPretraining(nn.Module):
    """Generator + discriminator over one shared embedding block, trained with replaced-token detection."""

    def __init__(self, cfg: ModelConfig, objective: ObjectiveConfig | None = None):
        super().__init__()
        self.cfg = cfg
        self.objective = objective or ObjectiveConfig()
        self.embeddings = Embeddings(cfg)
        self.generator = Generator(cfg)
        self.discriminator = Discriminator(cfg)
        self.register_buffer("temperature", torch.tensor(self.objective.temperature), persistent=False)
        self.register_buffer("uniform_replace", torch.tensor(self.objective.uniform_replace_prob), persistent=False)
        self.apply(partial(init_weights, cfg=cfg))
        if cfg.embedding_sharing == "gradient_disentangled":  # starts at 0: the discriminator sees the shared table
            self.discriminator_word_delta = nn.Parameter(torch.zeros(cfg.vocab_size, cfg.embedding_size))

    def discriminator_word_table(self) -> Tensor | None:
        """The word table the discriminator reads: the shared one (None), or under gradient-disentangled sharing the
        shared one with its gradient stopped plus the discriminator's own difference."""
        if self.cfg.embedding_sharing == "full":
            return None
        return self.embeddings.word_embeddings.weight.detach() + self.discriminator_word_delta

    def set_temperature(self, temperature: float) -> None:
        """The sampling temperature from now on (objective.temperature_start's schedule; in place: no recompile).
        A model built without the schedule samples at its constant objective.temperature, a Python number the
        compiled step keeps (and skips the division at 1): another value is refused, not ignored."""
        obj = self.objective
        if obj.temperature_start is None and temperature != obj.temperature:
            raise ValueError(
                f"set_temperature({temperature:g}): this model samples at its constant objective.temperature "
                f"{obj.temperature:g} (objective.temperature_start is None); build it with objective.temperature="
                f"{temperature:g}, or with a schedule (objective.temperature_start) to change it while it trains"
            )
        self.temperature.fill_(temperature)

    def set_uniform_replace(self, fraction: float) -> None:
        """The fraction of uniform replacements from now on (objective.uniform_replace_start's schedule, or a
        constant objective.uniform_replace_prob above 0). A model built with neither mixes none in: another value
        than 0 is refused, not ignored."""
        obj = self.objective
        if obj.uniform_replace_start is None and obj.uniform_replace_prob == 0 and fraction != 0:
            raise ValueError(
                f"set_uniform_replace({fraction:g}): this model mixes no uniform replacements in "
                "(objective.uniform_replace_prob 0, no objective.uniform_replace_start); build it with "
                f"objective.uniform_replace_prob={fraction:g}, or with a schedule (objective.uniform_replace_start)"
            )
        self.uniform_replace.fill_(fraction)

    def fine_tuning_body(self) -> Transformer:
        """What fine-tuning starts from, with the shared embeddings: the discriminator."""
        return self.discriminator.electra

    # -- full-sequence views, for comparisons with transformers and for inspection ------------------------------

    def discriminator_logits(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> Tensor:
        """(B, T) replaced-token logits at every position."""
        embedded = self.embeddings(input_ids, token_type_ids, self.discriminator_word_table())
        h = self.discriminator.electra(embedded, attention_bias(attention_mask))
        return self.discriminator.discriminator_predictions(h)

    def generator_logits(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> Tensor:
        """(B, T, V) masked-LM logits at every position (training computes them only at masked slots)."""
        h = self.generator.electra(self.embeddings(input_ids, token_type_ids), attention_bias(attention_mask))
        return self.generator.logits(h, self.embeddings.word_embeddings.weight)

    # -- the pretraining objective ------------------------------------------------------------------------------

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None,
        token_type_ids: Tensor | None,
        masked: MaskedBatch,
        mlm_norm: Tensor | float | None = None,
        disc_norm: Tensor | float | None = None,
    ) -> PretrainOutput:
        """One replaced-token-detection pass over a batch whose slots `mask_tokens` already chose.

        `mlm_norm` / `disc_norm` are the target counts to divide the summed losses by: the global counts over all
        micro-batches and ranks of an optimizer step, so accumulation and DDP give exactly the big-batch gradient.
        By default the counts of this batch.
        """
        obj = self.objective
        mask = attention_bias(attention_mask)
        gen_logits, ce, sampled, disc_input, labels = self.corrupt(input_ids, mask, token_type_ids, masked)
        mlm_sum = (ce * masked.weights).sum()

        # Discriminator on the corrupted sequence, every position.
        embedded = self.embeddings(disc_input, token_type_ids, self.discriminator_word_table())
        hd = self.discriminator.electra(embedded, mask)  # (B, T, H)
        disc_logits = self.discriminator.discriminator_predictions(hd)  # (B, T)
        disc_mask = masked.disc_mask
        bce = F.binary_cross_entropy_with_logits(disc_logits.float(), labels, reduction="none")
        disc_sum = (bce * disc_mask).sum()

        stats = self._stats(mlm_sum, ce, gen_logits, sampled, masked, disc_sum, disc_logits, labels, disc_mask)
        mlm_norm = stats["mlm_count"].clamp(min=1) if mlm_norm is None else mlm_norm
        disc_norm = stats["disc_count"].clamp(min=1) if disc_norm is None else disc_norm
        mlm_loss, disc_loss = mlm_sum / mlm_norm, disc_sum / disc_norm
        loss = obj.generator_weight * mlm_loss + obj.discriminator_weight * disc_loss
        return PretrainOutput(loss, mlm_loss, disc_loss, stats, disc_logits.detach(), labels, disc_mask, hd.detach())

    def corrupt(
        self, input_ids: Tensor, mask: Tensor | None, token_type_ids: Tensor | None, masked: MaskedBatch
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """The generator's half of `forward`: its logits (B, N, V) and cross-entropy (B, N) at the N chosen slots,
        the replacements sampled there (B, N), the sequence the discriminator sees (B, T) and its labels (B, T;
        1.0 where a token differs from the original: a correct sample counts as original). `mask`: the
        attention mask as `attention_bias` makes it. Also what scripts/replaced_tokens.py inspects."""
        obj = self.objective
        N = masked.positions.shape[1]
        # Generator: encode the [MASK]ed input, then the head only at the N chosen slots.
        embedded = self.embeddings(masked.input_ids, token_type_ids)
        gen_logits, ce = self.generator.at_slots(embedded, mask, masked, self.embeddings.word_embeddings.weight)
        # Sample replacements (no gradient flows back into the generator through them).
        temperature = self.temperature if obj.temperature_start is not None else obj.temperature  # buffer: schedule
        with without_autocast(gen_logits):  # fp32 sampling, as OFF samples (and fp16 noise: pytorch#41663)
            sampled = sample_replacements(
                gen_logits, masked.targets, masked.keys, temperature, obj.disallow_correct, obj.sampler
            )
        if obj.uniform_replace_prob > 0 or obj.uniform_replace_start is not None:  # easy replacements mixed in
            coin = keyed_uniform(masked.keys, N, STREAM_UNIFORM_MIX)
            random_token = uniform_tokens(masked.keys, N, self.cfg.vocab_size, STREAM_RANDOM_TOKEN)
            sampled = torch.where(coin < self.uniform_replace, random_token, sampled)
        replace = masked.weights > 0
        if obj.replace == "masked":
            replace = replace & masked.is_masked
        disc_input = scatter_replacements(input_ids, masked.positions, torch.where(replace, sampled, masked.targets))
        return gen_logits, ce, sampled, disc_input, (disc_input != input_ids).float()

    @torch.no_grad()
    def _stats(self, mlm_sum, ce, gen_logits, sampled, masked, disc_sum, disc_logits, labels, disc_mask):
        w, dm = masked.weights, disc_mask.float()
        predicted = (disc_logits > 0).float()
        return {
            "mlm_loss_sum": mlm_sum.detach(),
            "mlm_count": w.sum(),
            "mlm_correct": ((gen_logits.argmax(-1) == masked.targets).float() * w).sum(),
            **masked_slot_stats(gen_logits, ce, masked),
            "sampled_correct": ((sampled == masked.targets).float() * w).sum(),
            "disc_loss_sum": disc_sum.detach(),
            "disc_count": dm.sum(),
            "disc_correct": ((predicted == labels).float() * dm).sum(),
            "disc_true_pos": (predicted * labels * dm).sum(),
            "disc_pred_pos": (predicted * dm).sum(),
            "disc_pos": (labels * dm).sum(),
        }


def masked_slot_stats(logits: Tensor, ce: Tensor, masked: MaskedBatch) -> dict[str, Tensor]:
    """Accuracy and loss at the slots shown as [MASK] only: the kept (and, for MLM, randomised) slots show the
    answer or a decoy in the input, so a model that merely copies its input already scores ~15% over all slots."""
    shown_mask = masked.is_masked.float() * masked.weights
    return {
        "masked_count": shown_mask.sum(),
        "masked_correct": ((logits.argmax(-1) == masked.targets).float() * shown_mask).sum(),
        "masked_loss_sum": (ce.detach() * shown_mask).sum(),
    }


def metrics_from_stats(stats: dict[str, float]) -> dict[str, float]:
    """Turn summed counts (over micro-batches, ranks and log steps) into the logged metrics."""

    def div(a: str, b: str) -> float:
        return stats[a] / stats[b] if stats[b] else float("nan")

    return {
        "mlm_loss": div("mlm_loss_sum", "mlm_count"),
        "mlm_accuracy": div("mlm_correct", "mlm_count"),
        "masked_accuracy": div("masked_correct", "masked_count"),
        "masked_loss": div("masked_loss_sum", "masked_count"),
        "sampled_accuracy": div("sampled_correct", "mlm_count"),
        "disc_loss": div("disc_loss_sum", "disc_count"),
        "disc_accuracy": div("disc_correct", "disc_count"),
        "disc_precision": div("disc_true_pos", "disc_pred_pos"),
        "disc_recall": div("disc_true_pos", "disc_pos"),
        "replaced_fraction": div("disc_pos", "disc_count"),
    }


class ElectraModel(Transformer):
    """Embeddings + transformer: the discriminator body as fine-tuning uses it.

    Parameter names are exactly those of transformers' `ElectraModel` (`embeddings.*`, `embeddings_project.*`,
    `encoder.layer.*`).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg.discriminator, cfg)
        self.embeddings = Embeddings(cfg)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> Tensor:
        """(B, T) token ids -> (B, T, H) final hidden states."""
        return super().forward(self.embeddings(input_ids, token_type_ids), attention_bias(attention_mask))

    @classmethod
    def from_pretraining(cls, model: ElectraForPretraining | MaskedLMForPretraining) -> ElectraModel:
        """A copy of a pretraining model's body for fine-tuning (shared embeddings included): ELECTRA's
        discriminator, or the MLM baseline's encoder."""
        body = cls(model.cfg)
        state = {f"embeddings.{k}": v for k, v in model.embeddings.state_dict().items()}
        state = with_discriminator_word_table(state, getattr(model, "discriminator_word_delta", None))
        state.update(model.fine_tuning_body().state_dict())
        body.load_state_dict(state)
        return body


def with_discriminator_word_table(state: dict[str, Tensor], delta: Tensor | None) -> dict[str, Tensor]:
    """`state` (keys as ElectraForPretraining's) with the word table the discriminator reads: under
    gradient-disentangled sharing the shared table plus the discriminator's own (`delta`), which is dropped."""
    if delta is None:
        return state
    key = "embeddings.word_embeddings.weight"
    state = {k: v for k, v in state.items() if k != "discriminator_word_delta"}
    return {**state, key: state[key] + delta.detach().to(state[key])}


class MaskedLMForPretraining(nn.Module):
    """BERT's masked language model (Devlin et al. 2019) at the discriminator's size: the baseline the ELECTRA
    paper compares with, in the same code. The encoder is as large as ELECTRA's discriminator, its output layer
    is the word table (tied) plus a bias, and, as ELECTRA's generator, its head runs only at the masked slots.
    transformers: ElectraForMaskedLM with the discriminator's sizes."""

    def __init__(self, cfg: ModelConfig, objective: ObjectiveConfig | None = None):
        super().__init__()
        self.cfg = cfg
        self.objective = objective or ObjectiveConfig(kind="mlm")
        self.embeddings = Embeddings(cfg)
        self.masked_lm = Generator(cfg, cfg.discriminator)
        self.apply(partial(init_weights, cfg=cfg))

    def fine_tuning_body(self) -> Transformer:
        return self.masked_lm.electra

    def generator_logits(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> Tensor:
        """(B, T, V) masked-LM logits at every position (training computes them only at masked slots)."""
        h = self.masked_lm.electra(self.embeddings(input_ids, token_type_ids), attention_bias(attention_mask))
        return self.masked_lm.logits(h, self.embeddings.word_embeddings.weight)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None,
        token_type_ids: Tensor | None,
        masked: MaskedBatch,
        mlm_norm: Tensor | float | None = None,
        disc_norm: Tensor | float | None = None,
    ) -> PretrainOutput:
        """The MLM loss at the masked slots (ELECTRA's interface: `disc_norm` is ignored, the discriminator's
        outputs are empty and its statistics zero, so its metrics come out undefined)."""
        embedded = self.embeddings(masked.input_ids, token_type_ids)
        word_table = self.embeddings.word_embeddings.weight
        logits, ce = self.masked_lm.at_slots(embedded, attention_bias(attention_mask), masked, word_table)
        mlm_sum = (ce * masked.weights).sum()
        with torch.no_grad():
            w = masked.weights
            zero = mlm_sum.new_zeros(())
            stats = {name: zero for name in STAT_NAMES}
            stats.update(
                mlm_loss_sum=mlm_sum.detach(),
                mlm_count=w.sum(),
                mlm_correct=((logits.argmax(-1) == masked.targets).float() * w).sum(),
                **masked_slot_stats(logits, ce, masked),
                sampled_correct=zero + float("nan"),
            )
        mlm_loss = mlm_sum / (stats["mlm_count"].clamp(min=1) if mlm_norm is None else mlm_norm)
        empty = torch.zeros_like(input_ids, dtype=torch.float)
        return PretrainOutput(mlm_loss, mlm_loss, mlm_loss.new_zeros(()), stats, empty, empty, masked.disc_mask)


def build_model(cfg: PretrainConfig) -> ElectraForPretraining | MaskedLMForPretraining:
    """The pretraining model a config describes (objective.kind; none: the ELECTRA model, untrained): the one place
    where one is constructed."""
    if cfg.objective.kind == "mlm":
        return MaskedLMForPretraining(cfg.model, cfg.objective)
    return ElectraForPretraining(cfg.model, cfg.objective)
