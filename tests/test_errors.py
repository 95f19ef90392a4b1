"""Bad input gets PyTorch's kind of error, naming the op, and never crashes the interpreter."""
import pytest
import torch


def test_mixing_cpu_and_neuron_is_a_device_error():
    a = torch.ones(3, device="neuron")
    b = torch.ones(3)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device.*neuron:0 and cpu"):
        a + b
    with pytest.raises(RuntimeError, match="same device"):
        torch.mm(torch.ones(2, 2, device="neuron"), torch.ones(2, 2))


def test_mixing_neuron_devices_is_a_device_error():
    with pytest.raises(RuntimeError, match="same device.*neuron:0 and neuron:1"):
        torch.ones(3, device="neuron:0") * torch.ones(3, device="neuron:1")


def test_cpu_scalar_tensor_mixes_like_on_cuda():
    a = torch.arange(3.0, device="neuron")
    got = a * torch.tensor(2.0)
    assert got.device.type == "neuron"
    assert got.cpu().tolist() == [0.0, 2.0, 4.0]


def test_shape_mismatch_names_the_op():
    with pytest.raises(RuntimeError, match=r"aten.add.Tensor: The size of tensor a \(3\) must match the size of tensor b \(4\) at non-singleton dimension 0"):
        torch.ones(3, device="neuron") + torch.ones(4, device="neuron")
    with pytest.raises(RuntimeError, match=r"aten.mm.default: .*(cannot be multiplied|same reduction dim)"):
        torch.mm(torch.ones(2, 3, device="neuron"), torch.ones(4, 2, device="neuron"))


def test_unsupported_dtype_is_a_clear_error():
    with pytest.raises(TypeError, match=r"_to_copy.*complex32 is not supported on the neuron device"):
        torch.ones(2, device="neuron").to(torch.complex32)


def test_inplace_type_error_matches_cpu():
    a = torch.ones(3, dtype=torch.int64, device="neuron")
    with pytest.raises(RuntimeError, match=r"aten.add_.Tensor: .*(Promotion|can't be cast)"):
        a.add_(torch.ones(3, device="neuron") * 0.5)


def test_errors_leave_the_device_usable():
    with pytest.raises(RuntimeError, match=r"aten.add.Tensor: The size of tensor a \(3\) must match the size of tensor b \(4\) at non-singleton dimension 0"):
        torch.ones(3, device="neuron") + torch.ones(4, device="neuron")
    assert (torch.ones(3, device="neuron") + 1).cpu().tolist() == [2.0, 2.0, 2.0]


# name -> (fn, the ATen op whose executable checks the indices, the CPU's exception type and text)
INDEX_ERRORS = {
    "embedding": (lambda w, i: torch.nn.functional.embedding(i, w), "aten.embedding.default", IndexError,
                  "index out of range in self"),
    "index_select": (lambda w, i: w.index_select(0, i), "aten.index_select.default", IndexError,
                     "index out of range in self"),
    "index": (lambda w, i: w[i], "aten.index.Tensor", IndexError, "index 10 is out of bounds for dimension 0 with size 10"),
    "index_put": (lambda w, i: w.index_put_((i,), torch.zeros(1, 4, device=w.device)), "aten.index_put_.default",
                  IndexError, "index 10 is out of bounds for dimension 0 with size 10"),
    "gather": (lambda w, i: torch.gather(w, 0, i.view(1, 1).expand(1, 4)), "aten.gather.default", RuntimeError,
               "index 10 is out of bounds for dimension 0 with size 10"),
    "scatter_add": (lambda w, i: w.scatter_add(0, i.view(1, 1).expand(1, 4), torch.ones(1, 4, device=w.device)),
                    "aten.scatter_add.default", RuntimeError, "index 10 is out of bounds for dimension 0 with size 10"),
}


@pytest.mark.parametrize("name", sorted(INDEX_ERRORS))
def test_out_of_range_indices_raise_as_on_cpu(name, track):
    """XLA clamps out-of-range gathers silently; the device raises the CPU's kind of error, from the
    op's own executable (the message names the ATen op, which the CPU's does not; nothing fell back)."""
    fn, op, error, cpu_text = INDEX_ERRORS[name]
    w = torch.randn(10, 4)
    bad = torch.tensor([10])
    with pytest.raises(error, match=cpu_text):
        fn(w.clone(), bad)  # what the CPU raises
    text = cpu_text.replace("index 10 is ", "")  # the device check does not print the index
    with pytest.raises(error, match=rf"^{op}: .*{text}"):
        fn(w.to("neuron"), bad.to("neuron"))
    assert track.get_executed_ops().get(op) == 1
    ok = torch.tensor([9])
    torch.testing.assert_close(fn(w.to("neuron"), ok.to("neuron")).cpu(), fn(w.clone(), ok), rtol=0, atol=0)
    assert track.get_executed_ops().get(op) == 2
