"""Optimizer ops: the `_foreach_*` family, the fused optimizers and GradScaler's two ops.

- `_foreach_*` (what torch.optim's foreach paths, `clip_grad_norm_` and GradScaler call): one rule,
  `foreach`, maps the per-tensor op's lowering over the lists, so `_foreach_add.List` is `add.Tensor`
  on each pair and `_foreach_maximum.Scalar` is `clamp_min` on each tensor, as the CPU's slow path runs
  them, with the same dtypes and numerics, in one program over the whole list. Only functional
  overloads are registered: `_foreach_add_.List` (each tensor of `self` written) and
  `_foreach_add.List_out` are their variants (`variants.py`); compiled graphs see the functional ones
  (AOTAutograd functionalizes the rest). A `Scalar[]` argument (Adam's step sizes, new every step) is
  traced (`dynamic=`), not part of the key.
- `_fused_adam`, `_fused_adamw`, `_fused_sgd` and their `.tensor_lr` forms: the arithmetic of the CPU's
  fused kernels: hyperparameters, bias corrections and `1 - lr * weight_decay` in double, rounded to
  the parameter's compute dtype (float32 for 16-bit parameters); moments and parameters updated in that
  dtype, 16-bit state rounded once when stored (the parameter's step uses the unrounded moments). A
  `grad_scale` unscales the gradients, which are written back unscaled; `found_inf` = 1 leaves every
  tensor as it was. `state_steps` are read, never written (torch.optim increments them itself).
- `_amp_foreach_non_finite_check_and_unscale` and `_amp_update_scale`: GradScaler's ops as the CPU's
  kernels: `found_inf` set to 1 where a gradient holds an inf or a NaN (else left as it is), each
  gradient multiplied by `inv_scale` unless it is 1; the scale backed off after an overflow, grown
  after `growth_interval` clean steps (not past float32's range), the tracker counting them.

The CPU kernels' checks that PyTorch's meta kernels lack (the fused optimizers' list lengths, where
addcmul/addcdiv's packed scalars are, powsum's dtypes) join `argument_checks.CHECKS` (both modes run
that table); `META_FUNCTIONS` are the meta kernels PyTorch lacks for `_fused_sgd_` and the
`.tensor_lr` forms (eager's `meta_kernels` installs them).
"""
from __future__ import annotations

import numpy as np
import torch

from ..runtime.lazy_jax import jnp
from . import argument_checks
from ._registry import LOWERINGS, aten, lower, normalize
from .cpu_messages import scalar_type_name
from .dtypes import cast, is_low_precision, to_numpy_dtype
from .protocol import NUMBER_TYPES, ArgKind, arg_kind

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_LIST_TYPES = ("List[Tensor]", "List[number]")


# ---------------------------------------------------------------------------------------------
# _foreach_*: a per-tensor lowering mapped over the lists
# ---------------------------------------------------------------------------------------------


def foreach(op, per_tensor, names=None, indexed=()):
    """Register the lowering of `op` (a functional `_foreach_*` overload): `per_tensor`'s lowering on
    the i-th item of each list argument, the other arguments as they are. `op`'s arguments become
    `per_tensor`'s by position, or by `names` (per_tensor's argument name for each of op's); `indexed`
    names a tensor argument indexed like a list (addcmul.Tensor's packed `scalars`). Scalars that
    `per_tensor` takes as Python values (pow's exponent) stay static; other Scalar[] are traced."""
    base = LOWERINGS[per_tensor]
    fargs = op._schema.arguments
    pnames = list(names) if names is not None else [a.name for a in per_tensor._schema.arguments][:len(fargs)]
    per_item = [i for i, a in enumerate(fargs) if str(a.type) in _LIST_TYPES or a.name in indexed]
    static = tuple(a.name for a, p in zip(fargs, pnames) if p in base.static)
    dynamic = tuple(a.name for a in fargs if str(a.type) == "List[number]" and a.name not in static)
    # per_tensor's arguments that its lowering takes traced: a Python number there (a default, a graph's
    # constant) is made a weakly typed 0-d value, as `protocol.call_lowering` does for every op
    traced = {a.name for a in per_tensor._schema.arguments if arg_kind(a, base) in (ArgKind.SCALAR, ArgKind.TENSOR)}
    lists = [i for i in per_item if str(fargs[i].type) == "List[Tensor]"]

    def lowering(*args):
        results = []
        for k in range(len(args[lists[0]])):
            values = {}
            for i, (name, v) in enumerate(zip(pnames, args)):
                if i in per_item:
                    v = v[k]
                if name in traced and type(v) in NUMBER_TYPES:
                    v = jnp.asarray(v)
                values[name] = v
            results.append(base.fn(*normalize(per_tensor, (), values)))
        return results

    lowering.__name__ = f"foreach_{per_tensor.__name__.replace('.', '_')}"
    lower(op, static=static, dynamic=dynamic)(lowering)


