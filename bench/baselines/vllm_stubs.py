"""Stand-ins for the vLLM modules that the staged fused_moe.py and moe_align_block_size.py import,
so that those two files load by path without vLLM installed (bench/baselines/vllm_fused_moe.py
loads them). Each stand-in holds what the two files use for bf16 / fp16 / fp32 weights without
quantization or expert parallelism, with vLLM's behaviour for that case:

  vllm.envs                   VLLM_BATCH_INVARIANT False, VLLM_TUNED_CONFIG_FOLDER None,
                              VLLM_TRITON_USE_TD None (vLLM's defaults)
  vllm._custom_ops            moe_align_block_size, moe_sum: vllm_glue.py's equivalents
  vllm.logger                 init_logger: a logging.Logger with vLLM's info_once/warning_once
  vllm.platforms              current_platform: CUDA (or the CPU under Triton's interpreter)
  vllm.triton_utils           triton and triton.language themselves
  ...fused_moe (package)      get_config(): None (no override config is set)
  ...fused_moe.activation     MoEActivation (the gated silu / gelu / gelu_tanh),
                              apply_moe_activation: vllm_glue.act_and_mul
  ...fused_moe.config         _get_config_dtype_str as vLLM's; the quantization config names
  ...fused_moe.modular_kernel FusedMoEExpertsModular.adjust_N_for_activation as vLLM's
  ...fused_moe.utils          moe_kernel_quantize_input (no quantization: the input as is),
                              enable_swap_ab as vLLM's, the tensor-descriptor path off
  vllm.utils.*                next_power_of_2, round_up, get_device_name_as_file_name as vLLM's,
                              direct_register_custom_op: nothing (the adapter calls the
                              implementation, not the registered op)

Anything else a staged file asks of these modules raises an AttributeError naming it: a vLLM
version that needs more than this list is refused loudly, not run on guesses.
"""
import enum
import logging
import os
import re
import sys
import types

import torch
import triton
import triton.language as tl

from . import vllm_glue

PKG = "vllm.model_executor.layers.fused_moe"
STUB_MARK = "__argon_vllm_stub__"


class _Module(types.ModuleType):
    """A stand-in module: a missing name raises an AttributeError that says so."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"{self.__name__}.{name}: the staged vLLM file asks for a name the "
                             "benchmark's stand-ins (bench/baselines/vllm_stubs.py) do not "
                             "provide; stage the vLLM version the adapter was written for")


def _module(name, package=False, **attrs):
    m = _Module(name)
    setattr(m, STUB_MARK, True)
    if package:
        m.__path__ = []
    m.__dict__.update(attrs)
    return m


class _Logger(logging.LoggerAdapter):
    """vLLM's logger methods that the files call (the *_once ones log once per message)."""

    def __init__(self, name):
        super().__init__(logging.getLogger(name), {})
        self._seen = set()

    def _once(self, level, msg, *args, scope=None):
        if (msg, args) not in self._seen:
            self._seen.add((msg, args))
            self.log(level, msg, *args)

    def info_once(self, msg, *args, scope=None):
        self._once(logging.INFO, msg, *args)

    def warning_once(self, msg, *args, scope=None):
        self._once(logging.WARNING, msg, *args)


class _Platform:
    """vLLM's current_platform for an NVIDIA GPU (the CPU under the interpreter: no ROCm, no
    Hopper-only choices)."""

    @staticmethod
    def is_rocm():
        return False

    @staticmethod
    def is_xpu():
        return False

    @staticmethod
    def is_cuda():
        return torch.cuda.is_available()

    @staticmethod
    def fp8_dtype():
        return torch.float8_e4m3fn

    @staticmethod
    def get_device_name(device_id=0):
        return torch.cuda.get_device_name(device_id) if torch.cuda.is_available() else "cpu"

    @staticmethod
    def has_device_capability(capability, device_id=0):
        if not torch.cuda.is_available():
            return False
        major, minor = torch.cuda.get_device_capability(device_id)
        return major * 10 + minor >= capability

    @staticmethod
    def is_device_capability(capability, device_id=0):
        if not torch.cuda.is_available():
            return False
        major, minor = torch.cuda.get_device_capability(device_id)
        return major * 10 + minor == capability


class MoEActivation(enum.Enum):
    """The gated activations of vLLM's enum that both torch_argon and the baseline run."""
    SILU = "silu"
    GELU = "gelu"
    GELU_TANH = "gelu_tanh"

    @property
    def is_gated(self):
        return True

    @classmethod
    def from_str(cls, s):
        s = {"gelu_pytorch_tanh": "gelu_tanh"}.get(s, s)
        for member in cls:
            if member.value == s:
                return member
        raise ValueError(f"the vLLM baseline runs activations {[m.value for m in cls]}, "
                         f"got {s!r}")


def apply_moe_activation(activation, output, input, **options):
    if any(v is not None for v in options.values()):
        raise NotImplementedError(f"the vLLM baseline's activation takes no options: {options}")
    return vllm_glue.act_and_mul(activation.value, output, input)


