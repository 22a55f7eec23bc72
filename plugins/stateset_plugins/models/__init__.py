"""The model code trainers and evaluators share: backend types and the backend seam (`batch`, `backend`,
`vllm_rollout`, `hosted`), model loading (`loading`, `tiny`), the chat format and tokenisation (`chat_format`,
`rendering`, `chat`), seeding (`seeding`), and what runs a model on held-out prompts (`evaluation`, `judge`).

Every other plugin package may import this one, and this one imports no other plugin package, so trainers,
evaluators and providers never reach into each other's internals (tests/kernel/test_plugin_imports.py). Importing
this package imports none of its modules (torch loads only with `backend`, `batch`, `seeding`, ...).
"""
