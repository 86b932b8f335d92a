"""The built-in synthetic corpus: a small artificial language with real structure, generated deterministically.

It exists so that pretraining, fine-tuning and export run anywhere offline, through the same code paths as real
data (a real `tokenizer.json`, the same example builders). It proves the wiring, not English GLUE gains.

The language (about 450 words, all lower case except names):
- Topics. A document has one topic (10% of its noun phrases stray to another); each topic owns nouns, verbs
  and adjectives, so words co-occur by topic across a whole document.
- Synonyms. Nouns come in groups of two that the grammar treats identically; each group prefers one adjective
  and one verb. Synonyms therefore have the same distribution, which pretraining can discover.
- Agreement. Singular and plural nouns, determiners and verbs must agree ("a fep runs", "some feps run"),
  across prepositional phrases and relative clauses ("the fep near the daxs runs", "the feps that the dax
  sees run"): long-distance agreement with attractors.
- Nesting. Clausal complements ("Tavo says that ...") and relative clauses nest up to depth 2.
- Long-range reference. Each document has a cast of named characters of two classes; a pronoun (`ke`, `le`)
  always has the class of the most recently named character, possibly several sentences back.
- Animacy. Transitive and saying verbs take animate subjects only.

One line is one sentence (the static builder's unit); documents have 8-30 lines.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from electra.data.corpus import TokenCorpus
from electra.data.tokenizer import TokenizerInfo, tokenizer_info

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0-4, as for every tokenizer we train
NUM_TOPICS = 10
GROUPS_PER_TOPIC = 4  # noun groups; groups 0-1 are animate, 2-3 inanimate
SYNONYMS_PER_GROUP = 2
INTRANSITIVE_PER_TOPIC = 2
NAMES_PER_CLASS = 10
LEXICON_SEED = 20240611  # the vocabulary never changes with the corpus seed: one tokenizer for every run
CORPUS_SEED = 0  # the pretraining corpus is fixed too; the run seed only changes how it is sampled
DEFAULT_DOCUMENTS = 3000  # ~0.5M tokens; the tiny preset (300 steps x 32 x 64) sees ~0.6M
MIN_LINES, MAX_LINES = 8, 30  # one sentence per line; ~150 tokens per document, most longer than a 64-token window

DET_SG = ["a", "every", "this", "one"]
DET_PL = ["some", "many", "these", "two", "three", "four"]
FUNCTION_WORDS = ["the", "that", "because", "and", ".", "near", "with", "behind", "under"]
PRONOUNS = ["ke", "le"]  # the pronoun of name class 0 and 1


@dataclass
class Lexicon:
    """Word ids of every grammatical category; `words[i]` is the word with token id i."""

    words: list[str] = field(default_factory=lambda: list(SPECIAL_TOKENS))
    nouns: list = field(default_factory=list)  # [topic][group][synonym] -> (sg, pl)
    adjectives: list = field(default_factory=list)  # [topic][group] -> id
    transitive: list = field(default_factory=list)  # [topic][group] -> (sg, pl): group g's preferred verb
    intransitive: list = field(default_factory=list)  # [topic][k] -> (sg, pl)
    saying: list = field(default_factory=list)  # [k] -> (sg, pl)
    names: list = field(default_factory=list)  # [class] -> [ids]

    def add(self, word: str) -> int:
        self.words.append(word)
        return len(self.words) - 1

    def __getitem__(self, word: str) -> int:
        return self.words.index(word)

    def number_flip(self) -> np.ndarray:
        """(V,) id -> the same word in the other number (verbs and nouns), identity elsewhere."""
        flip = np.arange(len(self.words))
        pairs = [p for t in self.nouns for g in t for p in g] + [p for t in self.transitive for p in t]
        pairs += [p for t in self.intransitive for p in t] + list(self.saying)
        for sg, pl in pairs:
            flip[sg], flip[pl] = pl, sg
        return flip


@functools.cache
def lexicon() -> Lexicon:
    """The fixed vocabulary: pronounceable pseudo-words drawn once from LEXICON_SEED."""
    rng = random.Random(LEXICON_SEED)
    lex = Lexicon()
    for w in DET_SG + DET_PL + FUNCTION_WORDS + PRONOUNS:
        lex.add(w)
    taken = set(lex.words)

    def stem() -> str:
        while True:
            s = "".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(rng.choice((1, 2))))
            s += rng.choice("bdgklmnprstxz")
            if not {s, s + "s", s.capitalize()} & taken:
                taken.update({s, s + "s", s.capitalize()})
                return s

    def noun() -> tuple[int, int]:
        s = stem()
        return lex.add(s), lex.add(s + "s")

    def verb() -> tuple[int, int]:
        s = stem()  # English-like: the singular verb carries the -s
        return lex.add(s + "s"), lex.add(s)

    for _ in range(NUM_TOPICS):
        lex.nouns.append([[noun() for _ in range(SYNONYMS_PER_GROUP)] for _ in range(GROUPS_PER_TOPIC)])
        lex.adjectives.append([lex.add(stem()) for _ in range(GROUPS_PER_TOPIC)])
        lex.transitive.append([verb() for _ in range(GROUPS_PER_TOPIC)])
        lex.intransitive.append([verb() for _ in range(INTRANSITIVE_PER_TOPIC)])
    lex.saying = [verb() for _ in range(3)]
    lex.names = [[lex.add(stem().capitalize()) for _ in range(NAMES_PER_CLASS)] for _ in range(2)]
    return lex


class Generator:
    """Sentences and documents of the language as token ids, from a seeded `random.Random`."""

    def __init__(self, seed: int | str):
        self.rng = random.Random(seed)
        self.lex = lex = lexicon()
        self.det = [[lex[w] for w in DET_SG], [lex[w] for w in DET_PL]]
        self.the, self.that, self.because, self.period = lex["the"], lex["that"], lex["because"], lex["."]
        self.preps = [lex[w] for w in ("near", "with", "behind", "under")]
        self.pronouns = [lex[w] for w in PRONOUNS]
        self.start_document(0)

    def start_document(self, topic: int) -> None:
        self.topic = topic
        self.cast = [(c, self.rng.choice(self.lex.names[c])) for c in (0, 1, self.rng.randrange(2))]
        self.last_class: int | None = None  # class of the most recently named character

    # -- phrases: each returns its tokens; noun phrases also return (plural, animate, group) ---------------

    def noun_phrase(self, depth: int, entity_ok: bool = True, animate_only: bool = False) -> tuple:
        r = self.rng
        if entity_ok and r.random() < 0.3:
            if self.last_class is not None and r.random() < 0.5:
                return [self.pronouns[self.last_class]], False, True, None
            cls, name = r.choice(self.cast)
            self.last_class = cls
            return [name], False, True, None
        topic = self.topic if r.random() < 0.9 else r.randrange(NUM_TOPICS)
        group = r.randrange(2 if animate_only else GROUPS_PER_TOPIC)
        plural = r.random() < 0.5
        out = [self.the if r.random() < 0.4 else r.choice(self.det[plural])]
        if r.random() < 0.3:
            adjs = self.lex.adjectives[topic]
            out.append(adjs[group] if r.random() < 0.7 else r.choice(adjs))
        out.append(r.choice(self.lex.nouns[topic][group])[plural])
        animate = group < 2
        if depth < 2:
            x = r.random()
            if x < 0.15:  # a prepositional phrase: its noun is an agreement attractor
                out += [r.choice(self.preps)] + self.noun_phrase(depth + 1, entity_ok=False)[0]
            elif x < 0.25:  # subject relative: "the dax that sees the feps"
                out += [self.that] + self.verb_phrase(plural, animate, group, depth + 1, topic)
            elif x < 0.35:  # object relative: "the dax that the feps see"
                inner, inner_pl, _, inner_group = self.noun_phrase(depth + 1, entity_ok=False, animate_only=True)
                out += [self.that] + inner + [self.transitive_verb(inner_pl, inner_group, topic)]
        return out, plural, animate, group

    def transitive_verb(self, plural: bool, group: int | None, topic: int) -> int:
        verbs = self.lex.transitive[topic]
        verb = verbs[group] if group is not None and self.rng.random() < 0.6 else self.rng.choice(verbs)
        return verb[plural]

    def verb_phrase(self, plural: bool, animate: bool, group: int | None, depth: int, topic: int) -> list[int]:
        r = self.rng
        x = r.random() if animate else 1.0  # inanimate subjects only take intransitive verbs
        if x < 0.5:
            return [self.transitive_verb(plural, group, topic)] + self.noun_phrase(depth + 1)[0]
        if x < 0.7 and depth < 2:
            return [r.choice(self.lex.saying)[plural], self.that] + self.clause(depth + 1)
        return [r.choice(self.lex.intransitive[topic])[plural]]

    def clause(self, depth: int) -> list[int]:
        subject, plural, animate, group = self.noun_phrase(depth)
        return subject + self.verb_phrase(plural, animate, group, depth, self.topic)

    def sentence(self) -> list[int]:
        out = self.clause(0)
        if self.rng.random() < 0.25:
            out += [self.because] + self.clause(1)
        return out + [self.period]

    def document(self) -> list[list[int]]:
        self.start_document(self.rng.randrange(NUM_TOPICS))
        return [self.sentence() for _ in range(self.rng.randint(MIN_LINES, MAX_LINES))]


def synthetic_documents(seed: int, num_documents: int) -> list[list[list[int]]]:
    """`num_documents` documents, each a list of lines (sentences) of token ids."""
    gen = Generator(seed)
    return [gen.document() for _ in range(num_documents)]


def decode(ids) -> str:
    words = lexicon().words
    return " ".join(words[i] for i in ids)


@functools.lru_cache(maxsize=4)
def synthetic_corpus(seed: int = CORPUS_SEED, num_documents: int = DEFAULT_DOCUMENTS) -> TokenCorpus:
    """The synthetic corpus as a `TokenCorpus` (the same object a prepared folder opens to)."""
    docs = synthetic_documents(seed, num_documents)
    line_lengths = [len(line) for doc in docs for line in doc]
    line_offsets = np.zeros(len(line_lengths) + 1, dtype=np.int64)
    np.cumsum(line_lengths, out=line_offsets[1:])
    lines_per_doc = np.array([len(doc) for doc in docs])
    doc_offsets = line_offsets[np.concatenate([[0], np.cumsum(lines_per_doc)])]
    tokens = np.fromiter((t for doc in docs for line in doc for t in line), dtype=np.uint16, count=line_offsets[-1])
    tokens.flags.writeable = False  # shared through the cache: nobody may change it
    return TokenCorpus(tokens=tokens, doc_offsets=doc_offsets, line_offsets=line_offsets)


# -- the tokenizer ----------------------------------------------------------------------------------------------


def synthetic_tokenizer_json() -> str:
    """A `tokenizers` WordLevel tokenizer over the lexicon: whitespace split, [CLS] A [SEP] B [SEP] templates."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {w: i for i, w in enumerate(lexicon().words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(SPECIAL_TOKENS)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    return tok.to_str(pretty=True)


