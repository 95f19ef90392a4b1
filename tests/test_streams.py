"""Streams and events on neuron, against PyTorch's documented CUDA semantics (the CPU has none):
work on one stream completes in order, waiting on an event orders across streams, a stream context
makes a stream current, timing events measure the work between them; results equal the CPU's."""
import time

import pytest
import torch

HEAVY = 1536  # a chain of these matmuls runs for a good fraction of a second on two cores


@pytest.fixture(scope="module")
def heavy():
    x = torch.randn(HEAVY, HEAVY) / HEAVY**0.5
    xn = x.to("neuron")
    (xn @ xn).cpu()  # compiled once, outside the timed parts

    def run():
        y = xn
        for _ in range(5):
            y = y @ xn
        return y

    return x, xn, run


def _poll(first, then, seconds=30.0):
    """Query `then` and `first` in turn until `then` completes; returns (polls, whether `then`
    was ever seen complete while `first` was not)."""
    polls, violated = 0, False
    deadline = time.monotonic() + seconds
    while not then.query():
        polls += 1
        assert time.monotonic() < deadline, "the event never completed"
        time.sleep(0.002)
    violated = not first.query()  # `then` is complete: `first` must be too
    return polls, violated


def test_stream_api_shapes():
    s = torch.neuron.Stream()
    assert isinstance(s, torch.Stream) and s.device == torch.device("neuron", 0)
    assert s != torch.neuron.default_stream() and torch.neuron.current_stream() == torch.neuron.default_stream()
    with torch.neuron.stream(s):
        assert torch.neuron.current_stream() == s == torch.accelerator.current_stream()
    assert torch.neuron.current_stream() == torch.neuron.default_stream()
    torch.neuron.set_stream(s)
    try:
        assert torch.neuron.current_stream() == s
    finally:
        torch.neuron.set_stream(torch.neuron.default_stream())
    other = torch.neuron.Stream(device="neuron:1")
    assert other.device_index == 1
    with torch.neuron.stream(other):  # as CUDA's: the stream's device becomes current too
        assert torch.neuron.current_device() == 1 and torch.neuron.current_stream(1) == other
    assert torch.neuron.current_device() == 0
    assert s.query() and torch.neuron.Event().query()  # nothing launched, nothing recorded
    with pytest.raises(RuntimeError, match="interprocess"):
        torch.neuron.Event(interprocess=True)


def test_work_on_one_stream_completes_in_order(heavy):
    x, xn, run = heavy
    s = torch.neuron.Stream()
    small = torch.ones(4, device="neuron")
    with torch.neuron.stream(s):
        y = run()
        first = s.record_event()
        z = small + 1  # independent of y: only the stream orders it after y
        then = s.record_event()
    polls, violated = _poll(first, then)
    assert polls > 0, "the heavy work finished before it could be observed: the test proves nothing"
    assert not violated, "an event completed before an earlier event on its stream"
    assert s.query()
    torch.testing.assert_close(y.cpu(), torch.linalg.matrix_power(x, 6), rtol=1e-4, atol=1e-4)
    assert z.cpu().tolist() == [2.0] * 4


def test_waiting_on_an_event_orders_across_streams(heavy):
    x, xn, run = heavy
    producer, consumer = torch.neuron.Stream(), torch.neuron.Stream()
    small = torch.ones(4, device="neuron")
    with torch.neuron.stream(producer):
        y = run()
        produced = producer.record_event()
    consumer.wait_event(produced)
    with torch.neuron.stream(consumer):
        z = small * 3
        consumed = consumer.record_event()
    assert not consumer.query() or produced.query()
    polls, violated = _poll(produced, consumed)
    assert polls > 0, "the heavy work finished before it could be observed: the test proves nothing"
    assert not violated, "work after wait_event completed before the event it waited on"
    # wait_stream orders the default stream after everything launched on `producer` so far
    with torch.neuron.stream(producer):
        w = run()
    torch.neuron.current_stream().wait_stream(producer)
    after = torch.neuron.current_stream().record_event()
    after.synchronize()
    assert producer.query()
    torch.testing.assert_close(w.cpu(), y.cpu())
    assert z.cpu().tolist() == [3.0] * 4


def test_stream_synchronize_waits_for_its_work(heavy):
    _, _, run = heavy
    s = torch.neuron.Stream()
    with torch.neuron.stream(s):
        y = run()  # held: a result nobody holds is never computed when fused
        e = torch.neuron.Event()
        e.record()
    assert not s.query(), "the heavy work finished before it could be observed"
    s.synchronize()
    assert s.query() and e.query()


def test_elapsed_time_measures_the_work_between(heavy):
    _, _, run = heavy
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    run()
    end.record()
    end.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1e3
    ms = start.elapsed_time(end)
    assert 0 < ms <= wall_ms + 1.0
    assert ms > 0.2 * wall_ms, f"{ms:.1f} ms of {wall_ms:.1f} ms: the stamp missed the work"
    untimed = torch.neuron.Event()
    untimed.record()
    with pytest.raises(ValueError, match="enable_timing=True"):
        start.elapsed_time(untimed)
    with pytest.raises(RuntimeError, match="Both events must be recorded"):
        start.elapsed_time(torch.neuron.Event(enable_timing=True))


def test_generic_torch_event_and_stream():
    s = torch.Stream(device="neuron")
    e = torch.Event(device="neuron", enable_timing=True)
    a = torch.arange(6.0, device="neuron")
    with s:
        b = a * 2
        e.record(s)
    e.synchronize()
    assert e.query() and s.query()
    torch.accelerator.synchronize()
    assert b.cpu().tolist() == (torch.arange(6.0) * 2).tolist()


