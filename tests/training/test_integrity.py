"""Every integrity rule catches its violation and names the sample."""
from __future__ import annotations

import math

import pytest
import torch

from stateset_plugins.models.batch import Sample, collate
from stateset_plugins.trainers.integrity import check_batch
from stateset_plugins.models.batch import IntegrityError

VOCAB = 50


def good_batch():
    samples = [Sample(f"row{i // 2}/g{i % 2}", f"p{i // 2}", [1, 2, 3 + i // 2], [4 + i, 5, 2],
                      [True, True, True], [-1.0, -0.5, -0.1]) for i in range(4)]
    b = collate(samples, pad_id=0, group_size=2)
    b.rewards = torch.tensor([1.0, 0.0, 0.5, 0.2])
    b.advantages = torch.tensor([1.0, -1.0, 1.0, -1.0])
    b.ref_logp = torch.full_like(b.behaviour_logp, -0.7)
    return b


def check(b, **kw):
    check_batch(b, VOCAB, needs_behaviour=kw.get("behaviour", True), needs_reference=kw.get("reference", True))


def test_a_good_batch_passes():
    check(good_batch())


def mutate_token(b):
    b.input_ids[2, -1] = VOCAB + 3


def mutate_negative_token(b):
    b.input_ids[2, 0] = -1


def mutate_mask(b):
    b.completion_mask[2, 0] = 0.5


def mutate_trained_padding(b):
    b.attention_mask[2, -1] = 0


def mutate_empty_completion(b):
    b.completion_mask[2] = 0


def mutate_reward(b):
    b.rewards[2] = math.inf


def mutate_nan_reward(b):
    b.rewards[2] = math.nan


def mutate_behaviour_missing(b):
    b.behaviour_logp[2, 1] = math.nan


def mutate_behaviour_positive(b):
    b.behaviour_logp[2, 1] = 0.5


def mutate_reference(b):
    b.ref_logp[2, 0] = -math.inf


def mutate_group_mixed(b):
    b.groups[2] = "p0"


def mutate_group_prompt(b):
    b.input_ids[3, b.prompt_width - 1] = 7


def mutate_advantage(b):
    b.advantages[2] = math.nan


@pytest.mark.parametrize("mutate, message", [
    (mutate_token, "outside the vocabulary"), (mutate_negative_token, "outside the vocabulary"),
    (mutate_mask, "values other than 0 and 1"), (mutate_trained_padding, "masked out of attention"),
    (mutate_empty_completion, "no trainable token"), (mutate_reward, "reward is not finite"),
    (mutate_nan_reward, "reward is not finite"), (mutate_behaviour_missing, "behaviour log-prob"),
    (mutate_behaviour_positive, "positive"), (mutate_reference, "reference log-prob"),
    (mutate_advantage, "advantage"),
])
def test_each_violation_is_caught_and_names_the_sample(mutate, message):
    b = good_batch()
    mutate(b)
    with pytest.raises(IntegrityError, match=message) as err:
        check(b)
    assert err.value.sample == "row1/g0"


@pytest.mark.parametrize("mutate, message", [(mutate_group_mixed, "mixes in another prompt"),
                                             (mutate_group_prompt, "different prompts")])
def test_groups_must_be_complete_and_owned_by_one_prompt(mutate, message):
    b = good_batch()
    mutate(b)
    with pytest.raises(IntegrityError, match=message):
        check(b)


def test_incomplete_group_and_shape_errors():
    b = good_batch()
    b.group_size = 3
    with pytest.raises(IntegrityError, match="groups of 3"):
        check(b)
    b = good_batch()
    b.behaviour_logp = b.behaviour_logp[:, :2]
    with pytest.raises(IntegrityError, match="behaviour_logp has shape"):
        check(b)
    b = good_batch()
    b.ref_logp = None
    with pytest.raises(IntegrityError, match="ref_logp"):
        check(b)


def test_sft_needs_no_behaviour_logprobs():
    b = good_batch()
    b.behaviour_logp[:] = math.nan
    check(b, behaviour=False, reference=False)
