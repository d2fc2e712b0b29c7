"""The refusals that the Experts' supports() read on a CUDA device must trace under
torch.compile(fullgraph=True): the layer chooses its implementation inside the compiled
function, so a refusal that Dynamo cannot trace breaks fullgraph for every CUDA layer (the
dispatcher's kernel query and torch.cuda.get_device_capability are not traceable; on a machine
without CUDA kernels the query is the first thing they ask)."""
import pytest
import torch

from torch_argon import gpuq, hopper


@pytest.mark.parametrize("refusal", [hopper.refusal, gpuq.refusal], ids=["hopper", "gpuq"])
def test_refusal_traces_under_fullgraph(refusal):
    cuda = torch.device("cuda")
    expected = refusal(cuda)

    @torch.compile(fullgraph=True, backend="eager")
    def f(x):
        return x + len(refusal(cuda))

    torch._dynamo.reset()
    assert f(torch.zeros(2)).tolist() == [float(len(expected))] * 2
