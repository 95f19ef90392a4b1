"""Random ops: the in-place samplers (normal_, uniform_, random_, bernoulli_, exponential_,
log_normal_) with their functional twins, normal with tensor mean/std, dropout, and rrelu.

A `Generator?` argument arrives as a jax PRNG key, unique per call; lowerings that need several
independent draws split it. Samples are drawn in float32 for float16/bfloat16 (then rounded) and in
float64 for float64 tensors. Integer ranges follow ATen: `base + bits % range` with 32 random bits
when the range fits in 32 bits and 64 otherwise.

rrelu_with_noise writes its `noise` argument (Tensor(b!)), so its lowering returns the output and
then noise's new value: in training, each element <= 0 is scaled by a slope drawn uniformly from
[lower, upper) (noise holds the slope, 1 elsewhere); in eval mode it is leaky_relu with slope
(lower + upper) / 2 and noise is left as it is.
"""
from __future__ import annotations

import numpy as np

from ..runtime.lazy_jax import jax, jnp, lax
from .dtypes import cast, to_numpy_dtype
from ._registry import aten, lower, require
from .factory import requested_dtype
from .promotion import category, compute_dtype, default_float, is_floatlike, is_weak, result_dtype

_I32 = np.iinfo(np.int32)


def _sample_dtype(dt):
    """The float dtype samples for a tensor of dtype `dt` are drawn in."""
    dt = np.dtype(dt)
    if is_floatlike(dt) and category(dt) == 2:
        return compute_dtype(dt)
    return np.dtype(np.float32)


def _uniform(key, shape, dt, low=0.0, high=1.0):
    sd = _sample_dtype(dt)
    return jax.random.uniform(key, tuple(shape), sd, minval=low, maxval=high)


def _normal(key, shape, dt):
    return jax.random.normal(key, tuple(shape), _sample_dtype(dt))


def _digits(dt):
    """std::numeric_limits<T>::digits of a float dtype (mantissa bits incl. the implicit one)."""
    return int(jnp.finfo(dt).nmant) + 1


def _int_max(dt):
    dt = np.dtype(dt)
    if dt == np.bool_:
        return 1
    return int(jnp.iinfo(dt).max)


def _random_from_range(key, shape, dt, base: int, range_: int):
    """`base + bits % range_` as ATen's random_from_to kernels (32-bit draws when range_ < 2**32)."""
    dt = np.dtype(dt)
    shape = tuple(shape)
    if range_ < 2**32:
        bits = jax.random.bits(key, shape, np.uint32)
        v = bits % np.uint32(range_)
        last = base + range_ - 1
        if range_ <= 2**31 and _I32.min <= base and last <= _I32.max and dt.itemsize <= 4:
            return cast(v.astype(np.int32) + np.int32(base), dt)
        return cast(v.astype(np.int64) + np.int64(base), dt)
    bits = jax.random.bits(key, shape, np.uint64)
    v = bits % np.uint64(range_) if range_ < 2**64 else bits
    v = v + np.uint64(base % 2**64)  # wraps, like ATen's uint64 arithmetic
    return cast(lax.convert_element_type(v, np.int64), dt)


def _random_default_range(dt):
    """[0, range) of random_() with no bounds: [0, 2**digits] for floats, [0, max] for integers."""
    dt = np.dtype(dt)
    if category(dt) == 2:
        return (1 << _digits(dt)) + 1
    return _int_max(dt) + 1


def _is_scalar(v) -> bool:
    """A float argument: a Python number, or traced (weakly typed 0-d) when named in `dynamic=`."""
    return isinstance(v, (int, float)) or (jnp.ndim(v) == 0 and is_weak(v))


def _bernoulli(key, shape, p, dt):
    """0/1 samples of dtype `dt`, P(1) = p (a float or a tensor broadcast to `shape`)."""
    if _is_scalar(p):
        u = _uniform(key, shape, dt)
        return cast(u < p, dt)
    pd = _sample_dtype(p.dtype)
    u = jax.random.uniform(key, tuple(shape), pd)
    return cast(u < cast(jnp.broadcast_to(p, tuple(shape)), pd), dt)


# bernoulli(Tensor self, *, Generator? generator=None) -> Tensor
@lower(aten.bernoulli.default)
def bernoulli(self, generator):
    return _bernoulli(generator, self.shape, self, self.dtype)


# bernoulli.p(Tensor self, float p, *, Generator? generator=None) -> Tensor
# bernoulli_.float(Tensor(a!) self, float p=0.5, *, Generator? generator=None) -> Tensor(a!)
@lower(aten.bernoulli.p, aten.bernoulli_.float, dynamic=("p",))
def bernoulli_p(self, p, generator):
    return _bernoulli(generator, self.shape, p, self.dtype)