_UNARY = ("abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1", "floor", "frac",
          "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid", "sign",
          "sin", "sinh", "sqrt", "tan", "tanh", "trunc", "zero")
for _name in _UNARY:
    foreach(getattr(aten, f"_foreach_{_name}").default, getattr(aten, _name).default)

# name: (the per-tensor op of its Scalar and ScalarList overloads, of its List and Tensor overloads).
# ATen's foreach maximum/minimum are its clamp_min/clamp_max kernels (a NaN bound gives NaN).
_BINARY = {
    "add": (aten.add.Scalar, aten.add.Tensor),
    "sub": (aten.sub.Scalar, aten.sub.Tensor),
    "mul": (aten.mul.Scalar, aten.mul.Tensor),
    "div": (aten.div.Scalar, aten.div.Tensor),
    "clamp_min": (aten.clamp_min.default, aten.clamp_min.Tensor),
    "clamp_max": (aten.clamp_max.default, aten.clamp_max.Tensor),
    "maximum": (aten.clamp_min.default, aten.clamp_min.Tensor),
    "minimum": (aten.clamp_max.default, aten.clamp_max.Tensor),
    "pow": (aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor),
}
for _name, (_scalar, _tensor) in _BINARY.items():
    _packet = getattr(aten, f"_foreach_{_name}")
    for _overload in _packet.overloads():
        if _overload in ("Scalar", "ScalarList"):
            foreach(getattr(_packet, _overload), _scalar)
        elif _overload in ("List", "Tensor"):
            foreach(getattr(_packet, _overload), _tensor)
foreach(aten._foreach_pow.ScalarAndTensor, aten.pow.Scalar)

for _name in ("addcmul", "addcdiv"):
    _packet = getattr(aten, f"_foreach_{_name}")
    foreach(_packet.Scalar, getattr(aten, _name).default)
    foreach(_packet.ScalarList, getattr(aten, _name).default)
    # the packed scalars (a 1-d tensor, one per tensor of the list): item i for tensor i
    foreach(_packet.Tensor, getattr(aten, _name).default, indexed=("scalars",))
foreach(aten._foreach_lerp.Scalar, aten.lerp.Scalar)
foreach(aten._foreach_lerp.ScalarList, aten.lerp.Scalar)
foreach(aten._foreach_lerp.List, aten.lerp.Tensor)

# _foreach_norm.Scalar(Tensor[] self, Scalar ord=2, ScalarType? dtype=None): linalg_vector_norm of each
foreach(aten._foreach_norm.Scalar, aten.linalg_vector_norm.default, names=("self", "ord", "dtype"))
foreach(aten._foreach_max.default, aten.max.default)
foreach(aten._foreach_copy.default, aten.copy.default)
foreach(aten._foreach_clone.default, aten.clone.default)
foreach(aten._foreach_mm.default, aten.mm.default)


# _foreach_powsum.Scalar(Tensor[] self, Scalar ord=2, ScalarType? dtype=None) -> Tensor[]
@lower(aten._foreach_powsum.Scalar, static=("ord",))
def foreach_powsum(self, ord, dtype):
    """sum(|x| ** ord) of each tensor (|x| ** 0 is 1: ord 0 counts every element), in `dtype` (the
    tensor's real dtype if None), computed in its compute dtype."""
    out = []
    for t in self:
        dt = np.dtype(t.dtype) if dtype is None else to_numpy_dtype(dtype)
        if dt.kind == "c":
            dt = _F64 if dt == np.complex128 else _F32
        cd = _compute(dt)
        x = jnp.abs(t).astype(cd)
        powered = x * x if ord == 2 else (x if ord == 1 else jnp.power(x, np.asarray(ord, cd)))
        out.append(cast(jnp.sum(powered), dt))
    return out


