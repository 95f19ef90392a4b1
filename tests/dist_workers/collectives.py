"""Every collective of the neuron process group against the same collective of a plain Gloo group.

Each check runs one function twice: on neuron tensors in the default (neuron) group, and on CPU
copies of the same inputs in a Gloo group. Where Gloo cannot give the reference (dtypes it lacks:
int16, uint16/32/64, float8; AVG on integers; non-contiguous views) it is computed by hand from
every rank's inputs, which each rank can build (`make` is deterministic per rank). A check records
{"kind", "got", "want"}: values (bit-exact encodings) or {"error", "type", "mro"}; each section
reports its checks as "checks/<section>" (and its seconds), and tests/test_distributed.py compares
them.
"""
from __future__ import annotations

import datetime
import time
import functools
import math
import operator
import warnings

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from distributed_harness import report

R = dist.ReduceOp
OPS = {"SUM": R.SUM, "AVG": R.AVG, "MIN": R.MIN, "MAX": R.MAX, "PRODUCT": R.PRODUCT,
       "BAND": R.BAND, "BOR": R.BOR, "BXOR": R.BXOR}
BITWISE = ("BAND", "BOR", "BXOR")
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int8, torch.uint8, torch.int16,
          torch.int32, torch.int64, torch.bool, torch.uint16, torch.uint32, torch.uint64, torch.float8_e4m3fn,
          torch.float8_e5m2, torch.complex64]
# what ProcessGroupGloo carries (the rest gets a hand-made reference)
GLOO = {torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int8, torch.uint8, torch.int32,
        torch.int64, torch.bool, torch.complex64}

dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=60))
RANK, WORLD = dist.get_rank(), dist.get_world_size()
GLOO_GROUP = dist.new_group(backend="gloo")
NEURON = torch.device("neuron", 0)
CPU = torch.device("cpu")
_last = [time.perf_counter()]


def section(name: str) -> None:
    """Report the seconds since the last section ended (what a slow launch spends its time on)."""
    now = time.perf_counter()
    report(f"checks/{name}", dict(_checks))
    report(f"seconds/{name}", now - _last[0])
    _checks.clear()
    _last[0] = now


