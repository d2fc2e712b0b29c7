"""The GGUF files the tests write (torch_argon.testing.gguf_files: tiny MoE files and whole
models written with the gguf package, transformers' GGUF loader as the oracle). Tests that write
one need the gguf package: mark them with conftest.needs("gguf", ...)."""
from torch_argon.testing.gguf_files import (dense_twin, transformers_dense_load,  # noqa: F401
                                            write_model_file, write_moe_file)