# ---------------------------------------------------------------------------------------------
# Fused optimizers
# ---------------------------------------------------------------------------------------------


def _compute(dtype):
    """The dtype the CPU's fused kernels compute a parameter of `dtype` in."""
    return _F32 if is_low_precision(dtype) else np.dtype(dtype)


def _double(x):
    """A hyperparameter as the kernels hold it: a double (a tensor lr: `lr.item<double>()`)."""
    return jnp.asarray(x).reshape(()).astype(_F64)


def _skipped(found_inf):
    """The kernels return untouched when `*found_inf == 1.0`."""
    return None if found_inf is None else (jnp.asarray(found_inf).reshape(()).astype(_F32) == 1.0)


def _keep_if(skip, old, new):
    return new if skip is None else jnp.where(skip, old, new)


def _unscaled(grad, cd, grad_scale):
    """The gradient in the compute dtype, divided by `grad_scale` when given (`float(*grad_scale)`)."""
    g = grad.astype(cd)
    if grad_scale is not None:
        g = g / jnp.asarray(grad_scale).reshape(()).astype(_F32).astype(cd)
    return g


def _adam(adamw: bool):
    def lowering(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2,
                 weight_decay, eps, amsgrad, maximize, grad_scale, found_inf):
        lr, beta1, beta2, weight_decay, eps = map(_double, (lr, beta1, beta2, weight_decay, eps))
        skip = _skipped(found_inf)
        params_out, grads_out, avgs_out, sqs_out, maxs_out = [], [], [], [], []
        for i, (p, g, m, v, step) in enumerate(zip(self, grads, exp_avgs, exp_avg_sqs, state_steps)):
            cd = _compute(p.dtype)
            step = jnp.asarray(step).reshape(()).astype(_F32).astype(_F64)  # state_step.item<float>()
            bias_correction1 = 1 - beta1 ** step
            bias_correction2_sqrt = jnp.sqrt(1 - beta2 ** step).astype(cd)
            step_size = (lr / bias_correction1).astype(cd)
            grad = _unscaled(g, cd, grad_scale)
            grads_out.append(_keep_if(skip, g, grad.astype(g.dtype)))
            if maximize:
                grad = -grad
            param = p.astype(cd)
            if adamw:
                param = jnp.where(weight_decay != 0, param * (1 - lr * weight_decay).astype(cd), param)
            else:
                grad = jnp.where(weight_decay != 0, grad + param * weight_decay.astype(cd), grad)
            # exp_avg.lerp_(grad, 1 - beta1), in lerp's two forms as the kernel picks them
            w = (1 - beta1).astype(cd)
            avg = m.astype(cd)
            avg = jnp.where(jnp.abs(w) < 0.5, avg + w * (grad - avg), grad - (grad - avg) * (1 - w))
            sq = v.astype(cd) * beta2.astype(cd) + (1 - beta2).astype(cd) * grad * grad
            if amsgrad:
                top = jnp.maximum(max_exp_avg_sqs[i].astype(cd), sq)
                maxs_out.append(_keep_if(skip, max_exp_avg_sqs[i], top.astype(max_exp_avg_sqs[i].dtype)))
                denom = jnp.sqrt(top) / bias_correction2_sqrt + eps.astype(cd)
            else:
                denom = jnp.sqrt(sq) / bias_correction2_sqrt + eps.astype(cd)
            param = param + (-step_size) * avg / denom
            params_out.append(_keep_if(skip, p, param.astype(p.dtype)))
            avgs_out.append(_keep_if(skip, m, avg.astype(m.dtype)))
            sqs_out.append(_keep_if(skip, v, sq.astype(v.dtype)))
        return params_out, grads_out, avgs_out, sqs_out, maxs_out

    return lowering