def dname(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def make(dtype, shape, rank, salt=0) -> torch.Tensor:
    """Rank `rank`'s input: deterministic, different per rank and salt, exercising each dtype's range
    (unsigned values above the signed maximum, int16 sums that wrap)."""
    n = math.prod(shape)
    base = torch.arange(n, dtype=torch.int64) * 5 + 3 * rank + 7 * salt
    if dtype == torch.bool:
        t = (base % 3) == rank
    elif dtype.is_complex:
        t = torch.complex((base % 11 - 5) * 0.5, (base % 7 - 3) * 0.25).to(dtype)
    elif dtype.is_floating_point:
        t = ((base % 17 - 8) * 0.25 + 0.5 * rank + 0.125).to(dtype)
    else:
        info = torch.iinfo(dtype)
        if dtype == torch.uint64:  # python ints: torch has no int64 -> uint64 cast above 2**63
            vals = [(2 ** 63 if rank == 0 else 0) + int(v) % 1000 + 1 for v in base.tolist()]
            return torch.tensor(vals, dtype=dtype).reshape(shape)
        if info.min == 0:  # rank 0 near the top of the range, rank 1 near the bottom
            v = (base % 50 + 1) + (info.max - 60 if rank == 0 else 0)
        elif dtype == torch.int16:
            v = base % 9 * 3000 + (8000 if rank == 0 else 2001)  # sums past 32767 wrap (odd: AVG truncates)
        else:
            v = base % 23 - 11 + 20 * rank
        t = v.to(dtype)
    return t.reshape(shape)


def inputs_of_all(dtype, shape, salt=0):
    return [make(dtype, shape, r, salt) for r in range(WORLD)]


# -- reductions by hand -----------------------------------------------------------------------
def invalid(opname: str, dtype) -> bool:
    """A reduction that must raise (as it does on Gloo and CUDA)."""
    if dtype.is_complex:
        return opname not in ("SUM", "AVG")
    if dtype.is_floating_point:
        return opname in BITWISE
    return dtype == torch.bool and opname == "AVG"


def hand_reduce(opname: str, tensors: list) -> torch.Tensor:
    dtype, shape = tensors[0].dtype, tensors[0].shape
    n = len(tensors)
    if invalid(opname, dtype):
        raise RuntimeError(f"Cannot use ReduceOp.{opname} with {dtype}")
    if dtype.is_floating_point or dtype.is_complex:
        wide = torch.stack([t.to(torch.complex128 if dtype.is_complex else torch.float64) for t in tensors])
        out = {"SUM": lambda: wide.sum(0), "AVG": lambda: wide.sum(0) / n, "PRODUCT": lambda: wide.prod(0),
               "MIN": lambda: wide.min(0).values, "MAX": lambda: wide.max(0).values}[opname]()
        return out.to(dtype)
    if dtype == torch.bool:
        stack = torch.stack(tensors)
        return {"SUM": stack.any(0), "MAX": stack.any(0), "BOR": stack.any(0), "MIN": stack.all(0),
                "PRODUCT": stack.all(0), "BAND": stack.all(0), "BXOR": stack.sum(0) % 2 == 1}[opname]
    # integers: exact Python arithmetic, wrapped to the dtype's width like the hardware's
    bits = dtype.itemsize * 8

    def wrap(v):
        v %= 1 << bits
        return v - (1 << bits) if dtype.is_signed and v >= 1 << (bits - 1) else v

    def avg(vs):
        s = wrap(sum(vs))  # as CUDA: the sum wraps in the dtype, then divides, truncating
        return (abs(s) // n) * (1 if s >= 0 else -1)

    f = {"SUM": sum, "PRODUCT": math.prod, "MIN": min, "MAX": max, "AVG": avg,
         "BAND": lambda vs: functools.reduce(operator.and_, vs), "BOR": lambda vs: functools.reduce(operator.or_, vs),
         "BXOR": lambda vs: functools.reduce(operator.xor, vs)}[opname]
    out = [wrap(f(column)) for column in zip(*[t.reshape(-1).tolist() for t in tensors])]
    return torch.tensor(out, dtype=dtype).reshape(shape)


# -- checks -------------------------------------------------------------------------------------
def enc(x):
    """A JSON-able, bit-exact picture of a tensor or a (nested) list of them."""
    if isinstance(x, (list, tuple)):
        return [enc(v) for v in x]
    if x is None:
        return None
    t = x.detach().to(CPU)
    if t.is_complex():
        vals = torch.view_as_real(t).to(torch.float64).reshape(-1).tolist()
    elif t.is_floating_point():
        vals = t.to(torch.float64).reshape(-1).tolist()  # exact for every float dtype here
    else:
        vals = t.reshape(-1).tolist()
    return {"dtype": dname(t.dtype), "shape": list(t.shape), "device": x.device.type, "values": vals}


def outcome(fn):
    try:
        return enc(fn())
    except Exception as e:  # the test decides whether an error was expected
        return {"error": str(e).strip().splitlines()[-1] if str(e).strip() else "", "type": type(e).__name__,
                "mro": [c.__name__ for c in type(e).__mro__]}


_checks: dict = {}


def check(name: str, kind: str, got, want) -> None:
    """kind: 'move' (bit-exact), 'reduce' (exact for integers, dtype tolerance for floats), 'error'.
    Reported with the section's other checks (one write per section, not per check)."""
    _checks[name] = {"kind": kind, "got": outcome(got), "want": outcome(want)}


def side_by_side(name, kind, fn, hand=None, use_gloo=True):
    """fn(device, group) on neuron in the neuron group vs on CPU in Gloo (or `hand()`)."""
    want = (lambda: fn(CPU, GLOO_GROUP)) if use_gloo and hand is None else hand
    check(name, kind, lambda: fn(NEURON, dist.group.WORLD), want)


def dev(t, device):
    return t.to(device)


# -- all_reduce: every dtype x every op -----------------------------------------------------------
SHAPE = (2, 3)
for dtype in DTYPES:
    for opname, op in OPS.items():
        def fn(device, group, dtype=dtype, op=op):
            t = dev(make(dtype, SHAPE, RANK), device)
            dist.all_reduce(t, op=op, group=group)
            return t
        hand_ok = dtype not in GLOO or (opname == "AVG" and not (dtype.is_floating_point or dtype.is_complex))
        hand = (lambda dtype=dtype, opname=opname: hand_reduce(opname, inputs_of_all(dtype, SHAPE))) if hand_ok else None
        kind = "error" if invalid(opname, dtype) else "reduce"
        side_by_side(f"all_reduce/{opname}/{dname(dtype)}", kind, fn, hand)


section("all_reduce")


# -- reduce_scatter_tensor, reduce_scatter (list), reduce: every dtype with SUM, more ops on some ----
def reduce_cases():
    for dtype in DTYPES:
        yield dtype, "SUM"
    for dtype in (torch.float32, torch.bfloat16, torch.int16, torch.uint64, torch.float8_e4m3fn):
        for opname in ("AVG", "MAX", "MIN", "PRODUCT"):
            yield dtype, opname
    for dtype in (torch.int32, torch.uint16):
        yield dtype, "BXOR"
    # errors
    yield from ((torch.float32, "BAND"), (torch.bfloat16, "BOR"), (torch.complex64, "MAX"), (torch.complex64, "PRODUCT"),
                (torch.bool, "AVG"))


for dtype, opname in reduce_cases():
    op = OPS[opname]
    kind = "error" if invalid(opname, dtype) else "reduce"
    hand_ok = dtype not in GLOO or (opname == "AVG" and not dtype.is_floating_point) or kind == "error"
    chunk = (2, 3)

    def rs_tensor(device, group, dtype=dtype, op=op):
        out = torch.empty(chunk, dtype=dtype, device=device)
        dist.reduce_scatter_tensor(out, dev(make(dtype, (WORLD * 2, 3), RANK), device), op=op, group=group)
        return out

    def rs_hand(dtype=dtype, opname=opname):
        return hand_reduce(opname, inputs_of_all(dtype, (WORLD * 2, 3)))[RANK * 2:RANK * 2 + 2]

    side_by_side(f"reduce_scatter_tensor/{opname}/{dname(dtype)}", kind, rs_tensor, rs_hand if hand_ok else None)

    def rs_stacked(device, group, dtype=dtype, op=op):
        out = torch.empty(chunk, dtype=dtype, device=device)
        dist.reduce_scatter_tensor(out, dev(make(dtype, (WORLD, *chunk), RANK), device), op=op, group=group)
        return out

    def rs_stacked_hand(dtype=dtype, opname=opname):
        return hand_reduce(opname, inputs_of_all(dtype, (WORLD, *chunk)))[RANK]

    # Gloo takes only the concatenated form (CUDA also the stacked one): by hand
    side_by_side(f"reduce_scatter_tensor/stacked/{opname}/{dname(dtype)}", kind, rs_stacked, rs_stacked_hand)

    def rs_list(device, group, dtype=dtype, op=op):
        out = torch.empty(chunk, dtype=dtype, device=device)
        ins = [dev(make(dtype, chunk, RANK, salt=j), device) for j in range(WORLD)]
        dist.reduce_scatter(out, ins, op=op, group=group)
        return out

    def rs_list_hand(dtype=dtype, opname=opname):
        return hand_reduce(opname, [make(dtype, chunk, r, salt=RANK) for r in range(WORLD)])

    # Gloo has no list reduce_scatter: the reference is always by hand
    side_by_side(f"reduce_scatter/{opname}/{dname(dtype)}", kind, rs_list, rs_list_hand)

    for root in range(WORLD):
        def red(device, group, dtype=dtype, op=op, root=root):
            t = dev(make(dtype, chunk, RANK), device)
            dist.reduce(t, dst=root, op=op, group=group)
            return t

        def red_hand(dtype=dtype, opname=opname, root=root):
            # the root gets the reduction; the others keep their input (as with NCCL)
            reduced = hand_reduce(opname, inputs_of_all(dtype, chunk))
            return reduced if RANK == root else make(dtype, chunk, RANK)

        side_by_side(f"reduce/root{root}/{opname}/{dname(dtype)}", kind, red, red_hand)


section("reductions")


# -- moves: every dtype ------------------------------------------------------------------------
def uneven(rank):
    """all_to_all_single split sizes: rank `rank` sends rank + j + 1 rows to rank j."""
    return [rank + j + 1 for j in range(WORLD)]


for dtype in DTYPES:
    n = dname(dtype)
    gl = dtype in GLOO

    for root in range(WORLD):
        def bcast(device, group, dtype=dtype, root=root):
            t = dev(make(dtype, SHAPE, RANK), device)
            dist.broadcast(t, src=root, group=group)
            return t
        side_by_side(f"broadcast/root{root}/{n}", "move", bcast,
                     None if gl else (lambda dtype=dtype, root=root: make(dtype, SHAPE, root)))

    def ag_list(device, group, dtype=dtype):
        outs = [torch.empty(SHAPE, dtype=dtype, device=device) for _ in range(WORLD)]
        dist.all_gather(outs, dev(make(dtype, SHAPE, RANK), device), group=group)
        return outs
    side_by_side(f"all_gather/{n}", "move", ag_list, None if gl else (lambda dtype=dtype: inputs_of_all(dtype, SHAPE)))

    def ag_tensor(device, group, dtype=dtype):
        out = torch.empty((WORLD * 2, 3), dtype=dtype, device=device)
        dist.all_gather_into_tensor(out, dev(make(dtype, SHAPE, RANK), device), group=group)
        return out
    side_by_side(f"all_gather_into_tensor/{n}", "move", ag_tensor,
                 None if gl else (lambda dtype=dtype: torch.cat(inputs_of_all(dtype, SHAPE))))

    def ag_stacked(device, group, dtype=dtype):
        out = torch.empty((WORLD, *SHAPE), dtype=dtype, device=device)
        dist.all_gather_into_tensor(out, dev(make(dtype, SHAPE, RANK), device), group=group)
        return out
    # Gloo takes only the concatenated form (CUDA also the stacked one): by hand
    side_by_side(f"all_gather_into_tensor/stacked/{n}", "move", ag_stacked,
                 lambda dtype=dtype: torch.stack(inputs_of_all(dtype, SHAPE)))

    def a2a_even(device, group, dtype=dtype):
        out = torch.empty((WORLD * 2, 3), dtype=dtype, device=device)
        dist.all_to_all_single(out, dev(make(dtype, (WORLD * 2, 3), RANK), device), group=group)
        return out

    def a2a_even_hand(dtype=dtype):
        return torch.cat([make(dtype, (WORLD * 2, 3), r)[RANK * 2:RANK * 2 + 2] for r in range(WORLD)])
    side_by_side(f"all_to_all_single/even/{n}", "move", a2a_even, None if gl else a2a_even_hand)

    def a2a_uneven(device, group, dtype=dtype):
        ins, outs = uneven(RANK), [uneven(j)[RANK] for j in range(WORLD)]
        out = torch.empty((sum(outs), 2), dtype=dtype, device=device)
        dist.all_to_all_single(out, dev(make(dtype, (sum(ins), 2), RANK), device), outs, ins, group=group)
        return out

    def a2a_uneven_hand(dtype=dtype):
        parts = []
        for r in range(WORLD):
            splits = uneven(r)
            start = sum(splits[:RANK])
            parts.append(make(dtype, (sum(splits), 2), r)[start:start + splits[RANK]])
        return torch.cat(parts)
    side_by_side(f"all_to_all_single/uneven/{n}", "move", a2a_uneven, None if gl else a2a_uneven_hand)

    def a2a_list(device, group, dtype=dtype, rows=lambda src, dst: 2):
        ins = [dev(make(dtype, (rows(RANK, j), 2), RANK, salt=j), device) for j in range(WORLD)]
        outs = [torch.empty((rows(j, RANK), 2), dtype=dtype, device=device) for j in range(WORLD)]
        dist.all_to_all(outs, ins, group=group)
        return outs

    def a2a_list_hand(dtype=dtype, rows=lambda src, dst: 2):
        return [make(dtype, (rows(j, RANK), 2), j, salt=RANK) for j in range(WORLD)]
    side_by_side(f"all_to_all/even/{n}", "move", a2a_list, None if gl else a2a_list_hand)
    # Gloo's list all_to_all takes one shape only (CUDA's any): by hand
    side_by_side(f"all_to_all/uneven/{n}", "move", functools.partial(a2a_list, rows=lambda src, dst: src + dst + 1),
                 functools.partial(a2a_list_hand, rows=lambda src, dst: src + dst + 1))

    for root in range(WORLD):
        def gather(device, group, dtype=dtype, root=root):
            outs = [torch.empty(SHAPE, dtype=dtype, device=device) for _ in range(WORLD)] if RANK == root else None
            dist.gather(dev(make(dtype, SHAPE, RANK), device), outs, dst=root, group=group)
            return outs or []
        # Gloo's gather has no complex
        side_by_side(f"gather/root{root}/{n}", "move", gather,
                     None if gl and not dtype.is_complex else
                     (lambda dtype=dtype, root=root: inputs_of_all(dtype, SHAPE) if RANK == root else []))

        def scatter(device, group, dtype=dtype, root=root):
            out = torch.empty(SHAPE, dtype=dtype, device=device)
            ins = [dev(make(dtype, SHAPE, RANK, salt=j), device) for j in range(WORLD)] if RANK == root else None
            dist.scatter(out, ins, src=root, group=group)
            return out
        side_by_side(f"scatter/root{root}/{n}", "move", scatter,
                     None if gl else (lambda dtype=dtype, root=root: make(dtype, SHAPE, root, salt=RANK)))

    def sendrecv(device, group, dtype=dtype):
        # rank 0 sends first, rank 1 receives first; then the other way
        mine, got = dev(make(dtype, SHAPE, RANK), device), torch.empty(SHAPE, dtype=dtype, device=device)
        peer = 1 - RANK
        for step in range(2):
            if (RANK == 0) == (step == 0):
                dist.send(mine, dst=peer, group=group)
            else:
                dist.recv(got, src=peer, group=group)
        return got
    side_by_side(f"send_recv/{n}", "move", sendrecv, None if gl else (lambda dtype=dtype: make(dtype, SHAPE, 1 - RANK)))

    def isend_irecv(device, group, dtype=dtype):
        mine, got = dev(make(dtype, SHAPE, RANK, salt=1), device), torch.empty(SHAPE, dtype=dtype, device=device)
        works = [dist.isend(mine, dst=1 - RANK, group=group), dist.irecv(got, src=1 - RANK, group=group)]
        for w in works:
            w.wait()
        return got
    side_by_side(f"isend_irecv/{n}", "move", isend_irecv,
                 None if gl else (lambda dtype=dtype: make(dtype, SHAPE, 1 - RANK, salt=1)))


section("moves")


def batch_p2p(device, group):
    mine = dev(make(torch.float32, SHAPE, RANK, salt=2), device)
    got = torch.empty(SHAPE, dtype=torch.float32, device=device)
    ops = [dist.P2POp(dist.isend, mine, 1 - RANK, group), dist.P2POp(dist.irecv, got, 1 - RANK, group)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    return got


side_by_side("batch_isend_irecv/float32", "move", batch_p2p)


def recv_anysource(device, group):
    """Rank 0 sends, rank 1 receives from whoever sends (and learns who it was)."""
    mine = dev(make(torch.float32, SHAPE, RANK, salt=3), device)
    if RANK == 0:
        dist.send(mine, dst=1, group=group)
        return [mine, torch.tensor([-1], device=device)]
    got = torch.empty(SHAPE, device=device)
    sender = dist.recv(got, group=group)
    return [got, torch.tensor([sender], device=device)]


side_by_side("recv_anysource/float32", "move", recv_anysource)


# -- barrier -------------------------------------------------------------------------------------
def barrier(device, group):
    t = dev(make(torch.float32, SHAPE, RANK), device) * 2  # queued device work the barrier waits for
    sync = dist.barrier(group=group)
    w = dist.barrier(group=group, async_op=True)
    return [t, torch.tensor([sync is None, bool(w.wait()), w.is_completed()], device=device)]


side_by_side("barrier", "move", barrier)


section("p2p_barrier")


# -- coalesced forms -----------------------------------------------------------------------------
def coalesced_inputs(device, dtype=torch.float32):
    return [dev(make(dtype, (2, 3), RANK), device), dev(make(dtype, (5,), RANK, salt=1), device)]


def ar_coalesced(device, group):
    ts = coalesced_inputs(device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # deprecated in favour of all_reduce, still used
        dist.all_reduce_coalesced(ts, op=R.SUM, group=group)
    return ts


side_by_side("all_reduce_coalesced/SUM/float32", "reduce", ar_coalesced)


def cm_all_reduce(device, group, dtype=torch.float32, op=R.SUM):
    ts = coalesced_inputs(device, dtype)
    with dist._coalescing_manager(group=group, async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t, op=op, group=group)
    cm.wait()
    return ts


side_by_side("coalescing_manager/all_reduce/float32", "reduce", cm_all_reduce)
check("coalescing_manager/all_reduce_avg/bfloat16", "reduce",
      lambda: cm_all_reduce(NEURON, dist.group.WORLD, torch.bfloat16, R.AVG),
      lambda: [hand_reduce("AVG", [make(torch.bfloat16, (2, 3), r) for r in range(WORLD)]),
               hand_reduce("AVG", [make(torch.bfloat16, (5,), r, salt=1) for r in range(WORLD)])])


def coalesced(collective, outs, ins, group):
    """`collective(out, in)` for each pair inside one _coalescing_manager; waits; the outputs."""
    with dist._coalescing_manager(group=group, async_ops=True) as cm:
        for o, i in zip(outs, ins):
            collective(o, i, group=group)
    cm.wait()
    return outs


def cm_all_gather(device, group):
    ins = coalesced_inputs(device)
    outs = [torch.empty((WORLD * t.shape[0], *t.shape[1:]), dtype=t.dtype, device=device) for t in ins]
    return coalesced(dist.all_gather_into_tensor, outs, ins, group)


def cm_all_gather_hand():
    return [torch.cat([make(torch.float32, (2, 3), r) for r in range(WORLD)]),
            torch.cat([make(torch.float32, (5,), r, salt=1) for r in range(WORLD)])]


# Gloo has no all_gather_into_tensor_coalesced: by hand
side_by_side("coalescing_manager/all_gather_into_tensor/float32", "move", cm_all_gather, cm_all_gather_hand)


def cm_reduce_scatter(device, group):
    ins = [dev(make(torch.float32, (WORLD * 2, 3), RANK), device), dev(make(torch.float32, (WORLD * 3,), RANK, salt=1), device)]
    outs = [torch.empty((t.shape[0] // WORLD, *t.shape[1:]), device=device) for t in ins]
    return coalesced(dist.reduce_scatter_tensor, outs, ins, group)


def cm_reduce_scatter_hand():
    a = hand_reduce("SUM", [make(torch.float32, (WORLD * 2, 3), r) for r in range(WORLD)])
    b = hand_reduce("SUM", [make(torch.float32, (WORLD * 3,), r, salt=1) for r in range(WORLD)])
    return [a[RANK * 2:RANK * 2 + 2], b[RANK * 3:RANK * 3 + 3]]


side_by_side("coalescing_manager/reduce_scatter_tensor/float32", "reduce", cm_reduce_scatter, cm_reduce_scatter_hand)


def funcol_coalesced(device, group):
    ins = coalesced_inputs(device)
    gathered = funcol.all_gather_into_tensor_coalesced(ins, group)
    scattered = funcol.reduce_scatter_tensor_coalesced(
        [dev(make(torch.float32, (WORLD * 2, 3), RANK), device)], "sum", [0], group)
    reduced = funcol.all_reduce_coalesced(coalesced_inputs(device), "sum", group)
    return [funcol.wait_tensor(t) for t in [*gathered, *scattered, *reduced]]


side_by_side("functional/coalesced/float32", "reduce", funcol_coalesced,
             lambda: [*cm_all_gather_hand(), cm_reduce_scatter_hand()[0],
                      *[hand_reduce("SUM", [t for t in ts]) for ts in zip(*[
                          [make(torch.float32, (2, 3), r), make(torch.float32, (5,), r, salt=1)] for r in range(WORLD)])]])


section("coalesced")


# -- async: wait(), get_future(), then() ------------------------------------------------------------
def async_ops(device, group, int_dtype=torch.int16):
    a = dev(make(torch.float32, SHAPE, RANK), device)
    w = dist.all_reduce(a, async_op=True, group=group)
    waited = w.wait()
    b = dev(make(torch.float32, SHAPE, RANK, salt=1), device)
    fut = dist.all_reduce(b, async_op=True, group=group).get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2).wait()  # a device op in Gloo's callback thread
    c = dev(make(int_dtype, SHAPE, RANK), device)
    fut_c = dist.all_reduce(c, op=R.MAX, async_op=True, group=group).get_future()
    from_future = fut_c.wait()[0]
    d = [torch.empty(SHAPE, device=device) for _ in range(WORLD)]
    w_d = dist.all_gather(d, dev(make(torch.float32, SHAPE, RANK, salt=2), device), async_op=True, group=group)
    gathered = w_d.get_future().wait()
    return [a, b, doubled, from_future, c, d, gathered[0],
            torch.tensor([bool(waited), w.is_completed(), w.is_success(), fut.done()], device=device)]


def async_hand():
    f32 = lambda salt: [make(torch.float32, SHAPE, r, salt) for r in range(WORLD)]  # noqa: E731
    b = hand_reduce("SUM", f32(1))
    c = hand_reduce("MAX", inputs_of_all(torch.int16, SHAPE))
    return [hand_reduce("SUM", f32(0)), b, b * 2, c, c, f32(2), f32(2)[0], torch.tensor([True] * 4)]


side_by_side("async", "reduce", functools.partial(async_ops, int_dtype=torch.int32))
check("async/hand", "reduce", lambda: async_ops(NEURON, dist.group.WORLD), async_hand)

section("async")


# -- stream order: Gloo works on the device buffers themselves -------------------------------------------
def stream_order(device, group):
    """Reads and writes around collectives in flight, issued without waiting: a read or write issued
    before sees the old values, one issued after sees (and lands after) the result; a write after a
    collective that reads a tensor is not seen by it. 16 MB, so that Gloo is still at work when the
    ops after it run (each forced to run at once by a host read of another tensor, and compiled
    beforehand: the first round only compiles)."""
    stream_order_round(device, group)
    return stream_order_round(device, group)


def stream_order_round(device, group):
    n = 1 << 22
    x = dev(make(torch.float32, (n,), RANK), device)
    before = x * 2  # queued before the collective: the old values
    w = dist.all_reduce(x, async_op=True, group=group)
    after = x + 0  # issued after, before wait(): the result
    after.sum().item()
    x.add_(1)  # lands after the result
    x.sum().item()
    w.wait()
    src = dev(make(torch.float32, (n,), RANK, 1), device)
    gathered = torch.empty(WORLD * n, device=device)
    w2 = dist.all_gather_into_tensor(gathered, src, async_op=True, group=group)
    src.mul_(10)  # not seen by the gather
    src.sum().item()
    w2.wait()
    y = dev(make(torch.bfloat16, (n,), RANK, 2), device)
    fut = dist.all_reduce(y, op=R.AVG, async_op=True, group=group).get_future()
    y_after = y.float()  # waits for the future's averaging too
    fut.wait()
    return [summary(t) for t in (before, after, x, gathered, src, y_after, y)]


def summary(t):
    """A long tensor's ends and its sum in float64 (a partial write shows in the sum)."""
    t = t.detach()
    return [t[:8], t[-8:], t.to(torch.float64).sum().reshape(1)]


def stream_order_hand():
    n = 1 << 22
    f32 = lambda salt: [make(torch.float32, (n,), r, salt) for r in range(WORLD)]  # noqa: E731
    total = hand_reduce("SUM", f32(0))
    y = hand_reduce("AVG", [make(torch.bfloat16, (n,), r, 2) for r in range(WORLD)])
    return [summary(t) for t in (make(torch.float32, (n,), RANK) * 2, total, total + 1, torch.cat(f32(1)),
                                 f32(1)[RANK] * 10, y.float(), y)]


check("stream_order", "reduce", lambda: stream_order(NEURON, dist.group.WORLD), stream_order_hand)


def host_bytes_read(device, group):
    """The bytes copied to the host by collectives on whole device tensors of 1 MB (none where the
    device buffer is host memory), and their results."""
    import torch_neuronx

    n = 1 << 18
    a = dev(make(torch.float32, (n,), RANK), device)
    b = dev(make(torch.float32, (n,), RANK, 1), device)
    src = dev(make(torch.float32, (n,), RANK, 2), device)
    gathered = torch.empty(WORLD * n, device=device)
    scattered = torch.empty(n // WORLD, device=device)
    for t in (a, b, src, gathered, scattered):
        t.cpu()  # computed before counting
    start = torch_neuronx.metrics.host_reads()["bytes"]
    dist.all_reduce(a, group=group)
    dist.broadcast(b, src=1, group=group)
    dist.all_gather_into_tensor(gathered, src, group=group)
    dist.reduce_scatter_tensor(scattered, src, group=group)
    read = torch_neuronx.metrics.host_reads()["bytes"] - start
    report(f"host_bytes_read/{RANK}", read)
    return [a[:8], b[:8], gathered[n - 4:n + 4], scattered[:8]]


def no_copies_hand():
    n = 1 << 18
    every = lambda salt: [make(torch.float32, (n,), r, salt) for r in range(WORLD)]  # noqa: E731
    scattered = hand_reduce("SUM", every(2))[RANK * (n // WORLD):(RANK + 1) * (n // WORLD)]
    return [hand_reduce("SUM", every(0))[:8], make(torch.float32, (n,), 1, 1)[:8], torch.cat(every(2))[n - 4:n + 4],
            scattered[:8]]


check("no_copies", "reduce", lambda: host_bytes_read(NEURON, dist.group.WORLD), no_copies_hand)


section("stream_order")


# -- subgroups -------------------------------------------------------------------------------------
PAIR = dist.new_group([0, 1])
PAIR_GLOO = dist.new_group([0, 1], backend="gloo")
SINGLES = [dist.new_group([r]) for r in range(WORLD)]
SINGLES_GLOO = [dist.new_group([r], backend="gloo") for r in range(WORLD)]
report("subgroup/backends", [dist.get_backend(PAIR), dist.get_backend(SINGLES[RANK]), dist.get_backend(GLOO_GROUP)])


def subgroup(device, group):
    pair, single = (PAIR, SINGLES[RANK]) if device == NEURON else (PAIR_GLOO, SINGLES_GLOO[RANK])
    a = dev(make(torch.float32, SHAPE, RANK), device)
    dist.all_reduce(a, group=pair)
    b = dev(make(torch.int16, SHAPE, RANK), device)
    dist.all_reduce(b, op=R.MIN, group=pair)
    c = dev(make(torch.float32, SHAPE, RANK, salt=1), device)
    dist.all_reduce(c, group=single)
    d = dev(make(torch.bfloat16, SHAPE, RANK), device)
    dist.all_reduce(d, op=R.AVG, group=single)
    e = dev(make(torch.float32, SHAPE, RANK, salt=2), device)
    dist.broadcast(e, src=RANK, group=single)
    f = [torch.empty(SHAPE, device=device)]
    dist.all_gather(f, dev(make(torch.float32, SHAPE, RANK, salt=3), device), group=single)
    g = torch.empty((2, 3), device=device)
    dist.all_gather_into_tensor(g, dev(make(torch.float32, SHAPE, RANK, salt=4), device), group=single)
    w = dist.all_reduce(dev(make(torch.float32, SHAPE, RANK), device), group=single, async_op=True)
    return [a, b, c, d, e, f, g, torch.tensor([bool(w.wait()), w.is_completed()], device=device)]


def subgroup_hand():
    m = lambda dt, salt=0: make(dt, SHAPE, RANK, salt)  # noqa: E731
    return [hand_reduce("SUM", inputs_of_all(torch.float32, SHAPE)), hand_reduce("MIN", inputs_of_all(torch.int16, SHAPE)),
            m(torch.float32, 1), m(torch.bfloat16), m(torch.float32, 2), [m(torch.float32, 3)], m(torch.float32, 4),
            torch.tensor([True, True])]


check("subgroup", "reduce", lambda: subgroup(NEURON, None), subgroup_hand)  # Gloo: no int16, no AVG on one rank


def subgroup_gloo_dtypes(device, group):
    pair = PAIR if device == NEURON else PAIR_GLOO
    a = dev(make(torch.float32, SHAPE, RANK), device)
    dist.all_reduce(a, op=R.MAX, group=pair)
    b = [torch.empty(SHAPE, dtype=torch.int32, device=device) for _ in range(WORLD)]
    dist.all_gather(b, dev(make(torch.int32, SHAPE, RANK), device), group=pair)
    return [a, b]


side_by_side("subgroup/gloo", "reduce", subgroup_gloo_dtypes)


section("subgroups")


# -- functional collectives ------------------------------------------------------------------------------
def functional(device, group, dtype=torch.float32):
    x = lambda salt, shape=SHAPE: dev(make(dtype, shape, RANK, salt), device)  # noqa: E731
    out = [
        funcol.all_reduce(x(0), "sum", group),
        funcol.all_reduce(x(1), "max", group),
        funcol.all_gather_tensor(x(2), 0, group),
        funcol.all_gather_tensor(x(3), 1, group),
        funcol.reduce_scatter_tensor(x(4, (WORLD * 2, 3)), "sum", 0, group),
        funcol.all_to_all_single(x(5, (WORLD * 2, 3)), None, None, group),
        funcol.all_to_all_single(x(6, (sum(uneven(RANK)), 2)), [uneven(j)[RANK] for j in range(WORLD)], uneven(RANK), group),
        funcol.broadcast(x(7), 1, group),
    ]
    name = group.group_name
    c10d = torch.ops._c10d_functional
    out.append(c10d.wait_tensor(c10d.all_reduce(x(8), "sum", name)))
    out.append(c10d.wait_tensor(c10d.all_gather_into_tensor(x(9), WORLD, name)))
    out.append(c10d.wait_tensor(c10d.reduce_scatter_tensor(x(10, (WORLD * 2, 3)), "sum", WORLD, name)))
    out.append(c10d.wait_tensor(c10d.all_to_all_single(x(11, (WORLD * 2, 3)), [2] * WORLD, [2] * WORLD, name)))
    out.append(c10d.wait_tensor(c10d.broadcast(x(12), 0, name)))
    inplace = x(13)
    c10d.wait_tensor(torch.ops._c10d_functional.all_reduce_(inplace, "sum", name))
    out.append(inplace)
    return [funcol.wait_tensor(t) for t in out]


side_by_side("functional/float32", "reduce", functional)
for dtype in (torch.bfloat16, torch.int64):
    side_by_side(f"functional/{dname(dtype)}", "reduce", functools.partial(functional, dtype=dtype))


def functional_hand(dtype):
    """functional() by hand, for the dtypes Gloo lacks and AVG (which the c10d ops spell "avg")."""
    ins = lambda salt, shape=SHAPE: [make(dtype, shape, r, salt) for r in range(WORLD)]  # noqa: E731
    return [hand_reduce("SUM", ins(0)), hand_reduce("AVG", ins(1)), torch.cat(ins(2)), torch.cat(ins(3), 1),
            hand_reduce("SUM", ins(4, (WORLD * 2, 3)))[RANK * 2:RANK * 2 + 2]]


def functional_odd(device, group, dtype):
    x = lambda salt, shape=SHAPE: dev(make(dtype, shape, RANK, salt), device)  # noqa: E731
    out = [funcol.all_reduce(x(0), "sum", group), funcol.all_reduce(x(1), "avg", group),
           funcol.all_gather_tensor(x(2), 0, group), funcol.all_gather_tensor(x(3), 1, group),
           funcol.reduce_scatter_tensor(x(4, (WORLD * 2, 3)), "sum", 0, group)]
    return [funcol.wait_tensor(t) for t in out]


for dtype in (torch.float32, torch.int16, torch.uint32, torch.float8_e5m2):
    check(f"functional/hand/{dname(dtype)}", "reduce",
          functools.partial(functional_odd, NEURON, dist.group.WORLD, dtype), functools.partial(functional_hand, dtype))


section("functional")


# -- views as inputs and outputs ---------------------------------------------------------------------
def big(dtype, device, salt=0):
    return dev(make(dtype, (4, 6), RANK, salt), device)


def views(device, dtype):
    b1 = big(dtype, device)
    dist.all_reduce(b1[:, 1:5:2])  # non-contiguous: only the view may change
    b2 = big(dtype, device, 1)
    dist.all_reduce(b2[1], op=R.MAX)  # an offset row
    b3 = big(dtype, device, 2)
    dist.broadcast(b3[::2, 3:], src=1)  # rank 0 receives into a strided view
    b4 = big(dtype, device, 3)
    dist.all_gather_into_tensor(b4[1:3, 1:4], big(dtype, device, 4)[2, :3])  # offset input, strided output
    b5 = big(dtype, device, 5)
    outs = [b5[0, :4], b5[2, 2:]]
    dist.all_gather(outs, big(dtype, device, 6)[:, 1])  # a column in, rows of a bigger tensor out
    b6 = big(dtype, device, 7)
    dist.reduce_scatter_tensor(b6[3, 1:4], big(dtype, device, 8)[1, : WORLD * 3])
    return [b1, b2, b3, b4, b5, b6]


def views_hand(dtype):
    every = lambda salt: [make(dtype, (4, 6), r, salt) for r in range(WORLD)]  # noqa: E731
    b1 = make(dtype, (4, 6), RANK)
    b1[:, 1:5:2] = hand_reduce("SUM", [t[:, 1:5:2].contiguous() for t in every(0)])
    b2 = make(dtype, (4, 6), RANK, 1)
    b2[1] = hand_reduce("MAX", [t[1] for t in every(1)])
    b3 = make(dtype, (4, 6), RANK, 2)
    b3[::2, 3:] = make(dtype, (4, 6), 1, 2)[::2, 3:]
    b4 = make(dtype, (4, 6), RANK, 3)
    b4[1:3, 1:4] = torch.cat([t[2, :3] for t in every(4)]).reshape(2, 3)
    b5 = make(dtype, (4, 6), RANK, 5)
    b5[0, :4], b5[2, 2:] = (t[:, 1] for t in every(6))
    b6 = make(dtype, (4, 6), RANK, 7)
    b6[3, 1:4] = hand_reduce("SUM", [t[1, : WORLD * 3] for t in every(8)])[RANK * 3:RANK * 3 + 3]
    return [b1, b2, b3, b4, b5, b6]


for dtype in (torch.float32, torch.int16, torch.bfloat16, torch.uint64):
    check(f"views/{dname(dtype)}", "reduce", functools.partial(views, NEURON, dtype), functools.partial(views_hand, dtype))


section("views")


# -- CPU tensors in the neuron group ---------------------------------------------------------------------
def cpu_in_neuron_group(group):
    a = make(torch.float32, SHAPE, RANK)
    dist.all_reduce(a, group=group)
    b = make(torch.float32, SHAPE, RANK, 1)
    dist.all_reduce(b, op=R.AVG, group=group)
    c = make(torch.float32, (4, 6), RANK)
    dist.all_reduce(c[:, ::2], group=group)  # Gloo refuses non-contiguous tensors; neuron's stages them
    d = [torch.empty(SHAPE, dtype=torch.int64) for _ in range(WORLD)]
    dist.all_gather(d, make(torch.int64, SHAPE, RANK), group=group)
    e = make(torch.int16, SHAPE, RANK)
    dist.all_reduce(e, group=group)
    return [a, b, c, d, e]


def cpu_hand():
    every = lambda dt, shape=SHAPE, salt=0: [make(dt, shape, r, salt) for r in range(WORLD)]  # noqa: E731
    c = make(torch.float32, (4, 6), RANK)
    c[:, ::2] = hand_reduce("SUM", [t[:, ::2].contiguous() for t in every(torch.float32, (4, 6))])
    return [hand_reduce("SUM", every(torch.float32)), hand_reduce("AVG", every(torch.float32, SHAPE, 1)), c,
            every(torch.int64), hand_reduce("SUM", every(torch.int16))]


check("cpu_tensors", "reduce", lambda: cpu_in_neuron_group(dist.group.WORLD), cpu_hand)


def cpu_in_gloo_dtypes(device, group):
    a = make(torch.float32, SHAPE, RANK)
    dist.all_reduce(a, group=group)
    b = make(torch.float32, SHAPE, RANK, 1)
    dist.broadcast(b, src=1, group=group)
    return [a, b]


side_by_side("cpu_tensors/gloo", "reduce", cpu_in_gloo_dtypes)


section("cpu")


# -- 0-d and empty tensors -----------------------------------------------------------------------------------
for dtype in (torch.float32, torch.int16, torch.bfloat16, torch.uint16, torch.float8_e4m3fn, torch.bool):
    n = dname(dtype)
    gl = dtype in GLOO

    def zero_d(device, group, dtype=dtype):
        a = dev(make(dtype, (), RANK), device)
        dist.all_reduce(a, op=R.MAX, group=group)
        b = dev(make(dtype, (), RANK, 1), device)
        dist.broadcast(b, src=1, group=group)
        c = [torch.empty((), dtype=dtype, device=device) for _ in range(WORLD)]
        dist.all_gather(c, dev(make(dtype, (), RANK, 2), device), group=group)
        return [a, b, c]

    def zero_d_hand(dtype=dtype):
        return [hand_reduce("MAX", inputs_of_all(dtype, ())), make(dtype, (), 1, 1), inputs_of_all(dtype, (), 2)]
    side_by_side(f"zero_d/{n}", "reduce", zero_d, None if gl else zero_d_hand)

    def empty(device, group, dtype=dtype):
        a = torch.empty((0,), dtype=dtype, device=device)
        dist.all_reduce(a, group=group)
        b = torch.empty((0, 3), dtype=dtype, device=device)
        dist.broadcast(b, src=0, group=group)
        c = torch.empty((0, 3), dtype=dtype, device=device)
        dist.all_gather_into_tensor(c, torch.empty((0, 3), dtype=dtype, device=device), group=group)
        d = [torch.empty((0,), dtype=dtype, device=device) for _ in range(WORLD)]
        dist.all_gather(d, torch.empty((0,), dtype=dtype, device=device), group=group)
        return [a, b, c, d]

    def empty_hand(dtype=dtype):
        e = torch.empty((0,), dtype=dtype)
        return [e, torch.empty((0, 3), dtype=dtype), torch.empty((0, 3), dtype=dtype), [e] * WORLD]
    side_by_side(f"empty/{n}", "move", empty, None if gl else empty_hand)

section("zero_d_empty")
report("done", True)
dist.destroy_process_group()
