"""Every environment variable the package reads, read here and nowhere else; no jax here (it is read
before jax starts).

`SETTINGS` is the one table: per variable its name (TorchNeuron's own where AWS's package has the same
setting; an alias only where another name means exactly the same), the attribute the package reads,
its type (one parser per type, below), its default and one line of doc. README's settings table has a
row for each (tests/test_settings.py checks it); `launcher` rows are what torchrun sets, `xla` rows
XLA's own variables (jax reads its own JAX_* variables itself).

The package reads a setting as `config.settings.<attr>` (or `config.value(NAME)`). A read looks the
variable up and compares its raw text with the last read's: a dict lookup and a comparison, parsed
again only when the text changed, so a value follows the environment when a test changes it within
the process (monkeypatch.setenv). Text that does not parse raises ValueError naming the variable, on
every read. Unset or empty (blanks only) is the default.

Devices: under torchrun each process owns one core, as on Trainium: NEURON_RT_VISIBLE_CORES defaults to
LOCAL_RANK, and that core is the process's neuron:0. On the CPU platform every process emulates the
same chip: NEURON_RT_NUM_CORES cores, raised to cover LOCAL_WORLD_SIZE and the visible cores.
"""
from __future__ import annotations

import functools
import importlib.util
import math
import os
from typing import Callable, NamedTuple

# ---- one parser per type: (text, variable) -> value; the text is stripped and not empty

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def parse_flag(text: str, var: str) -> bool:
    """1/true/yes/on or 0/false/no/off, any case."""
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError(f"{var}={text!r}: expected 1 or 0")


