"""GLUE-shaped downstream tasks over the synthetic language (see synthetic.py), written as custom-task folders.

Each task folder holds train.tsv, dev.tsv, test.tsv (header row, tab-separated, no quoting; test has labels so it
can be scored offline) and task.json in the schema the GLUE code loads custom tasks with. Every task is built so
that what pretraining on the synthetic corpus learns helps:

- syn-agree  (single sentence, binary, like CoLA): is the sentence grammatical? Negatives have one verb put in
  the wrong number, often across a relative clause or an attractor noun: needs the agreement the corpus teaches.
- syn-topic  (single sentence, 10 classes, like SST): which topic are these noun phrases from? Training uses only
  the first noun of each synonym pair, dev/test only the second: a pure transfer test. Without pretraining the
  dev nouns are unseen (chance: 10%, and a bag of words gets 10%); pretraining gives synonyms similar
  representations because the corpus uses them identically.
- syn-entail (sentence pair, binary, like RTE): does the relative clause in sentence1 state sentence2? Negatives
  swap the roles or change the verb: needs who-did-what-to-whom, i.e. the relative-clause structure.
- syn-sim    (sentence pair, regression 0-5, like STS-B): graded similarity of two simple sentences, counting a
  synonym as nearly the same word and a same-topic word as partly similar: needs lexical similarity.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from electra.data.synthetic import GROUPS_PER_TOPIC, NUM_TOPICS, Generator, decode, lexicon

SPLIT_SIZES = {"train": 2000, "dev": 500, "test": 500}  # a 2-layer hidden-64 model fine-tunes in seconds
Row = tuple  # (text_a, label) or (text_a, text_b, label)


def agree_row(gen: Generator, split: str) -> Row:
    lex = lexicon()
    flip = lex.number_flip()
    verbs = {v for pair in _verb_pairs() for v in pair}
    gen.start_document(gen.rng.randrange(NUM_TOPICS))
    ids = gen.sentence()
    if gen.rng.random() < 0.5:
        return decode(ids), "1"
    sites = [i for i, t in enumerate(ids) if t in verbs]
    i = gen.rng.choice(sites)
    ids[i] = int(flip[ids[i]])
    return decode(ids), "0"


def _verb_pairs() -> list[tuple[int, int]]:
    lex = lexicon()
    return [p for t in lex.transitive for p in t] + [p for t in lex.intransitive for p in t] + list(lex.saying)


def topic_row(gen: Generator, split: str) -> Row:
    r, lex = gen.rng, lexicon()
    topic = r.randrange(NUM_TOPICS)
    the, and_ = lex["the"], lex["and"]
    phrases = []
    for _ in range(r.randint(2, 3)):
        plural = r.random() < 0.5
        det = the if r.random() < 0.4 else r.choice(gen.det[plural])
        synonym = 0 if split == "train" else 1  # dev/test nouns never occur in fine-tuning
        phrases.append([det, lex.nouns[topic][r.randrange(GROUPS_PER_TOPIC)][synonym][plural]])
    ids = phrases[0]
    for p in phrases[1:]:
        ids = ids + [and_] + p
    return decode(ids), str(topic)


def entail_row(gen: Generator, split: str) -> Row:
    r, lex = gen.rng, lexicon()
    topic = r.randrange(NUM_TOPICS)
    gen.start_document(topic)
    (n1, pl1), (n2, pl2) = [(r.choice(lex.nouns[topic][r.randrange(2)]), r.random() < 0.5) for _ in range(2)]
    det = lambda pl: r.choice(gen.det[pl])  # noqa: E731
    verb = r.randrange(GROUPS_PER_TOPIC)
    v = lex.transitive[topic][verb]
    main = r.choice(lex.intransitive[topic])[pl1]
    if r.random() < 0.5:  # object relative: "the N1 that the N2 V main ." states "N2 V N1"
        s1 = [det(pl1), n1[pl1], gen.that, det(pl2), n2[pl2], v[pl2], main, gen.period]
        agent, patient = (n2, pl2), (n1, pl1)
    else:  # subject relative: "the N1 that V the N2 main ." states "N1 V N2"
        s1 = [det(pl1), n1[pl1], gen.that, v[pl1], det(pl2), n2[pl2], main, gen.period]
        agent, patient = (n1, pl1), (n2, pl2)
    label = "entailment"
    x = r.random()
    if x < 0.25:  # roles swapped
        agent, patient, label = patient, agent, "not_entailment"
    elif x < 0.5:  # another verb of the same topic
        v = lex.transitive[topic][(verb + r.randrange(1, GROUPS_PER_TOPIC)) % GROUPS_PER_TOPIC]
        label = "not_entailment"
    s2 = [gen.the, agent[0][agent[1]], v[agent[1]], gen.the, patient[0][patient[1]], gen.period]
    return decode(s1), decode(s2), label


def sim_row(gen: Generator, split: str) -> Row:
    r, lex = gen.rng, lexicon()

    def noun_slot(topic: int, group: int, syn: int) -> tuple[float, tuple[int, int, int]]:
        x = r.random()  # same word, synonym, same topic, other topic
        if x < 0.3:
            return 1.0, (topic, group, syn)
        if x < 0.55:
            return 0.8, (topic, group, 1 - syn)
        if x < 0.8:
            return 0.3, (topic, (group + r.randrange(1, GROUPS_PER_TOPIC)) % GROUPS_PER_TOPIC, r.randrange(2))
        return 0.0, ((topic + r.randrange(1, NUM_TOPICS)) % NUM_TOPICS, r.randrange(GROUPS_PER_TOPIC), r.randrange(2))

    def render(subj: tuple, verb: tuple, obj: tuple) -> str:
        pl_s, pl_o = r.random() < 0.5, r.random() < 0.5  # number is noise: it does not change the score
        ids = [r.choice(gen.det[pl_s]), lex.nouns[subj[0]][subj[1]][subj[2]][pl_s]]
        ids += [lex.transitive[verb[0]][verb[1]][pl_s], r.choice(gen.det[pl_o])]
        return decode(ids + [lex.nouns[obj[0]][obj[1]][obj[2]][pl_o], gen.period])

    topic = r.randrange(NUM_TOPICS)
    subj = (topic, r.randrange(2), r.randrange(2))  # animate: transitive verbs need animate subjects
    verb = (topic, r.randrange(GROUPS_PER_TOPIC))
    obj = (topic, r.randrange(GROUPS_PER_TOPIC), r.randrange(2))
    s_score, subj2 = noun_slot(*subj)
    if subj2[1] >= 2:  # keep the second subject animate
        subj2 = (subj2[0], subj2[1] - 2, subj2[2])
    o_score, obj2 = noun_slot(*obj)
    x = r.random()
    if x < 0.5:
        v_score, verb2 = 1.0, verb
    elif x < 0.8:
        v_score, verb2 = 0.3, (topic, (verb[1] + r.randrange(1, GROUPS_PER_TOPIC)) % GROUPS_PER_TOPIC)
    else:
        v_score, verb2 = 0.0, ((topic + r.randrange(1, NUM_TOPICS)) % NUM_TOPICS, r.randrange(GROUPS_PER_TOPIC))
    score = 5.0 * (s_score + v_score + o_score) / 3
    return render(subj, verb, obj), render(subj2, verb2, obj2), f"{score:.2f}"


# name -> (row function, text_b column or None, label values or None for regression, metrics, main metric)
TASKS: dict[str, tuple[Callable[[Generator, str], Row], str | None, list[str] | None, list[str], str]] = {
    "syn-agree": (agree_row, None, ["0", "1"], ["accuracy", "mcc"], "accuracy"),
    "syn-topic": (topic_row, None, [str(t) for t in range(NUM_TOPICS)], ["accuracy"], "accuracy"),
    "syn-entail": (entail_row, "sentence2", ["entailment", "not_entailment"], ["accuracy"], "accuracy"),
    "syn-sim": (sim_row, "sentence2", None, ["pearson", "spearman"], "pearson"),
}


def task_rows(name: str, seed: int, split: str, n: int, exclude: set[str] | None = None) -> list[Row]:
    """`n` distinct rows of one task and split; rows whose text is in `exclude` (e.g. train's) are skipped."""
    make = TASKS[name][0]
    gen = Generator(f"{name}/{seed}/{split}")  # a string seed is hashed stably across processes and runs
    seen = set(exclude or ())
    rows: list[Row] = []
    for _ in range(100 * n):
        row = make(gen, split)
        key = "\t".join(row[:-1])
        if key not in seen:
            seen.add(key)
            rows.append(row)
            if len(rows) == n:
                return rows
    raise RuntimeError(f"{name}: could not generate {n} distinct {split} rows")


def write_synthetic_tasks(out_dir: str | Path, seed: int = 0, sizes: dict[str, int] | None = None) -> list[Path]:
    """Write one folder per task under out_dir; returns the folders."""
    sizes = {**SPLIT_SIZES, **(sizes or {})}
    folders = []
    for name, (_, text_b, labels, metrics, main_metric) in TASKS.items():
        folder = Path(out_dir) / name
        folder.mkdir(parents=True, exist_ok=True)
        header = ["sentence"] + (["sentence2"] if text_b else []) + ["label"]
        train_keys: set[str] = set()
        for split, n in sizes.items():
            rows = task_rows(name, seed, split, n, exclude=train_keys if split != "train" else None)
            if split == "train":
                train_keys = {"\t".join(row[:-1]) for row in rows}
            lines = ["\t".join(header)] + ["\t".join(row) for row in rows]
            (folder / f"{split}.tsv").write_text("\n".join(lines) + "\n")
        spec = {
            "name": name,
            "text_a": "sentence",
            "text_b": text_b,
            "label": "label",
            "labels": labels,
            "metrics": metrics,
            "main_metric": main_metric,
            "epochs": 3,
        }
        (folder / "task.json").write_text(json.dumps(spec, indent=2) + "\n")
        folders.append(folder)
    return folders