def test_record_stream():
    s = torch.neuron.Stream()
    t = torch.randn(8, device="neuron")
    with torch.neuron.stream(s):
        u = t * 2
    t.record_stream(s)
    del t  # the buffer work on `s` reads stays alive for it
    s.synchronize()
    assert u.shape == (8,)
    wrong = torch.neuron.Stream(device="neuron:1")
    with pytest.raises(RuntimeError, match="neuron:0 but the stream is on neuron:1"):
        torch.ones(2, device="neuron:0").record_stream(wrong)


@pytest.fixture(scope="module")
def flux_transformer():
    from diffusers import Flux2Transformer2DModel

    torch.manual_seed(0)
    model = Flux2Transformer2DModel(
        patch_size=1, in_channels=16, num_layers=1, num_single_layers=2, attention_head_dim=32,
        num_attention_heads=2, joint_attention_dim=64, timestep_guidance_channels=32,
        axes_dims_rope=(8, 8, 8, 8)).eval()
    g = torch.Generator().manual_seed(1)
    img_ids = torch.zeros(16, 4)
    img_ids[:, 1], img_ids[:, 2] = torch.arange(16) // 4, torch.arange(16) % 4
    txt_ids = torch.zeros(8, 4)
    txt_ids[:, 3] = torch.arange(8)
    inputs = dict(hidden_states=torch.randn(1, 16, 16, generator=g),
                  encoder_hidden_states=torch.randn(1, 8, 64, generator=g), timestep=torch.tensor([0.5]),
                  guidance=torch.tensor([3.5]), img_ids=img_ids, txt_ids=txt_ids, return_dict=False)
    with torch.no_grad():
        ref = model(**inputs)[0]
    return model, inputs, ref


@pytest.mark.parametrize("config", [
    dict(offload_type="block_level", num_blocks_per_group=1, use_stream=True),
    dict(offload_type="block_level", num_blocks_per_group=1, use_stream=True, record_stream=True),
    dict(offload_type="leaf_level", use_stream=True, low_cpu_mem_usage=True),
], ids=["block", "block-record_stream", "leaf-low_cpu_mem"])
def test_diffusers_group_offloading_with_streams(flux_transformer, config):
    """diffusers' group offloading on neuron with streams: its stream check, pinned copies, record_stream
    and `param.data = neuron_tensor`; the output equals the CPU's and the weights go back to the CPU."""
    import copy

    from diffusers.hooks.group_offloading import apply_group_offloading

    model, inputs, ref = flux_transformer
    model = copy.deepcopy(model)
    apply_group_offloading(model, onload_device=torch.device("neuron"), **config)
    on_device = {k: v.to("neuron") if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    with torch.no_grad():
        for _ in range(2):  # the second pass runs on what the first one's prefetching left
            out = model(**on_device)[0]
            torch.testing.assert_close(out.cpu(), ref, rtol=1e-4, atol=1e-5)
    assert all(p.device.type == "cpu" for p in model.parameters())


def test_in_place_work_and_many_launches_on_a_stream():
    # an in-place op donates its input buffer: events over donated launches still complete
    s = torch.neuron.Stream()
    t = torch.zeros(16, device="neuron")
    with torch.neuron.stream(s):
        for _ in range(600):  # past the point where a stream's launch list is cleaned
            t.add_(1)
        e = s.record_event()
    e.synchronize()
    assert e.query() and s.query()
    torch.neuron.synchronize()
    assert t.cpu().tolist() == [600.0] * 16


def test_timing_across_a_wait_and_a_synchronize(heavy):
    """end waits (through its stream) for start's work; synchronizing end must not stamp start late."""
    _, _, run = heavy
    s1, s2 = torch.neuron.Stream(), torch.neuron.Stream()
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    with torch.neuron.stream(s1):
        run()
        start.record()
        t0 = time.perf_counter()
        run()
    s2.wait_stream(s1)
    with torch.neuron.stream(s2):
        end.record()
    end.synchronize()
    second_ms = (time.perf_counter() - t0) * 1e3
    ms = start.elapsed_time(end)
    assert 0.2 * second_ms < ms <= second_ms + 1.0, (ms, second_ms)


def test_compiled_code_with_streams_and_events(heavy):
    """torch.compile(backend="neuron") of code that runs work under a stream and records, waits on
    and synchronizes events: Dynamo's stream ops run between the graph's executables, in graph order,
    and the work traced under `with s:` runs on `s` (its event does not complete before it)."""
    from torch_neuronx import metrics

    x, xn, _ = heavy
    s, e = torch.neuron.Stream(), torch.neuron.Event()

    def f(t):
        with s:
            y = t @ t
            y = y @ t
            y = y @ t
        e.record(s)
        torch.accelerator.current_stream().wait_event(e)
        return y + 1

    compiled = torch.compile(f, backend="neuron", fullgraph=True)
    ref = torch.linalg.matrix_power(x, 4) + 1
    torch.testing.assert_close(compiled(xn).cpu(), ref, rtol=1e-4, atol=1e-4)
    assert metrics.get_dynamo_metrics()["split_graphs"]  # cut at the stream ops
    out = compiled(xn)
    assert not e.query(), "the event on s completed before the work traced under `with s:`"
    assert torch.neuron.current_stream() == torch.neuron.default_stream()  # the call's stream is back
    e.synchronize()
    assert s.query()
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-4, atol=1e-4)
