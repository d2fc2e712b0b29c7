"""What the build runs: the Metal kernels' code generation (setup.py imports it; it is not
part of the installed package)."""