class FusedMoEExpertsModular:
    @staticmethod
    def adjust_N_for_activation(N, activation):
        return N // 2 if activation.is_gated else N


def _get_config_dtype_str(dtype, use_fp8_w8a8=False, use_fp8_w8a16=False, use_int8_w8a16=False,
                          use_int4_w4a16=False, ocp_mx_scheme=None):
    if use_fp8_w8a8 or use_fp8_w8a16 or use_int8_w8a16 or use_int4_w4a16 or ocp_mx_scheme:
        raise NotImplementedError("the vLLM baseline runs unquantized weights only")
    return "float32" if dtype == torch.float else None


def moe_kernel_quantize_input(A, A_scale, quant_dtype, per_act_token_quant, block_shape=None,
                              **options):
    if quant_dtype is not None:
        raise NotImplementedError("the vLLM baseline runs unquantized activations only")
    return A, A_scale


def enable_swap_ab(BLOCK_SIZE_M, BLOCK_SIZE_N):
    return _Platform.is_device_capability(90) and BLOCK_SIZE_M < 64 and BLOCK_SIZE_N >= 64


def _no_triton_allocator(device):
    raise NotImplementedError("the vLLM baseline runs with VLLM_TRITON_USE_TD unset (off on CUDA)")


def get_device_name_as_file_name(device_id=0):
    """vLLM's file-name form of the device name; ARGON_VLLM_DEVICE_NAME overrides the name
    (tests/test_vllm_baseline.py looks up a tuned config file on the CPU with it)."""
    name = os.environ.get("ARGON_VLLM_DEVICE_NAME") or _Platform.get_device_name(device_id)
    return re.sub(r"[\s/]+", "_", name)


def _no_registration(*args, **kwargs):
    return None


def _unsupported(what):
    def call(*args, **kwargs):
        raise NotImplementedError(f"{what} is not part of the vLLM baseline (bf16/fp16 weights, "
                                  "no quantization)")
    return call


def stub_modules():
    """{module name: stand-in} for every vllm module the two staged files import."""
    unquantized = types.SimpleNamespace(use_fp8_w8a8=False, use_int8_w8a8=False,
                                        use_int8_w8a16=False, use_int4_w4a16=False)
    mods = [
        _module("vllm", package=True),
        _module("vllm.envs", VLLM_BATCH_INVARIANT=False, VLLM_TUNED_CONFIG_FOLDER=None,
                VLLM_TRITON_USE_TD=None),
        _module("vllm._custom_ops", moe_align_block_size=vllm_glue.moe_align_block_size,
                moe_sum=vllm_glue.moe_sum, moe_wna16_gemm=_unsupported("moe_wna16_gemm")),
        _module("vllm.logger", init_logger=_Logger),
        _module("vllm.platforms", current_platform=_Platform()),
        _module("vllm.triton_utils", package=True, triton=triton, tl=tl),
        _module("vllm.triton_utils.allocation", set_triton_allocator=_no_triton_allocator),
        _module("vllm.utils", package=True),
        _module("vllm.utils.math_utils", next_power_of_2=triton.next_power_of_2,
                round_up=lambda x, y: (x + y - 1) // y * y, cdiv=triton.cdiv),
        _module("vllm.utils.platform_utils",
                get_device_name_as_file_name=get_device_name_as_file_name),
        _module("vllm.utils.torch_utils", direct_register_custom_op=_no_registration),
        _module("vllm.model_executor", package=True),
        _module("vllm.model_executor.layers", package=True),
        _module(PKG, package=True, get_config=lambda: None),
        _module(PKG + ".activation", MoEActivation=MoEActivation,
                apply_moe_activation=apply_moe_activation),
        _module(PKG + ".config", FUSED_MOE_UNQUANTIZED_CONFIG=unquantized,
                FusedMoEQuantConfig=types.SimpleNamespace,
                _get_config_dtype_str=_get_config_dtype_str),
        _module(PKG + ".modular_kernel", FusedMoEExpertsModular=FusedMoEExpertsModular),
        _module(PKG + ".utils", enable_swap_ab=enable_swap_ab,
                moe_kernel_quantize_input=moe_kernel_quantize_input,
                resolve_moe_use_td=lambda: False,
                warn_if_moe_use_td_ineffective=lambda *a, **k: None),
    ]
    return {m.__name__: m for m in mods}


def install():
    """Puts the stand-ins into sys.modules (the staged files import by absolute name, also at
    call time). Refuses when a real vllm is already imported in this process."""
    real = sys.modules.get("vllm")
    if real is not None and not getattr(real, STUB_MARK, False):
        raise RuntimeError("a real vllm package is imported in this process: the baseline "
                           "loads its staged kernel file under vllm's module names, so run it "
                           "in a process that has not imported vllm")
    for name, module in stub_modules().items():
        if name not in sys.modules:
            sys.modules[name] = module
    # the parents' attributes, as an import system would set them
    for name in stub_modules():
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, sys.modules[name])