_UNITS = {"": 1, "b": 1, "k": 2**10, "kib": 2**10, "m": 2**20, "mib": 2**20, "g": 2**30, "gib": 2**30,
          "t": 2**40, "tib": 2**40, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
SIZE_FORMS = "1073741824, 500M or 20G"


def parse_size(text: str, var: str) -> int:
    """A size in bytes: a byte count, or a number with a unit: K/M/G/T (or KiB.., powers of 1024), KB/MB/GB/TB
    (powers of 1000); '1.5G' is allowed."""
    text = text.strip()
    number = text.rstrip("BbIiKkMmGgTt ")
    unit = text[len(number):].strip().lower()
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if unit not in _UNITS or not (0 <= value < math.inf):
        raise ValueError(f"{var}={text!r}: expected a size in bytes such as {SIZE_FORMS}")
    return int(value * _UNITS[unit])


def parse_positive_size(text: str, var: str) -> int:
    value = parse_size(text, var)
    if value == 0:
        raise ValueError(f"{var}={text!r}: expected a size above zero in bytes such as {SIZE_FORMS}")
    return value


def parse_count(text: str, var: str, unit: str = "executables") -> int:
    """A positive whole number (of `unit`, which the error names)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{var}={text!r}: expected a positive number of {unit}")
    return value


def choice(words: dict[str, str], expected: str) -> Callable[[str, str], str]:
    """A parser of one of `words` (any case) -> its value; `expected` is what the error lists."""
    return functools.partial(_choose, words=words, expected=expected)


def _choose(text: str, var: str, words: dict[str, str], expected: str) -> str:
    word = text.strip().lower()
    if word not in words:
        raise ValueError(f"{var}={text!r}: expected {expected}")
    return words[word]


def parse_cores(text: str, var: str) -> tuple[int, ...]:
    """Core indices: '0', '0-3', '0,2' (ranges and lists, combined)."""
    cores: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                lo, hi = (int(p) for p in part.split("-", 1))
                cores.extend(range(lo, hi + 1))
            else:
                cores.append(int(part))
        except ValueError:
            raise ValueError(f"{var}={text!r}: expected core indices like '0', '0-3' or '0,2'") from None
    if not cores or min(cores) < 0:
        raise ValueError(f"{var}={text!r}: expected non-negative core indices like '0', '0-3' or '0,2'")
    return tuple(cores)


def parse_assignments(text: str, var: str) -> tuple[tuple[str, float], ...]:
    """`name=number,...` -> ((name, number), ...); which names mean something is the reader's to check."""
    pairs = []
    for part in text.split(","):
        if not part.strip():
            continue
        name, eq, number = part.partition("=")
        try:
            value = float(number) if eq else math.nan
        except ValueError:
            value = math.nan
        if not name.strip() or not (0 < value < math.inf):
            raise ValueError(f"{var}={text!r}: expected name=number pairs with numbers above zero, such as "
                             f"'hbm_bandwidth=3e12,launch_seconds=2e-5'")
        pairs.append((name.strip(), value))
    return tuple(pairs)


def parse_whole(text: str, var: str, unit: str, zero: str = "") -> int:
    """A whole number of `unit`, 0 allowed (`zero` says what it means, for the error)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"{var}={text!r}: expected a whole number of {unit}" + (f" ({zero})" if zero else ""))
    return value


def parse_bound(text: str, var: str, unit: str = "executables", scale: int = 1) -> int | None:
    """TorchNeuron's bounds: a whole number of `unit` (times `scale`), 0 meaning no bound (None)."""
    return parse_whole(text, var, unit, "0: no bound") * scale or None


def parse_seconds(text: str, var: str) -> float:
    """A duration in seconds above zero ('1200', '0.5')."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (0 < value < math.inf):
        raise ValueError(f"{var}={text!r}: expected a number of seconds above zero")
    return value


def parse_opt_level(text: str, var: str) -> int:
    """neuronx-cc's optimization level as TorchNeuron spells it: -O0..-O3 (also O2 or 2)."""
    word = text.strip().upper().removeprefix("-").removeprefix("O")
    if word not in ("0", "1", "2", "3"):
        raise ValueError(f"{var}={text!r}: expected an optimization level -O0, -O1, -O2 or -O3")
    return int(word)


def parse_text(text: str, var: str) -> str:
    return text


def parse_word(text: str, var: str) -> str:
    """A name, in lower case."""
    return text.lower()


def parse_words(text: str, var: str) -> tuple[str, ...]:
    """Blank-separated words (XLA_FLAGS)."""
    return tuple(text.split())


class Type(NamedTuple):
    name: str  # what the docs call it: flag, size, count, choice, cores, path, text, words
    parse: Callable[[str, str], object]


FLAG = Type("flag", parse_flag)
SIZE = Type("size", parse_size)
POSITIVE_SIZE = Type("size", parse_positive_size)
CORES = Type("cores", parse_cores)
PATH = Type("path", parse_text)
TEXT = Type("text", parse_text)
NAME = Type("name", parse_word)
WORDS = Type("words", parse_words)
ASSIGNMENTS = Type("name=number list", parse_assignments)


SECONDS = Type("seconds", parse_seconds)
OPT_LEVEL = Type("opt level", parse_opt_level)
COUNT_OR_ZERO = Type("count", functools.partial(parse_whole, unit="ops"))


def BOUND(unit: str, scale: int = 1) -> Type:
    return Type("count" if scale == 1 else "size", functools.partial(parse_bound, unit=unit, scale=scale))


def COUNT(unit: str) -> Type:
    return Type("count", functools.partial(parse_count, unit=unit))


def CHOICE(words: dict[str, str], expected: str) -> Type:
    return Type("choice", choice(words, expected))


# ---- the table

USER, LAUNCHER, XLA = "user", "launcher", "xla"


class Alias(NamedTuple):
    """Another spelling of a setting, parsed its own way (TorchNeuron's MB count beside our size)."""
    name: str
    type: Type


class Setting(NamedTuple):
    name: str  # the variable
    attr: str  # config.settings.<attr>
    type: Type
    default: object  # the value when unset or empty
    doc: str
    # other spellings of the same setting (a name, or an Alias with its own parser), read in order after
    # `name`: the first one set wins, and spellings that disagree are warned about once
    aliases: tuple = ()
    source: str = USER  # USER: the package's; LAUNCHER: set by torchrun; XLA: XLA's own
    # why a TorchNeuron setting changes nothing here (off Trainium); set, it is announced once
    inert: str = ""


DEFAULT_CPU_CORES = 2
DEFAULT_HOST_CACHE = 0
_ON_OFF = {**{w: "on" for w in _TRUE}, **{w: "off" for w in _FALSE}}

SETTINGS: tuple[Setting, ...] = (
    # devices
    Setting("TORCH_NEURONX_PLATFORM", "platform", NAME, "auto",
            "the PJRT platform that provides NeuronCores: auto (a GPU if jax has its CUDA plugin, else the "
            "CPU), cpu, cuda, ..."),
    Setting("NEURON_RT_NUM_CORES", "num_cores", COUNT("cores"), DEFAULT_CPU_CORES,
            "on the CPU platform, how many NeuronCores to emulate"),
    Setting("NEURON_RT_VISIBLE_CORES", "visible_cores", CORES, None,
            "which cores this process sees, as its neuron:0..N-1: '0', '0-3' or '0,2' (default: all; under "
            "torchrun the one core LOCAL_RANK)"),
    Setting("TORCH_NEURONX_CORE_MEMORY", "core_memory", POSITIVE_SIZE, None,
            "each core's memory capacity: 24GiB, 512M, 2GB or bytes (default: the platform's memory)"),
    Setting("TORCH_NEURONX_HOST_CACHE", "host_cache", SIZE, DEFAULT_HOST_CACHE,
            "on the CPU platform, how much freed device memory stays resident for the next buffers (0: none; "
            "glibc's mmap threshold is fixed at 8 MiB, and every buffer of that size or more is fresh memory)"),
    Setting("TORCH_NEURONX_NATIVE_KERNELS", "native_kernels", CHOICE({"auto": "auto", **_ON_OFF}, "auto, 1 or 0"),
            "auto",
            "on the CPU platform, whether executables call torch's CPU kernels for bf16/fp16 products and "
            "attention: auto (where torch's kernel is fast on this CPU), 1 (always) or 0 (never: XLA's)"),
    # a Trainium target (runtime/targets.py, runtime/costs.py)
    Setting("TORCH_NEURONX_TARGET", "target", CHOICE({"trn1": "trn1", "trn2": "trn2", "trn3": "trn3"},
                                                     "trn1, trn2 or trn3"), None,
            "each core behaves as one logical NeuronCore of this chip: its memory capacity, TorchNeuron's "
            "64-bit policy inside executables, no complex dtypes; time estimates use its figures (default: "
            "none, exact 64-bit semantics)"),
    Setting("NEURON_LOGICAL_NC_CONFIG", "logical_nc_config", COUNT("physical cores"), None,
            "physical NeuronCores per logical core under TORCH_NEURONX_TARGET (default: the chip's, 2 on "
            "trn2 and trn3, 1 on trn1)"),
    Setting("TORCH_NEURONX_TARGET_FIGURES", "target_figures", ASSIGNMENTS, (),
            "override the target chip's published figures: name=number,... (docs/targets.md lists the "
            "names and units)"),
    Setting("TORCH_NEURONX_TARGET_CHECK", "target_check", CHOICE({"off": "off", "compare": "compare"},
                                                                 "off or compare"), "off",
            "compare: each op and graph also runs exactly (64-bit), and where the target's policy changed "
            "a result the op is named, with by how much (ops run one launch each)"),
    Setting("TORCH_NEURONX_RECOMPILE_WARN", "recompile_warn", COUNT("executables"), 16,
            "warn once an op, a graph or the fused runs reach this many distinct executables (each would be "
            "a neuronx-cc compile on Trainium)"),
    Setting("TORCH_NEURONX_ESTIMATE", "estimate", FLAG, False,
            "time each launch and print the per-executable estimate on the target (trn2 when none is set) "
            "at exit (`torch-neuronx estimate -- python script.py` sets it)"),
    # eager mode
    Setting("NEURON_LAUNCH_BLOCKING", "launch_blocking", FLAG, False,
            "1: every eager op and graph runs to completion at its own call (no fused runs), so an op's "
            "error is raised by the call that caused it (for debugging; slower)"),
    Setting("TORCH_NEURONX_ENABLE_CONCATENATION", "eager_fusion", FLAG, True,
            "Adaptive Eager: queue eager ops and run each queue as one executable (0: one launch per op)",
            aliases=("TORCH_NEURONX_EAGER_FUSION",)),
    Setting("TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT", "eager_fusion_max_ops", COUNT("ops"), 1024,
            "the most ops a fused run holds", aliases=("TORCH_NEURONX_EAGER_FUSION_MAX_OPS",)),
    Setting("TORCH_NEURONX_CONCATENATION_QUEUE_LOW_THRESHOLD", "concatenation_queue_low_threshold", COUNT_OR_ZERO,
            15, "TorchNeuron: flush the queued ops early once the device has at most this many executions "
            "pending",
            inert="here the device runs on the host's cores, so flushing early to keep it busy gains nothing: "
                  "a run is cut only where docs/torchneuron.md says"),
    Setting("TORCH_NEURONX_INDEX_LENGTH_BUCKETS", "index_length_buckets",
            Type("count", functools.partial(parse_whole, unit="index lengths", zero="0: never")), 4,
            "an indexing op (index_put, index, nonzero) that has met more than this many distinct index "
            "lengths with everything else the same runs each new length at a bucket (powers of two, then "
            "sixteenths of an octave): a dozen executables for hundreds of lengths (0: one per length)"),
    Setting("TORCH_NEURONX_CPU_FALLBACK", "cpu_fallback",
            CHOICE({"warn": "warn", "error": "error", "silent": "silent"}, "warn, error or silent"), "warn",
            "an op with no neuron lowering runs on the CPU with a warning once per op (warn), silently "
            "(silent), or raises (error)"),
    Setting("TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS", "fallback_only_for_unimplemented_ops", FLAG,
            False, "0: an eager op whose lowering or compile fails runs on the CPU instead (warned once per op); "
            "1: only ops with no lowering do, a failed compile raises"),
    Setting("TORCH_NEURONX_ENABLE_NKI_SDPA", "enable_nki_sdpa", FLAG, True,
            "TorchNeuron: scaled_dot_product_attention by its NKI flash-attention kernel",
            inert="attention is always the fused lowering here (no NKI kernels off Trainium: torch's flash "
                  "kernel or ours inside the executable on the CPU)"),
    Setting("TORCH_NEURONX_VALUE_CHECKS", "value_checks", FLAG, True,
            "check values inside executables (out-of-range indices); 0 only to measure their cost: XLA then "
            "clamps silently"),
    # compiling
    Setting("NEURON_COMPILER_OPT_LEVEL", "compiler_opt_level", OPT_LEVEL, 1,
            "how hard XLA optimizes: -O0 (fastest compile, slow code), -O1 (XLA's defaults; small programs with "
            "its quick CPU options), -O2 (every program with XLA's full options), -O3 (-O2 and XLA's "
            "highest run-time effort); part of every executable's key"),
    Setting("NEURON_CC_FLAGS", "neuron_cc_flags", WORDS, (),
            "neuronx-cc's options: an optimization level in them (-O2, --optlevel 2, --optlevel=2) is "
            "honoured when NEURON_COMPILER_OPT_LEVEL is unset",
            inert="neuronx-cc's other options have no XLA counterpart"),
    # compiled mode
    Setting("TORCH_NEURONX_CPU_INPUTS", "cpu_inputs", CHOICE({"copy": "copy", "error": "error"}, "copy or error"),
            "copy", "a compiled graph's CPU input is copied to the device (copy) or refused (error)"),
    Setting("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "disable_fallback_execution", FLAG, True,
            "1: a torch.compile graph that fails to compile raises; 0: it warns and runs the graph eagerly "
            "(torch.compile's options={'fallback_execution': ...} wins over this)"),
    Setting("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "preserve_compilation_artifacts", FLAG, False,
            "write each compiled graph's FX code, StableHLO text and serialized executable to "
            "TORCH_NEURONX_DEBUG_DIR"),
    Setting("TORCH_NEURONX_DEBUG_DIR", "debug_dir", PATH, "/tmp/neuron_backend",
            "the folder for compilation artifacts (relative: to the working directory when written)"),
    # the executable cache
    Setting("TORCH_NEURONX_NEFF_CACHE_DIR", "neff_cache_dir", PATH, "/tmp/neff_cache",
            "the executable cache's folder"),
    Setting("TORCH_NEURONX_DISABLE_NEFF_CACHE", "neff_disable_cache", FLAG, False,
            "1: no disk layer (executables are kept in memory only)",
            aliases=("TORCH_NEURONX_NEFF_DISABLE_CACHE",)),
    Setting("TORCH_NEURONX_NEFF_CACHE_MAX_SIZE", "neff_cache_max_size", SIZE, None,
            "bound of the cache's folder (least recently used out first; default: none)"),
    Setting("NEURON_COMPILATION_CACHE_MAX_ENTRIES", "neff_cache_memory_entries", BOUND("executables"), 2048,
            "executables kept in memory (0: no bound)",
            aliases=(Alias("TORCH_NEURONX_NEFF_CACHE_MEMORY_ENTRIES", COUNT("executables")),)),
    Setting("NEURON_COMPILATION_CACHE_MAX_SIZE_MB", "neff_cache_memory_size", BOUND("MiB", 1 << 20), 1 << 30,
            "the serialized size of the executables kept in memory, in MiB (0: no bound)",
            aliases=(Alias("TORCH_NEURONX_NEFF_CACHE_MEMORY_SIZE", SIZE),)),
    Setting("TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT", "neff_cache_lock_timeout", SECONDS, 1200.0,
            "seconds a compile waits for another process compiling the same executable, then compiles it "
            "itself (warned)"),
    Setting("TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR", "neff_local_cache_dir", PATH, None,
            "the folder of the compile lock files (a local disk when the cache's folder is shared; default: "
            "the cache folder's locks/)"),
    # distributed
    Setting("TORCH_NEURONX_DIST_CHECKS", "dist_checks", FLAG, True,
            "check that every rank calls the same collective on the same shapes and dtypes (one small "
            "all-gather per collective)"),
    # what a launcher (torchrun) sets
    Setting("LOCAL_RANK", "local_rank", TEXT, None,
            "the process's rank on its node: its core when NEURON_RT_VISIBLE_CORES is unset", source=LAUNCHER),
    Setting("LOCAL_WORLD_SIZE", "local_world_size", TEXT, None,
            "the processes on the node: the emulated chip has at least as many cores", source=LAUNCHER),
    Setting("TORCHELASTIC_RESTART_COUNT", "torchelastic_restart_count", TEXT, "0",
            "the elastic restart: process groups rendezvous under a prefix of their own", source=LAUNCHER),
    # XLA's own, which runtime/lazy_jax.py amends before jax starts and executable keys include
    Setting("XLA_FLAGS", "xla_flags", WORDS, (), "XLA's flags", source=XLA),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
assert len(BY_NAME) == len(SETTINGS) and len({s.attr for s in SETTINGS}) == len(SETTINGS)


def spellings(setting: Setting) -> tuple[Alias, ...]:
    """Every name of `setting` with its parser, in the order they are read (the first set one wins)."""
    return (Alias(setting.name, setting.type),) + tuple(
        a if isinstance(a, Alias) else Alias(a, setting.type) for a in setting.aliases)


# any spelling -> its row
ROWS: dict[str, Setting] = {a.name: s for s in SETTINGS for a in spellings(s)}
assert len(ROWS) == sum(len(spellings(s)) for s in SETTINGS)

# ---- reading

# os.environ keeps the process's variables in a dict by encoded name (bytes on POSIX): a lookup there
# costs ~40 ns where os.environ.get costs ~400 ns (~1 us for an unset variable, through KeyError).
# Every write through os.environ (monkeypatch.setenv, os.environ[...] = ..., del) updates that dict.
try:
    _RAW, _KEY, _DECODE = os.environ._data, os.environ.encodekey, os.environ.decodevalue
except AttributeError:  # not CPython's os._Environ
    _RAW, _KEY, _DECODE = os.environ, str, str

_NOT_READ = object()


def _value_of(setting: Setting, raws) -> object:
    found = []
    for spelling, raw in zip(spellings(setting), raws):
        if raw is not None:
            text = _DECODE(raw).strip()
            if text:
                found.append((spelling.name, text, spelling.type.parse(text, spelling.name)))
    if not found:
        return setting.default
    differ = [f for f in found[1:] if f[2] != found[0][2]]
    if differ:  # read again only when a text changes: once per disagreement
        import warnings

        warnings.warn(
            f"{found[0][0]}={found[0][1]!r} and " + " and ".join(f"{n}={t!r}" for n, t, _v in differ)
            + f" set the same setting differently; {found[0][0]} wins", RuntimeWarning, stacklevel=4)
    return found[0][2]


def _reader(setting: Setting) -> Callable[..., object]:
    """A function reading `setting`: parsed again only when the variables' raw text changed."""
    get = _RAW.get
    keys = tuple(_KEY(a.name) for a in spellings(setting))
    last = (_NOT_READ, None)  # (raw text, value): replaced whole, so a racing thread sees one pair

    if len(keys) == 1:
        (key,) = keys

        def read(_settings=None):
            nonlocal last
            raw = get(key)
            seen, value = last
            if raw == seen:
                return value
            value = _value_of(setting, (raw,))
            last = (raw, value)
            return value
    else:
        def read(_settings=None):
            nonlocal last
            raw = tuple(get(k) for k in keys)
            seen, value = last
            if raw == seen:
                return value
            value = _value_of(setting, raw)
            last = (raw, value)
            return value

    read.__name__ = setting.attr
    read.__doc__ = f"{setting.name}: {setting.doc}"
    return read


_READERS: dict[str, Callable[..., object]] = {s.name: _reader(s) for s in SETTINGS}
_READERS.update({name: _READERS[row.name] for name, row in ROWS.items()})


class Settings:
    """The settings as the environment sets them now: `settings.<attr>` for each row of SETTINGS."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Settings(" + ", ".join(f"{s.attr}={describe(s.name)['value']!r}" for s in SETTINGS) + ")"


for _s in SETTINGS:
    setattr(Settings, _s.attr, property(_READERS[_s.name], doc=_READERS[_s.name].__doc__))
del _s

settings = Settings()


def value(name: str) -> object:
    """Setting `name`'s value now (ValueError naming the variable when its text does not parse)."""
    return _READERS[name]()


def default(name: str) -> object:
    return ROWS[name].default


def text(name: str) -> str | None:
    """The text that sets `name`'s setting (the first of its names that is set and not blank), or None."""
    named = setter(name)
    return None if named is None else named[1]


def setter(name: str) -> tuple[str, str] | None:
    """(the variable, its text) that sets `name`'s setting now: the first of its names set and not
    blank; None when none is."""
    for spelling in spellings(ROWS[name]):
        raw = _RAW.get(_KEY(spelling.name))
        if raw is not None and _DECODE(raw).strip():
            return spelling.name, _DECODE(raw)
    return None


_announced: set[str] = set()


def announce_inert() -> None:
    """Warn once per variable about each TorchNeuron setting that is set but means nothing off
    Trainium (its row's `inert`), and about the options in NEURON_CC_FLAGS other than the
    optimization level. Called at autoload and when the platform starts."""
    import warnings

    for setting in SETTINGS:
        if not setting.inert or setting.name in _announced or text(setting.name) is None:
            continue
        if setting.name == "NEURON_CC_FLAGS":
            ignored = cc_flags_ignored()
            if not ignored:
                continue
            what = f"NEURON_CC_FLAGS options {' '.join(ignored)} are ignored: {setting.inert}"
        else:
            what = f"{setting.name}={text(setting.name).strip()!r} has no effect here: {setting.inert}"
        _announced.add(setting.name)
        warnings.warn(f"torch_neuronx: {what} (docs/torchneuron.md)", RuntimeWarning, stacklevel=2)


def _cc_opt_level(words: tuple[str, ...]) -> tuple[int | None, list[str]]:
    """The optimization level in neuronx-cc's options (-O2, --optlevel 2, --optlevel=2, -O 2), and the
    options left."""
    level, rest, i = None, [], 0
    while i < len(words):
        word = words[i]
        spelled = None
        if word in ("-O", "--optlevel") and i + 1 < len(words):
            spelled, i = words[i + 1], i + 1
        elif word.startswith("--optlevel="):
            spelled = word.split("=", 1)[1]
        elif word.startswith("-O") and len(word) > 2:
            spelled = word[2:]
        if spelled is not None:
            level = parse_opt_level(spelled, "NEURON_CC_FLAGS")
        else:
            rest.append(word)
        i += 1
    return level, rest


def cc_flags_ignored() -> list[str]:
    return _cc_opt_level(settings.neuron_cc_flags)[1]


def compiler_opt_level() -> int:
    """XLA's optimization level as TorchNeuron sets neuronx-cc's: NEURON_COMPILER_OPT_LEVEL, else an
    -O option in NEURON_CC_FLAGS, else -O1."""
    if text("NEURON_COMPILER_OPT_LEVEL") is not None:
        return settings.compiler_opt_level
    level = _cc_opt_level(settings.neuron_cc_flags)[0]
    return settings.compiler_opt_level if level is None else level


def describe(name: str) -> dict:
    """{"text": what sets it (None: unset), "value": its value (None when bad), "problem": the error or None}."""
    try:
        return {"text": text(name), "value": value(name), "problem": None}
    except ValueError as e:
        return {"text": text(name), "value": None, "problem": str(e)}


# ---- what the runtime asks

@functools.cache
def _auto_platform() -> str:
    for plugin in ("jax_cuda13_plugin", "jax_cuda12_plugin"):
        if importlib.util.find_spec(plugin) is not None:
            return "cuda"
    return "cpu"


def platform() -> str:
    name = settings.platform
    return _auto_platform() if name == "auto" else name


def _visible_cores() -> tuple[tuple[int, ...] | None, str]:
    """(the visible cores, the variable they came from): NEURON_RT_VISIBLE_CORES, or under a launcher
    (LOCAL_RANK set) the launcher's local rank; (None, ...): every core."""
    cores = settings.visible_cores
    if cores is not None:
        return cores, "NEURON_RT_VISIBLE_CORES"
    rank = settings.local_rank
    return (None if rank is None else parse_cores(rank, "LOCAL_RANK")), "LOCAL_RANK"


def launcher_core() -> int | None:
    """The core a launcher gave this process (LOCAL_RANK, when NEURON_RT_VISIBLE_CORES is unset)."""
    if text("NEURON_RT_VISIBLE_CORES") is not None:
        return None
    rank = settings.local_rank
    return int(rank) if rank is not None and rank.isdigit() else None


def host_device_count() -> int:
    """How many CPU devices XLA creates: every core some process may see."""
    count = settings.num_cores
    local_world = settings.local_world_size
    if local_world is not None and local_world.isdigit():
        count = max(count, int(local_world))
    cores, _var = _visible_cores()
    if cores:
        count = max(count, max(cores) + 1)
    return count


def visible_cores(available: int) -> list[int]:
    """Indices, among the platform's `available` devices, that this process uses as neuron:0..N-1."""
    cores, var = _visible_cores()
    if cores is None:
        if platform() == "cpu":
            available = min(available, host_device_count())
        return list(range(available))
    bad = [c for c in cores if c >= available]
    if bad:
        raise ValueError(f"{var}={text(var)!r} names core {bad[0]}, but the platform has {available}")
    return list(cores)


def cpu_device_count() -> int:
    """The neuron device count on the CPU platform, known without starting jax."""
    return len(visible_cores(host_device_count()))


def core_memory() -> int | None:
    """Each core's memory capacity (TORCH_NEURONX_CORE_MEMORY), or None: the platform's memory."""
    return settings.core_memory


def host_cache() -> int:
    """On the CPU platform, how many bytes of freed device memory stay resident for reuse
    (runtime/host_memory.py)."""
    return settings.host_cache


def native_kernels() -> str:
    """"auto", "on" or "off" (TORCH_NEURONX_NATIVE_KERNELS); runtime/native_kernels.py decides from it."""
    return settings.native_kernels
