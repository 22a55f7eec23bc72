"""The shipped sample logs run through improve, and TRL's SFT trainer takes the curated rows as they are (one step
on a tiny random Llama with a tokenizer built offline), with the loss on the curated turn only."""
from __future__ import annotations

import json

import pytest

from stateset_agents import samples
from stateset_agents.cli import main
from stateset_agents.samples import make_samples
from tests.improve.improve_helpers import write_transcripts


def sample_logs() -> list[dict]:
    return [json.loads(line) for line in samples.LOGS.read_text().splitlines()]


def test_samples_are_reproducible_small_and_disjoint_from_held_out(tmp_path):
    make_samples.main(tmp_path)
    for path in (samples.LOGS, samples.HELD_OUT):
        assert (tmp_path / path.name).read_bytes() == path.read_bytes()
    assert samples.LOGS.stat().st_size < 300_000
    logs, held = sample_logs(), [json.loads(line) for line in samples.HELD_OUT.read_text().splitlines()]
    assert 60 <= len(logs) <= 120 and len(held) == 16
    assert {r["metadata"]["scenario"] for r in logs} == {
        "order_status", "refund", "address_change", "wants_human", "out_of_scope"}
    assert {r["metadata"]["resolved"] for r in logs} == {True, False}
    tool_names = {c["function"]["name"] for r in logs for m in r["messages"] for c in m.get("tool_calls") or []}
    assert tool_names == {"get_order", "issue_refund", "update_shipping_address", "transfer_to_human"}
    user_texts = {m["content"] for r in logs for m in r["messages"] if m["role"] == "user"}
    assert all(case["prompt"][-1]["role"] == "user" and case["prompt"][-1]["content"] not in user_texts
               for case in held)


def test_sample_policy_drives_nsr_on_the_sample_logs(tmp_path):
    write_transcripts(tmp_path / "in", sample_logs())
    out = tmp_path / "out"
    assert main(["improve", "run", "--transcripts", str(tmp_path / "in"), "--reward", "nsr", "--policy",
                 str(samples.POLICY), "--output", str(out), "--held-out", "0"]) == 0
    graded = [json.loads(line) for line in (out / "graded.jsonl").read_text().splitlines()]
    broken = {g["reason"].split(" on ")[0] for g in graded if g["applicable"] and g["score"] == 0}
    # The badly played refunds and address changes break the store's rules; the good ones keep them.
    assert {"broke look-up-before-refund", "broke confirm-before-refund"} <= broken
    assert any(g["applicable"] and g["score"] == 1 for g in graded)


@pytest.fixture(scope="module")
def trl_stack():
    pytest.importorskip("trl")
    import datasets
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    datasets.disable_progress_bars()
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<unk>", "<pad>", "<eos>", "<|end|>"]
    tok.train_from_iterator(["order refund address human"], trainers.BpeTrainer(
        vocab_size=300, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    template = ("{%- if tools %}<tools>{{ tools | tojson }}<|end|>{% endif %}"
                "{%- for m in messages %}<{{ m.role }}>{{ m.content }}"
                "{%- for c in m.tool_calls or [] %}[{{ c.function.name }} {{ c.function.arguments }}]{% endfor %}"
                "<|end|>{% endfor %}{%- if add_generation_prompt %}<assistant>{% endif %}")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                        eos_token="<eos>", chat_template=template)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                         max_position_embeddings=8192))
    return datasets, tokenizer, model


def test_trl_sft_trains_on_curated_rows_as_they_are(tmp_path, trl_stack):
    from trl import SFTConfig, SFTTrainer

    datasets, tokenizer, model = trl_stack
    write_transcripts(tmp_path / "in", sample_logs())
    assert main(["improve", "run", "--transcripts", str(tmp_path / "in"), "--reward", "improve_toy",
                 "--output", str(tmp_path / "out")]) == 0
    ds = datasets.load_dataset("json", data_files=str(tmp_path / "out" / "curated.jsonl"), split="train",
                               cache_dir=str(tmp_path / "cache"))
    ds = ds.select(range(4))
    args = SFTConfig(output_dir=str(tmp_path / "run"), max_steps=1, per_device_train_batch_size=2, report_to=[],
                     use_cpu=True, max_length=None, save_strategy="no",
                     disable_tqdm=True, seed=0)
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tokenizer)
    for raw, prepared in zip(ds, trainer.train_dataset):
        trained_on = tokenizer.decode([t for t in prepared["labels"] if t != -100])
        completion = raw["completion"][0]
        call = completion["tool_calls"][0]["function"] if completion["tool_calls"] else None
        expected = completion["content"] + (f"[{call['name']} {call['arguments']}]" if call else "") + "<|end|>"
        assert trained_on.replace(" ", "") == expected.replace(" ", "")  # the curated turn, nothing of the prompt
    result = trainer.train()
    assert result.global_step == 1 and result.training_loss > 0
