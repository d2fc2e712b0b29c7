"""from_gguf's `device`: one it cannot load the weights onto is a ValueError naming the argument,
raised before the file is read (here the file does not even exist)."""
import pytest
import torch

from torch_argon.integrations.gguf_transformers import from_gguf

MISSING = "no-such-model.gguf"


def test_meta_holds_no_weights():
    with pytest.raises(ValueError, match=r"^from_gguf: device='meta' holds no data, but "
                                         r"from_gguf loads the file's weights"):
        from_gguf(MISSING, device="meta")


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch sees a CUDA device here")
@pytest.mark.parametrize("device", ["cuda", "cuda:0", torch.device("cuda", 1)])
def test_cuda_that_torch_does_not_see(device):
    with pytest.raises(ValueError, match=r"^from_gguf: device=.*cuda.*: torch sees no CUDA "
                                         r"device"):
        from_gguf(MISSING, device=device)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_index_past_the_devices():
    n = torch.cuda.device_count()
    with pytest.raises(ValueError, match=rf"device='cuda:{n}': torch sees {n} CUDA device"):
        from_gguf(MISSING, device=f"cuda:{n}")


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="torch sees an MPS device here")
def test_mps_that_torch_does_not_see():
    with pytest.raises(ValueError, match=r"^from_gguf: device='mps': torch sees no MPS device"):
        from_gguf(MISSING, device="mps")


@pytest.mark.parametrize("device,message", [
    ("gpu", "device='gpu' is not a torch device"),
    (3.5, "device=3.5 is not a torch device"),
    ("xpu", "device='xpu': torch_argon runs on cpu, cuda and mps"),
])
def test_not_a_device_torch_argon_runs_on(device, message):
    with pytest.raises(ValueError, match="^from_gguf: " + message.replace("(", r"\(")):
        from_gguf(MISSING, device=device)