_ADAM_DYNAMIC = ("lr", "beta1", "beta2", "weight_decay", "eps")
# _fused_adam(Tensor[] self, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_sqs, Tensor[] max_exp_avg_sqs,
#     Tensor[] state_steps, *, float lr, float beta1, float beta2, float weight_decay, float eps, bool amsgrad,
#     bool maximize, Tensor? grad_scale=None, Tensor? found_inf=None) -> (Tensor[] x5); .tensor_lr: Tensor lr
lower(aten._fused_adam.default, aten._fused_adam.tensor_lr, dynamic=_ADAM_DYNAMIC)(_adam(adamw=False))
lower(aten._fused_adamw.default, aten._fused_adamw.tensor_lr, dynamic=_ADAM_DYNAMIC)(_adam(adamw=True))


# _fused_sgd(Tensor[] self, Tensor[] grads, Tensor[] momentum_buffer_list, *, float weight_decay, float momentum,
#     float lr, float dampening, bool nesterov, bool maximize, bool is_first_step, Tensor? grad_scale=None,
#     Tensor? found_inf=None) -> (Tensor[] self_out, Tensor[] grads_out, Tensor[] momentum_buffer_list_out)
# (momentum is static: whether it is 0 decides whether there are buffers, as the CPU checks)
@lower(aten._fused_sgd.default, aten._fused_sgd.tensor_lr, dynamic=("weight_decay", "lr", "dampening"))
def fused_sgd(self, grads, momentum_buffer_list, weight_decay, momentum, lr, dampening, nesterov, maximize,
              is_first_step, grad_scale, found_inf):
    weight_decay, lr, dampening = map(_double, (weight_decay, lr, dampening))
    skip = _skipped(found_inf)
    params_out, grads_out, bufs_out = [], [], []
    for i, (p, g) in enumerate(zip(self, grads)):
        cd = _compute(p.dtype)
        grad = _unscaled(g, cd, grad_scale)
        grads_out.append(_keep_if(skip, g, grad.astype(g.dtype)))
        if maximize:
            grad = -grad
        param = p.astype(cd)
        grad = jnp.where(weight_decay != 0, grad + param * weight_decay.astype(cd), grad)
        if momentum != 0:
            old = momentum_buffer_list[i]
            mom = np.asarray(momentum, _F64).astype(cd)
            # the first step's buffers are empty_like: the gradient is all they take
            buf = grad if is_first_step else old.astype(cd) * mom + (1 - dampening).astype(cd) * grad
            bufs_out.append(_keep_if(skip, old, buf.astype(old.dtype)))
            grad = grad + buf * mom if nesterov else buf
        param = param + grad * (-lr).astype(cd)
        params_out.append(_keep_if(skip, p, param.astype(p.dtype)))
    return params_out, grads_out, bufs_out


# ---------------------------------------------------------------------------------------------
# GradScaler
# ---------------------------------------------------------------------------------------------


# _amp_foreach_non_finite_check_and_unscale(Tensor[] self, Tensor found_inf, Tensor inv_scale)
#     -> (Tensor[] self_out, Tensor found_inf_out)
@lower(aten._amp_foreach_non_finite_check_and_unscale.default)
def amp_foreach_non_finite_check_and_unscale(self, found_inf, inv_scale):
    found = found_inf
    inv = jnp.asarray(inv_scale).reshape(()).astype(_F32)
    out = []
    for g in self:
        cd = _compute(g.dtype)
        x = g.astype(cd)
        found = jnp.where(jnp.any(~jnp.isfinite(x)), jnp.ones_like(found), found)
        out.append(jnp.where(inv == 1, x, x * inv.astype(cd)).astype(g.dtype))
    return out, found


# _amp_update_scale(Tensor self, Tensor growth_tracker, Tensor found_inf, float scale_growth_factor,
#     float scale_backoff_factor, int growth_interval) -> (Tensor, Tensor growth_tracker_out)
@lower(aten._amp_update_scale.default, dynamic=("scale_growth_factor", "scale_backoff_factor"))
def amp_update_scale(self, growth_tracker, found_inf, scale_growth_factor, scale_backoff_factor, growth_interval):
    scale = self.astype(_F64)  # float * double: the products are doubles, stored as float
    found = found_inf != 0
    backed_off = (scale * _double(scale_backoff_factor)).astype(_F32)
    successful = growth_tracker + 1
    grow = successful == growth_interval
    grown = (scale * _double(scale_growth_factor)).astype(_F32)
    new_scale = jnp.where(found, backed_off, jnp.where(grow & jnp.isfinite(grown), grown, self.astype(_F32)))
    tracker = jnp.where(found | grow, jnp.zeros_like(successful), successful)
    return new_scale.astype(self.dtype), tracker.astype(growth_tracker.dtype)