# bernoulli.Tensor(Tensor self, Tensor p, *, Generator? generator=None) -> Tensor
# bernoulli_.Tensor(Tensor(a!) self, Tensor p, *, Generator? generator=None) -> Tensor(a!)
@lower(aten.bernoulli.Tensor, aten.bernoulli_.Tensor)
def bernoulli_tensor(self, p, generator):
    return _bernoulli(generator, self.shape, p, self.dtype)


# exponential(Tensor self, float lambd=1., *, Generator? generator=None) -> Tensor
# exponential_(Tensor(a!) self, float lambd=1., *, Generator? generator=None) -> Tensor(a!)
@lower(aten.exponential.default, aten.exponential_.default, dynamic=("lambd",))
def exponential(self, lambd, generator):
    e = jax.random.exponential(generator, tuple(self.shape), _sample_dtype(self.dtype))
    return cast(e / lambd, self.dtype)


# log_normal(Tensor self, float mean=1., float std=2., *, Generator? generator=None) -> Tensor
# log_normal_(Tensor(a!) self, float mean=1., float std=2., *, Generator? generator=None) -> Tensor(a!)
@lower(aten.log_normal.default, aten.log_normal_.default, dynamic=("mean", "std"))
def log_normal(self, mean, std, generator):
    z = _normal(generator, self.shape, self.dtype)
    return cast(jnp.exp(z * std + mean), self.dtype)


# multinomial(Tensor self, SymInt num_samples, bool replacement=False, *, Generator? generator=None) -> Tensor
@lower(aten.multinomial.default)
def multinomial(self, num_samples, replacement, generator):
    # rows of non-negative weights (not necessarily normalized); zero weights are never drawn
    _check_probabilities(self, replacement and num_samples > 1)
    logits = jnp.log(cast(self, np.float32) if not is_floatlike(self.dtype) else self.astype(np.float32))
    if replacement:
        draws = jax.random.categorical(generator, logits[..., None, :], axis=-1,
                                       shape=logits.shape[:-1] + (num_samples,))
        return draws.astype(np.int64)
    # without replacement: the Gumbel-top-k trick draws distinct categories with the right law
    gumbel = jax.random.gumbel(generator, logits.shape, np.float32)
    return lax.top_k(logits + gumbel, num_samples)[1].astype(np.int64)


def _check_probabilities(p, per_entry):
    """The CPU's checks of multinomial's weights (Distributions.cpp): of the whole tensor first, or,
    drawing several with replacement (`per_entry`), the first bad entry in row order as its kernel
    finds it; then each row's sum."""
    if p.size == 0:
        return
    negative, finite = ~(p >= 0), jnp.isfinite(p)  # (the kernel's `val >= 0` check fails for NaN too)
    if per_entry:
        bad = jnp.ravel(negative | ~finite)
        first_negative = jnp.ravel(negative)[jnp.argmax(bad)]
        require(~(jnp.any(bad) & first_negative), RuntimeError,
                "invalid multinomial distribution (encountering probability entry < 0)")
        require(~jnp.any(bad), RuntimeError,
                "invalid multinomial distribution (encountering probability entry = infinity or NaN)")
    else:
        require(jnp.all(~negative & finite), RuntimeError,
                "probability tensor contains either `inf`, `nan` or element < 0")
    total = jnp.sum(p.astype(np.float64) if p.dtype == np.float64 else p.astype(np.float32), axis=-1)
    require(jnp.all(total > 0), RuntimeError, "invalid multinomial distribution (sum of probabilities <= 0)")


# native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)
# (no Generator in the schema: the key comes from the default generator, rng=True)
@lower(aten.native_dropout.default, rng=True)
def native_dropout(input, p, train, key):
    shape = tuple(input.shape)
    if train is not None and not train:
        return input, jnp.ones(shape, np.bool_)
    p1m = 1.0 - p
    scale = 0.0 if p1m == 0 else 1.0 / p1m
    cd = compute_dtype(input.dtype) if is_floatlike(input.dtype) else np.dtype(np.float32)
    mask = jax.random.uniform(key, shape, _sample_dtype(input.dtype)) < p1m
    # ATen: input.mul(mask).mul_(scale): a dropped inf gives nan as on the CPU (XLA would fold
    # x * convert(mask) into a select, so the zeroing is spelled x * 0)
    x = cast(input, cd)
    out = jnp.where(mask, x, x * 0) * scale
    return cast(out, input.dtype), mask


