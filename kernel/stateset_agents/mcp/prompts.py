"""The prompt template `improve_my_agent`: the improve loop, step by step, in this server's tools."""
from __future__ import annotations

import mcp_types as types
from mcp.shared.exceptions import MCPError

INSTRUCTIONS = ("StateSet Agents turns an agent's conversation logs into a training set, trains a LoRA adapter on it "
                "and proves on held-out prompts whether it got better. Tools read and write files only under the "
                "server's root folders. Start with the prompt improve_my_agent, or: ingest -> improve_run -> "
                "improve_audit -> train -> evaluate.")

ARGUMENTS = [
    types.PromptArgument(name="logs", description="The log file or folder (inside the server's roots).",
                         required=True),
    types.PromptArgument(name="format", description="Log format (an installed ingestor; default: ask "
                         "`plugins_list`).", required=False),
    types.PromptArgument(name="reward", description="Reward to grade with (default: ask `plugins_list`).",
                         required=False),
    types.PromptArgument(name="workdir", description="Folder for the outputs (default: improve-work).",
                         required=False),
]


async def list_prompts(ctx, params) -> types.ListPromptsResult:
    return types.ListPromptsResult(prompts=[types.Prompt(
        name="improve_my_agent", title="Improve my agent",
        description="Walk through ingest -> improve -> audit -> train -> evaluate on your logs.",
        arguments=ARGUMENTS)])


def render(logs: str, format: str | None = None, reward: str | None = None, workdir: str = "improve-work") -> str:
    reward_step = (f"with reward `{reward}`" if reward else
                   "with a reward that fits the logs (call `plugins_list` with kind `reward` and pick by what each "
                   "grades: tool calls, support conduct, answers, a policy)")
    format_step = (f"format `{format}`" if format else
                   "the format that matches the logs (`plugins_list` with kind `ingestor`)")
    return f"""Improve my agent from its conversation logs at `{logs}` with the StateSet Agents tools. Go step by step,
show me what each step produced, and stop to ask me before anything long (training) or anything that could spend money.

1. `ingest` with {format_step}, input `{logs}`, output `{workdir}/ingested`. Report how many conversations were
   written and why lines were rejected (`{workdir}/ingested/rejects.jsonl`).
2. `improve_run` on transcripts `{workdir}/ingested`, output `{workdir}/improved`, {reward_step}. Show the counts, the
   score distribution and the train command from its result (also `stateset://improve/{workdir}/improved/next_steps.md`).
3. `improve_audit` with robustness: true on the same transcripts and reward: does the reward score broken replies below
   real ones? If the logs carry a label I trust (resolution, CSAT), also audit against it (graded
   `{workdir}/improved/graded.jsonl`, transcripts and label_key) and, if it tracks the label poorly, `improve_calibrate`.
4. Ask me, then `train` on dataset `{workdir}/improved/curated.jsonl` with eval_prompts
   `{workdir}/improved/validation.jsonl` and output `{workdir}/runs/first` (the reward and algorithm from step 2's train
   command). It reports progress per committed update; if I cancel, it stops at a checkpoint (resume: true continues).
5. Read `stateset://runs/{workdir}/runs/first/manifest.json` and `eval_results.json`: pick the checkpoint best on
   validation, `nominate` it, then `evaluate` with run `{workdir}/runs/first`, split test and prompts
   `{workdir}/improved/test.jsonl` (one look). Tell me plainly whether the adapter beat the base model, with the interval
   and p-value, and which cases regressed. A single run is descriptive; `gate` over several seeds decides promotion.
6. `lineage` on the run shows the adapter back to the exact log lines it learned from.
"""


async def get_prompt(ctx, params) -> types.GetPromptResult:
    if params.name != "improve_my_agent":
        raise MCPError(code=-32602, message=f"no prompt {params.name!r}; the prompt is improve_my_agent")
    args = dict(params.arguments or {})
    if not args.get("logs"):
        raise MCPError(code=-32602, message="improve_my_agent needs the argument logs (field 'logs')")
    text = render(args["logs"], args.get("format"), args.get("reward"),
                  args.get("workdir") or "improve-work")
    return types.GetPromptResult(description="The improve loop, step by step",
                                 messages=[types.PromptMessage(role="user", content=types.TextContent(text=text))])
