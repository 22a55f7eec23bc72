"""Rollouts: sample completions (single turn) or episodes (multi-turn) and grade them with the reward.

Each rollout returns `Episode`s in group order: the G samples of one prompt are contiguous. Grading is batched:
one ``reward.grade`` call per rollout round, covering every sample of every group.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from stateset_agents.core.components import GradeItem

from stateset_plugins.models.batch import IntegrityError, Sample
from stateset_plugins.models.chat_format import parse_assistant, same_call


@dataclass
class Episode:
    sample: Sample
    conversation: dict[str, Any]
    graded_turns: list[int]
    reward: float = 0.0
    grades: list[dict[str, Any]] = field(default_factory=list)
    ended: str = ""  # why a multi-turn episode stopped


def _conversation(row: Mapping, sample_id: str, messages: list) -> dict[str, Any]:
    return {"id": sample_id, "messages": messages, "tools": row.get("tools") or [],
            "metadata": row.get("metadata") or {}}


def _decode(tokenizer, ids: Sequence[int]) -> dict[str, Any]:
    return parse_assistant(tokenizer.decode(list(ids), skip_special_tokens=True))


def single_turn(backend, renderer, rows: Sequence[Mapping], keys: Sequence[str], config) -> list[Episode]:
    g = config.num_generations
    prompts = [renderer.prompt_ids(row["prompt"], row.get("tools")) for row in rows]
    gens = backend.generate([p for p in prompts for _ in range(g)], max_new_tokens=config.max_new_tokens,
                            temperature=config.temperature)
    episodes = []
    for k, gen in enumerate(gens):
        row, key = rows[k // g], keys[k // g]
        sid = f"{key}/g{k % g}"
        messages = list(row["prompt"]) + [_decode(renderer.tokenizer, gen.ids)]
        sample = Sample(sid, key, prompts[k // g], gen.ids, [True] * len(gen.ids), list(gen.logps), gen.truncated)
        episodes.append(Episode(sample, _conversation(row, sid, messages), [len(messages) - 1]))
    return episodes


def _calls(message: Mapping) -> list:
    return list(message.get("tool_calls") or [])


def _replay(sampled: Mapping, recorded: Mapping, env: list) -> str:
    """'' when the recorded environment may be replayed after the sampled turn, else why the episode ends."""
    got, want = _calls(sampled), _calls(recorded)
    if len(got) != len(want) or not all(same_call(a, b) for a, b in zip(got, want)):
        return "diverged"  # another call, a missing call, or a call the log never made
    if not env:
        return "end_of_recording"
    return ""


def multi_turn(backend, renderer, rows: Sequence[Mapping], keys: Sequence[str], config) -> list[Episode]:
    """Agent turns sampled, recorded user turns and (while calls match) tool results replayed."""
    g = config.num_generations
    episodes, scripts = [], []
    for row, key in zip(rows, keys):
        prompt = renderer.prompt_ids(row["prompt"], row.get("tools"))
        for j in range(g):
            sid = f"{key}/g{j}"
            episodes.append(Episode(Sample(sid, key, prompt, [], [], []),
                                    _conversation(row, sid, list(row["prompt"])), []))
            scripts.append([row["completion"], *row.get("continuation", [])])
    cursor = [0] * len(episodes)
    active = list(range(len(episodes)))
    for _turn in range(config.max_turns):
        if not active:
            break
        budget = [config.max_episode_tokens - len(episodes[i].sample.completion_ids) for i in active]
        gens = backend.generate([episodes[i].sample.prompt_ids + episodes[i].sample.completion_ids for i in active],
                                max_new_tokens=max(1, min(config.max_new_tokens, min(budget))),
                                temperature=config.temperature)
        still = []
        for i, gen in zip(active, gens):
            ep, script = episodes[i], scripts[i]
            s, msgs = ep.sample, ep.conversation["messages"]
            message = _decode(renderer.tokenizer, gen.ids)
            msgs.append(message)
            ep.graded_turns.append(len(msgs) - 1)
            s.completion_ids += gen.ids
            s.sampled += [True] * len(gen.ids)
            s.behaviour_logp += list(gen.logps)
            recorded = script[cursor[i]]
            k = cursor[i] + 1
            env = []
            while k < len(script) and script[k].get("role") != "assistant":
                env.append(script[k])
                k += 1
            ep.ended = "truncated" if gen.truncated else _replay(message, recorded, env)
            if not ep.ended:
                env_ids = renderer.continuation_ids(msgs, env, ep.conversation["tools"])
                if len(s.completion_ids) + len(env_ids) >= config.max_episode_tokens:
                    ep.ended = "max_episode_tokens"
            if ep.ended:
                s.truncated = gen.truncated
                continue
            msgs.extend(env)
            s.completion_ids += env_ids
            s.sampled += [False] * len(env_ids)
            s.behaviour_logp += [None] * len(env_ids)
            cursor[i] = k
            still.append(i)
        active = still
    for i in active:
        episodes[i].ended = "max_turns"
    return episodes


def grade(reward, episodes: Sequence[Episode]) -> None:
    """One batched grade call; each episode's reward is the mean score of its graded turns."""
    items = [GradeItem(conversation=ep.conversation, turns=list(ep.graded_turns)) for ep in episodes]
    rows = reward.grade(items)
    expected = sum(len(ep.graded_turns) for ep in episodes)
    if len(rows) != expected:
        raise IntegrityError(episodes[0].sample.sample_id if episodes else "?",
                             f"the reward returned {len(rows)} grades for {expected} turns")
    at = 0
    for ep in episodes:
        ep.grades = list(rows[at:at + len(ep.graded_turns)])
        at += len(ep.graded_turns)
        scores = [r.get("score") for r in ep.grades]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in scores):
            raise IntegrityError(ep.sample.sample_id, f"the reward returned a non-numeric score: {scores!r}")
        ep.reward = sum(float(v) for v in scores) / len(scores)