def cache_dir() -> Path:
    """Where generated files are kept: $ELECTRA_CACHE, else ~/.cache/electra."""
    return Path(os.environ.get("ELECTRA_CACHE") or Path.home() / ".cache" / "electra")


def write_synthetic_tokenizer(out_dir: str | Path) -> Path:
    """Write out_dir/tokenizer.json (atomically) and return out_dir."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    text = synthetic_tokenizer_json()
    target = out_dir / "tokenizer.json"
    if not target.exists() or target.read_text() != text:
        tmp = out_dir / f".tokenizer.json.tmp-{os.getpid()}"
        tmp.write_text(text)
        os.replace(tmp, target)  # concurrent writers (test workers) each rename a complete file
    return out_dir


def synthetic_tokenizer_dir() -> Path:
    """The synthetic tokenizer in the cache, in a folder named by its content hash so versions never collide."""
    digest = hashlib.sha256(json.dumps(lexicon().words).encode()).hexdigest()[:12]
    name = f"synthetic-tokenizer-{digest}"
    try:
        return write_synthetic_tokenizer(cache_dir() / name)
    except OSError:  # a read-only home (some CI sandboxes): the temp folder will do
        return write_synthetic_tokenizer(Path(tempfile.gettempdir()) / "electra-cache" / name)


def synthetic_tokenizer_info() -> TokenizerInfo:

    return tokenizer_info(synthetic_tokenizer_dir())