# native_dropout_backward(Tensor grad_output, Tensor mask, float scale) -> Tensor
@lower(aten.native_dropout_backward.default)
def native_dropout_backward(grad_output, mask, scale):
    # grad * mask * scale: a float Scalar promotes integral/bool grads to the default float dtype
    out = np.dtype(grad_output.dtype) if is_floatlike(grad_output.dtype) else default_float()
    cd = compute_dtype(out)
    g = cast(grad_output, cd)
    return cast(g * cast(mask, cd) * scale, out)


# normal.Tensor_float(Tensor mean, float std=1, *, Generator? generator=None) -> Tensor
@lower(aten.normal.Tensor_float, dynamic=("std",))
def normal_tensor_float(mean, std, generator):
    dt = np.dtype(mean.dtype)
    cd = compute_dtype(dt)
    z = _normal(generator, mean.shape, dt)
    return cast(z * std + cast(mean, cd), dt)


# normal.float_Tensor(float mean, Tensor std, *, Generator? generator=None) -> Tensor
@lower(aten.normal.float_Tensor, dynamic=("mean",))
def normal_float_tensor(mean, std, generator):
    dt = np.dtype(std.dtype)
    cd = compute_dtype(dt)
    z = _normal(generator, std.shape, dt)
    return cast(z * cast(std, cd) + mean, dt)


# normal.Tensor_Tensor(Tensor mean, Tensor std, *, Generator? generator=None) -> Tensor
@lower(aten.normal.Tensor_Tensor)
def normal_tensor_tensor(mean, std, generator):
    dt = result_dtype(mean, std)
    cd = compute_dtype(dt)
    shape = jnp.broadcast_shapes(mean.shape, std.shape)
    z = _normal(generator, shape, dt)
    return cast(z * cast(std, cd) + cast(mean, cd), dt)


# normal.float_float(float mean, float std, SymInt[] size, *, Generator? generator=None, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
@lower(aten.normal.float_float, dynamic=("mean", "std"))
def normal_float_float(mean, std, size, generator, dtype, layout, device, pin_memory):
    dt = default_float() if dtype is None else to_numpy_dtype(dtype)
    z = _normal(generator, size, dt)
    return cast(z * std + mean, dt)


# normal_(Tensor(a!) self, float mean=0, float std=1, *, Generator? generator=None) -> Tensor(a!)
# normal_functional(Tensor self, float mean=0., float std=1., *, Generator? generator=None) -> Tensor
@lower(aten.normal_.default, aten.normal_functional.default, dynamic=("mean", "std"))
def normal_(self, mean, std, generator):
    z = _normal(generator, self.shape, self.dtype)
    return cast(z * std + mean, self.dtype)


def _randint(key, shape, dt, low, high):
    if high <= low:
        raise ValueError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    return _random_from_range(key, shape, dt, low, high - low)


# rand(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
@lower(aten.rand.default, rng=True)
def rand(size, dtype, layout, device, pin_memory, key):
    dt = requested_dtype(dtype, default_float())
    return cast(_uniform(key, size, dt), dt)


# rand.generator(SymInt[] size, *, Generator? generator, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
@lower(aten.rand.generator)
def rand_generator(size, generator, dtype, layout, device, pin_memory):
    return rand(size, dtype, layout, device, pin_memory, generator)


# rand_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor
@lower(aten.rand_like.default, rng=True)
def rand_like(self, dtype, layout, device, pin_memory, memory_format, key):
    dt = requested_dtype(dtype, self.dtype)
    return cast(_uniform(key, self.shape, dt), dt)


# randint(SymInt high, SymInt[] size, *, ScalarType? dtype=long, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
@lower(aten.randint.default, rng=True)
def randint(high, size, dtype, layout, device, pin_memory, key):
    return randint_low(0, high, size, dtype, layout, device, pin_memory, key)


# randint.low(SymInt low, SymInt high, SymInt[] size, *, ScalarType? dtype=long, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
@lower(aten.randint.low, rng=True)
def randint_low(low, high, size, dtype, layout, device, pin_memory, key):
    return _randint(key, size, requested_dtype(dtype, np.dtype(np.int64)), low, high)


# randint_like(Tensor self, SymInt high, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor
@lower(aten.randint_like.default, rng=True)
def randint_like(self, high, dtype, layout, device, pin_memory, memory_format, key):
    return randint_like_low(self, 0, high, dtype, layout, device, pin_memory, memory_format, key)


# randint_like.low_dtype(Tensor self, SymInt low, SymInt high, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor
@lower(aten.randint_like.low_dtype, rng=True)
def randint_like_low(self, low, high, dtype, layout, device, pin_memory, memory_format, key):
    return _randint(key, self.shape, requested_dtype(dtype, self.dtype), low, high)