# ---------------------------------------------------------------------------------------------
# The CPU kernels' checks meta kernels lack, and meta kernels PyTorch lacks
# ---------------------------------------------------------------------------------------------


def _expect(ok: bool, condition: str):
    # TORCH_CHECK without a message, as the fused kernels write their list-length checks
    if not ok:
        raise RuntimeError(f"Expected {condition} to be true, but got false.  (Could this error message be "
                           f"improved?  If so, please report an enhancement request to PyTorch.)")


def _check_lr(lr):
    if isinstance(lr, torch.Tensor) and lr.numel() != 1:  # lr.item<double>()
        raise RuntimeError(f"a Tensor with {lr.numel()} elements cannot be converted to Scalar")


def _check_adam(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *_, lr=None, amsgrad=False,
                **__):
    n = len(self)
    _expect(len(grads) == n, "grads.size() == n_tensors")
    _expect(len(exp_avgs) == n, "exp_avgs.size() == n_tensors")
    _expect(len(exp_avg_sqs) == n, "exp_avg_sqs.size() == n_tensors")
    if amsgrad:
        _expect(len(max_exp_avg_sqs) == n, "max_exp_avg_sqs.size() == n_tensors")
    else:
        _expect(len(max_exp_avg_sqs) == 0, "max_exp_avg_sqs.size() == 0")
    _expect(len(state_steps) == n, "state_steps.size() == n_tensors")
    _check_lr(lr)


def _check_sgd(self, grads, momentum_buffer_list, *_, momentum=0.0, lr=None, **__):
    n = len(self)
    _expect(len(grads) == n, "grads.size() == n_tensors")
    if momentum == 0.0:
        _expect(len(momentum_buffer_list) == 0, "momentum_buffer_list.empty()")
    else:
        _expect(len(momentum_buffer_list) == n, "momentum_buffer_list.size() == n_tensors")
    _check_lr(lr)


def _check_packed_scalars(self, tensor1, tensor2, scalars=None, *_, **__):
    # convert_tensor_to_scalar_list reads the packed scalars on the host (meta copies would say "meta")
    if isinstance(scalars, torch.Tensor) and scalars.device.type != "cpu":
        raise RuntimeError(f"Expected scalars to be on CPU, got {scalars.device} instead.")


def _check_powsum(self, *_, **__):
    for t in self:  # the CPU's kernel is dispatched for floating and complex dtypes only
        if not (t.is_floating_point() or t.is_complex()):
            raise RuntimeError(f'"powsum_cpu" not implemented for \'{scalar_type_name(t.dtype)}\'')


argument_checks.CHECKS.update({
    "aten._foreach_powsum": _check_powsum,
    "aten._foreach_addcmul": _check_packed_scalars, "aten._foreach_addcmul_": _check_packed_scalars,
    "aten._foreach_addcdiv": _check_packed_scalars, "aten._foreach_addcdiv_": _check_packed_scalars,
    "aten._fused_adam": _check_adam, "aten._fused_adam_": _check_adam,
    "aten._fused_adamw": _check_adam, "aten._fused_adamw_": _check_adam,
    "aten._fused_sgd": _check_sgd, "aten._fused_sgd_": _check_sgd,
})


def _meta_in_place(*args, **kwargs):
    """An in-place fused optimizer on meta tensors: it writes its lists where they are, returns nothing."""
    return None


META_FUNCTIONS = {
    aten._fused_sgd_.default: _meta_in_place,
    aten._fused_sgd_.tensor_lr: _meta_in_place,
    aten._fused_adam_.tensor_lr: _meta_in_place,
    aten._fused_adamw_.tensor_lr: _meta_in_place,
}
