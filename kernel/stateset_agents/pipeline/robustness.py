"""`improve audit --robustness`: does the reward score broken replies below the real ones?

Each conversation of a team's transcripts is broken in several ways (`breakages`, `call_breakages`: words
shuffled, replies from other conversations, loops, insults, ungrounded numbers and arguments, claimed actions,
renamed and repeated calls, skipped lookups, empty and truncated replies), and the original and each broken copy are
graded with the reward's own batch API. A conversation's score is the mean of its applicable turns (0.5 when none is
applicable, as docs/rewards.md defines). Per kind: the conversations it applied to, and the win rate, the share of
them where the original scores strictly higher than its broken copy, ties counting half; with examples of the copies
that fooled the reward (scored as high as the original or higher). Deterministic for a seed.
"""
from __future__ import annotations

import math
import os
from collections import deque
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from ..core.components import GradeItem, assistant_turns
from ..core.errors import InputError, PluginError
from ..core.jsonio import read_jsonl, sha256_file, write_json
from .breakages import (DESCRIPTIONS, KINDS, Broken, ReplyPool, empty_reply, foreign_reply, insult_added,
                        looped_sentence, shuffled_words, truncated_reply, ungrounded_numbers)
from .call_breakages import claimed_action, renamed_call, repeated_call, skipped_lookup, ungrounded_argument
from .improve import _check_conversation, transcripts_path

REPORT_SCHEMA = 1
NO_APPLICABLE_TURN_SCORE = 0.5
DEFAULT_EXAMPLES = 3
ORIGINALS_PER_BATCH = 4  # each with up to one copy per kind: ~40 conversations a batch
# Scores are compared rounded, so float noise in a mean (the same turns summed in another order) is no win.
_PLACES = 9

GENERATORS: dict[str, Callable[..., Broken | None]] = {
    "shuffled_words": shuffled_words, "foreign_reply": foreign_reply, "looped_sentence": looped_sentence,
    "insult_added": insult_added, "ungrounded_numbers": ungrounded_numbers, "claimed_action": claimed_action,
    "ungrounded_argument": ungrounded_argument, "renamed_call": renamed_call, "repeated_call": repeated_call,
    "skipped_lookup": skipped_lookup, "empty_reply": empty_reply, "truncated_reply": truncated_reply,
}
assert tuple(GENERATORS) == KINDS


def break_conversation(conversation: Mapping[str, Any], kind: str, *, seed: int = 0,
                       pool: ReplyPool | None = None) -> Broken | None:
    """The broken copy of `conversation` for `kind` (one of KINDS), or None where it does not apply."""
    return GENERATORS[kind](conversation, seed=seed, pool=pool)


def parse_kinds(kinds: str | Iterable[str] | None) -> tuple[str, ...]:
    """KINDS when none are named; else the named ones, in KINDS order, each checked."""
    if kinds is None:
        return KINDS
    names = [k.strip() for k in (kinds.split(",") if isinstance(kinds, str) else kinds) if k.strip()]
    unknown = [k for k in names if k not in GENERATORS]
    if unknown or not names:
        what = f"unknown breakage kind {', '.join(map(repr, unknown))}" if unknown else "no breakage kind named"
        raise InputError(f"{what}; choose from {', '.join(KINDS)}", field="kinds")
    return tuple(k for k in KINDS if k in names)


# ------------------------------------------------------------------------------------------------------ grading


class _Graded:
    """A conversation's grade rows, by message index, and its score."""

    __slots__ = ("rows", "score")

    def __init__(self, rows: Sequence[Mapping[str, Any]]):
        self.rows = {row["turn_index"]: row for row in rows}
        scores = [float(row["score"]) for row in rows if row["applicable"]]
        self.score = sum(scores) / len(scores) if scores else NO_APPLICABLE_TURN_SCORE

    def turn(self, index: int) -> Mapping[str, Any] | None:
        return self.rows.get(index)


