"""Hooks into model libraries. Each submodule imports its library lazily, so importing
torch_argon never requires them: torch_argon.integrations.transformers needs `transformers`."""
