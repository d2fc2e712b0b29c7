"""Other projects' MoE kernels, staged and loaded as benchmark baselines (bench/README.md: vLLM's
fused_moe side by side); nothing in torch_argon imports them."""