def _example(cid: str, broken: Broken, original: _Graded, copy: _Graded) -> dict[str, Any]:
    turn = broken.turns[0]
    broken_row, original_row = copy.turn(turn["index"]), original.turn(turn["original_index"])

    def turn_score(row):
        return float(row["score"]) if row and row["applicable"] else None

    return {
        "conversation_id": cid,
        "original_score": original.score, "broken_score": copy.score,
        "outcome": "tie" if round(original.score, _PLACES) == round(copy.score, _PLACES) else "loss",
        "turn_index": turn["index"], "turns_broken": len(broken.turns),
        "original": turn["original"], "broken": turn["broken"],
        "original_turn_score": turn_score(original_row), "broken_turn_score": turn_score(broken_row),
        "reason": (broken_row or {}).get("reason") or "",
        "original_reason": (original_row or {}).get("reason") or "",
        **({"details": broken.notes} if broken.notes else {}),
    }


def _wilson(successes: float, n: int, z: float = 1.96) -> list[float]:
    """95% Wilson score interval of a win rate. A tie counts as half a success, as in the rate; a tie varies less
    than a coin flip, so the interval is, if anything, too wide."""
    p = successes / n
    centre, spread = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    scale = 1 + z * z / n
    return [max(0.0, (centre - spread) / scale), min(1.0, (centre + spread) / scale)]


class _Kind:
    """One kind's tally, and the copies that fooled the reward most (a bounded list)."""

    def __init__(self, kind: str, examples: int):
        self.kind, self.examples = kind, examples
        self.applied = self.wins = self.ties = self.losses = self.at_zero = 0
        self.drop = 0.0
        self.fooled: list[tuple[float, str, dict[str, Any]]] = []

    def add(self, cid: str, broken: Broken, original: _Graded, copy: _Graded) -> None:
        self.applied += 1
        a, b = round(original.score, _PLACES), round(copy.score, _PLACES)
        if a > b:
            self.wins += 1
        elif a == b:
            self.ties += 1
        else:
            self.losses += 1
        self.at_zero += a == 0.0
        self.drop += original.score - copy.score
        if a <= b and self.examples:
            self.fooled.append((a - b, cid, _example(cid, broken, original, copy)))
            if len(self.fooled) > 4 * self.examples:
                self._prune()

    def _prune(self) -> None:
        # Losses before ties, the widest margin first; ids break ties, so the choice is deterministic.
        self.fooled = sorted(self.fooled, key=lambda t: (t[0], t[1]))[:self.examples]

    def report(self, conversations: int) -> dict[str, Any]:
        self._prune()
        n = self.applied
        return {
            "description": DESCRIPTIONS[self.kind], "applied": n, "not_applicable": conversations - n,
            "wins": self.wins, "ties": self.ties, "losses": self.losses,
            "win_rate": (self.wins + 0.5 * self.ties) / n if n else None,
            "interval": _wilson(self.wins + 0.5 * self.ties, n) if n else None,
            "mean_drop": self.drop / n if n else None,
            # An original scoring 0 can at best tie its copy: the highest win rate this reward could reach here.
            "originals_at_zero": self.at_zero,
            "best_possible": 1.0 - 0.5 * self.at_zero / n if n else None,
            "examples": [e for _, _, e in self.fooled],
        }