# randn(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
@lower(aten.randn.default, rng=True)
def randn(size, dtype, layout, device, pin_memory, key):
    dt = requested_dtype(dtype, default_float())
    return cast(_normal(key, size, dt), dt)


# randn.generator(SymInt[] size, *, Generator? generator, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
@lower(aten.randn.generator)
def randn_generator(size, generator, dtype, layout, device, pin_memory):
    return randn(size, dtype, layout, device, pin_memory, generator)


# randn_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor
@lower(aten.randn_like.default, rng=True)
def randn_like(self, dtype, layout, device, pin_memory, memory_format, key):
    dt = requested_dtype(dtype, self.dtype)
    return cast(_normal(key, self.shape, dt), dt)


# random(Tensor self, *, Generator? generator=None) -> Tensor
# random_(Tensor(a!) self, *, Generator? generator=None) -> Tensor(a!)
@lower(aten.random.default, aten.random_.default)
def random(self, generator):
    dt = np.dtype(self.dtype)
    return _random_from_range(generator, self.shape, dt, 0, _random_default_range(dt))


# random.from(Tensor self, int from, int? to, *, Generator? generator=None) -> Tensor
# random_.from(Tensor(a!) self, int from, int? to, *, Generator? generator=None) -> Tensor(a!)
@lower(getattr(aten.random, "from"), getattr(aten.random_, "from"))
def random_from(self, from_, to, generator):
    dt = np.dtype(self.dtype)
    if to is not None:
        if to <= from_:
            raise ValueError(f"random_ expects 'from' to be less than 'to', but got from={from_} >= to={to}")
        return _random_from_range(generator, self.shape, dt, from_, to - from_)
    if from_ == np.iinfo(np.int64).min:
        bits = jax.random.bits(generator, tuple(self.shape), np.uint64)
        return cast(lax.convert_element_type(bits, np.int64), dt)
    if category(dt) == 2:
        to_inc = min(1 << _digits(dt), np.iinfo(np.int64).max)
    else:
        to_inc = _int_max(dt)
    return _random_from_range(generator, self.shape, dt, from_, to_inc - from_ + 1)


# random.to(Tensor self, int to, *, Generator? generator=None) -> Tensor
# random_.to(Tensor(a!) self, int to, *, Generator? generator=None) -> Tensor(a!)
@lower(aten.random.to, aten.random_.to)
def random_to(self, to, generator):
    if to <= 0:
        raise ValueError(f"random_ expects 'from' to be less than 'to', but got from=0 >= to={to}")
    return _random_from_range(generator, self.shape, np.dtype(self.dtype), 0, to)


# rrelu_with_noise(Tensor self, Tensor(b!) noise, Scalar lower=0.125, Scalar upper=0.3333333333333333, bool training=False, Generator? generator=None) -> Tensor
# rrelu_with_noise_(Tensor(a!) self, Tensor(b!) noise, Scalar lower=0.125, Scalar upper=0.3333333333333333, bool training=False, Generator? generator=None) -> Tensor(a!)
# rrelu_with_noise_functional(Tensor self, Tensor noise, Scalar lower=0.125, Scalar upper=0.3333333333333333, bool training=False, Generator? generator=None) -> (Tensor, Tensor noise_out)
# (each returns the new value of self's result, then of noise)
@lower(aten.rrelu_with_noise.default, aten.rrelu_with_noise_.default, aten.rrelu_with_noise_functional.default)
def rrelu_with_noise(self, noise, lower, upper, training, generator):
    dt = np.dtype(self.dtype)
    if not is_floatlike(dt) or category(dt) != 2:
        raise NotImplementedError(f'"rrelu_with_noise_out_cpu" not implemented for \'{dt}\'')
    cd = compute_dtype(dt)
    x = cast(self, cd)
    if not training:
        slope = cast((lower + upper) / 2, cd)
        return cast(jnp.where(x > 0, x, x * slope), dt), noise
    r = cast(jax.random.uniform(generator, tuple(self.shape), _sample_dtype(dt), minval=lower, maxval=upper), cd)
    neg = x <= 0
    out = jnp.where(neg, x * r, x)
    new_noise = jnp.where(neg, r, jnp.ones((), cd))
    return cast(out, dt), cast(new_noise, noise.dtype).reshape(noise.shape)


# uniform(Tensor self, float from=0., float to=1., *, Generator? generator=None) -> Tensor
# uniform_(Tensor(a!) self, float from=0, float to=1, *, Generator? generator=None) -> Tensor(a!)
@lower(aten.uniform.default, aten.uniform_.default, dynamic=("from", "to"))
def uniform(self, from_, to, generator):
    return cast(_uniform(generator, self.shape, self.dtype, from_, to), self.dtype)
