"""First-party StateSet Agents plugins: ingestors, rewards, trainers, evaluators and providers."""