def robustness_report(conversations: Sequence[Mapping[str, Any]], grader, *, kinds: str | Iterable[str] | None = None,
                      seed: int = 0, examples: int = DEFAULT_EXAMPLES,
                      keep: Callable[[Broken], bool] | None = None,
                      on_progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Break `conversations` (checked, in ingest's format) with each kind, grade originals and copies with
    `grader` (a Reward, in any runtime), and tally. `keep` may leave some copies out (e.g. only those that touch
    a decision); a conversation whose copy is left out counts as one the kind does not apply to.

    Streams: a few originals and their copies make one batch, so memory holds a few batches (and the pool of
    replies that foreign_reply draws from), and an out-of-process reward grades while the next batch is built."""
    chosen = parse_kinds(kinds)
    if examples < 0:
        raise InputError("examples must be 0 or more", field="examples")
    pool = ReplyPool(conversations) if "foreign_reply" in chosen else None
    tallies = {kind: _Kind(kind, examples) for kind in chosen}
    who = f"reward:{grader.identity()['name']}"
    pending: deque[list[tuple[str | None, int, Broken | None, int]]] = deque()

    def batches() -> Iterator[list[GradeItem]]:
        for start in range(0, len(conversations), ORIGINALS_PER_BATCH):
            entries, items = [], []
            for n in range(start, min(start + ORIGINALS_PER_BATCH, len(conversations))):
                found = [(None, conversations[n], None)]
                for kind in chosen:
                    broken = GENERATORS[kind](conversations[n], seed=seed, pool=pool)
                    if broken is not None and (keep is None or keep(broken)):
                        found.append((kind, broken.conversation, broken))
                for kind, conv, broken in found:
                    turns = assistant_turns(conv)
                    entries.append((kind, n, broken, len(turns)))
                    items.append(GradeItem(dict(conv), assistant_turns=turns))
            pending.append(entries)
            yield items

    done = 0
    for rows in grader.grade_many(batches()):
        entries = pending.popleft()
        expected = sum(e[3] for e in entries)
        if len(rows) != expected:
            raise PluginError(who, "grade", f"returned {len(rows)} grades for {expected} assistant turns")
        at, original = 0, None
        for kind, n, broken, count in entries:
            graded = _Graded(rows[at:at + count])
            at += count
            if kind is None:
                original, done = graded, done + 1
            else:
                tallies[kind].add(str(conversations[n].get("id")), broken, original, graded)
        if on_progress:
            on_progress(done, len(conversations))

    per_kind = {kind: t.report(len(conversations)) for kind, t in tallies.items()}
    rated = [(e["win_rate"], k) for k, e in per_kind.items() if e["win_rate"] is not None]
    identity = grader.identity()
    return {
        "schema_version": REPORT_SCHEMA,
        "step": "robustness",
        "reward": {**identity, "component": f"reward:{identity['name']}"},
        "seed": seed,
        "conversations": len(conversations),
        "win_rate_means": "the original scores strictly higher than its broken copy; ties count half",
        "conversation_score": "mean of the applicable turns' scores; 0.5 when none is applicable",
        "kinds": per_kind,
        "weakest": min(rated, key=lambda r: r[0])[1] if rated else None,  # the first kind among equals
    }


def read_conversations(transcripts: str | os.PathLike, limit: int | None = None) -> tuple[list[dict[str, Any]], str]:
    """The checked conversations of transcripts.jsonl (the first `limit` of them, when given), and its path."""
    src = transcripts_path(transcripts)
    shown = str(src)
    if not src.is_file():
        raise InputError("file not found (run `stateset-agents ingest` to make it)", path=shown)
    conversations = []
    for line, obj in read_jsonl(src, display=shown):
        if limit is not None and len(conversations) >= limit:
            break
        conversations.append(_check_conversation(obj, shown, line)[0])
    if not conversations:
        raise InputError("no conversations in this file", path=shown)
    return conversations, shown


def _touches_decision(broken: Broken) -> bool:
    return broken.touches_decision


def run_robustness(transcripts: str | os.PathLike, reward: str, config: Mapping[str, Any] | None = None, *,
                   kinds: str | Iterable[str] | None = None, seed: int = 0, examples: int = DEFAULT_EXAMPLES,
                   runtime: str = "inprocess", output: str | os.PathLike | None = None, limit: int | None = None,
                   decisions_only: bool = False,
                   on_progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """The robustness report for an ingest folder's transcripts.jsonl and reward `reward` (NAME or reward:NAME)
    built with `config` (a policy travels as config.policy). With `output`, the report is also written there
    (atomically). `limit`: audit the first so many conversations only (the whole file is held in memory, for the
    pool of foreign replies). `decisions_only`: count only the copies that change a write or hand-off call (what a
    policy reward judges; the others count as not applicable). `on_progress(graded, total)` hears of
    each graded batch of conversations."""
    from ..core.runtimes import load_component

    chosen = parse_kinds(kinds)  # checked before anything is read or started
    if examples < 0:
        raise InputError("examples must be 0 or more", field="examples")
    if limit is not None and limit < 1:
        raise InputError("limit must be at least 1", field="limit")
    conversations, shown = read_conversations(transcripts, limit)
    with load_component(reward, kind="reward", config=dict(config or {}), runtime=runtime) as grader:
        report = robustness_report(conversations, grader, kinds=chosen, seed=seed, examples=examples,
                                   keep=_touches_decision if decisions_only else None, on_progress=on_progress)
    head = {k: report.pop(k) for k in ("schema_version", "step")}
    report = {**head, "transcripts": {"path": os.path.abspath(shown), "sha256": sha256_file(shown)},
              "runtime": runtime, "limit": limit, "decisions_only": decisions_only, **report}
    if output is not None:
        write_json(output, report)
    return report
