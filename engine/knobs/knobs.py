"""Every run knob, declared once: RunSettings' fields carry their own range, unit, label,
CLI flag, sweep kind and whether a running run can take a new value.

Validation (engine.knobs.settings), the CLI flags (engine.cli.cli_args), sweep/tune lists
(engine.knobs.knob_ranges), profiles (engine.knobs.profile_file), the window's controls and every
"settings as text" read this registry, so a new knob is one ``knob(...)`` line here plus
the engine code that uses its value.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from typing import Any

DEFAULT_PROMPT = "The history of the printing press begins"


@dataclass(frozen=True)
class Knob:
    default: Any
    type: type  # the RunSettings field's type (int, float, str, bool)
    label: str  # "Prefetch depth": slider titles, form rows
    short: str  # "prefetch": change marks ("prefetch 1→2")
    column: str = ""  # compact name in lists, tables and legends ("depth 2"); default: short
    unit: str = ""  # "MB", "MB/s"; "" for counts
    counts: str = ""  # what a count is ("shards"), shown by the slider
    low: float | None = None  # inclusive range; None: not a number
    high: float | None = None
    choices: tuple[str, ...] = ()
    off: str = ""  # how 0 reads when 0 means something else ("off"; "auto" for the expert cache)
    tip: str = ""
    flag: str | None = None  # the bench CLI flag; None: no flag
    help: str | None = None
    sweep: str | None = None  # list kind for sweep/tune: "int", "num" (int when whole), "str" or "bool" (on,off)
    sweep_rank: int = 0  # order the sweep varies knobs in (last fastest)
    tune: str | None = None  # auto-tune's candidate list on the CLI; None: not tuned
    tune_rank: int = 0  # order coordinate descent visits knobs in
    propose: str | None = None  # what the search dialogs prefill; None: the current value
    slider: tuple[int, int, int] | None = None  # window control: (minimum, default maximum, step)
    live: bool = False  # a running run takes a new value between tokens; else it restarts
    setter: str = ""  # the run's method that takes a new value live (RunSkeleton.apply calls it)
    required: bool = False  # a profile must state it
    reported_as: str | None = None  # the RunSummary column holding the value the run used
    enabled: bool = True  # False: declared for a feature still to land; no flag, control or profile key
    streams: str = ""  # "layers" or "experts": the one run kind that uses it ("": both)
    name: str = ""  # filled from the field name

    @property
    def brief(self) -> str:
        return self.column or self.short

    def text(self, value) -> str:
        """"64 MB", "off", "lru": one value as settings-as-text shows it."""
        if self.off and not value:
            return self.off
        if isinstance(value, bool):
            return "on" if value else "off"
        shown = value if isinstance(value, str) else f"{value:g}"
        return f"{shown} {self.unit}".rstrip()


def knob(default, **meta) -> Any:
    meta.setdefault("type", str if default is None else type(default))
    return field(default=default, metadata={"knob": Knob(default=default, **meta)})


_CORES = os.cpu_count() or 2


@dataclass(frozen=True)
class RunSettings:
    """Everything that shapes one run (``model_path`` None: the bundled gemma-3-270m)."""

    model_path: str | None = knob(None, label="Model", short="model", flag="--model",
                                  help="GGUF file (default: the bundled gemma-3-270m)")
    budget_mb: int = knob(
        4096, label="Memory budget", short="budget", unit="MiB", low=1, high=1_048_576, flag="--budget-mb",
        help="the memory budget: what the weights may occupy (MiB)", sweep="num", sweep_rank=5,
        slider=(1, 4096, 1), live=True, setter="set_budget_mb",
        required=True,
        tip="Weights allowed in memory (globals + resident shards). "
            "KV cache and compute buffers are charted apart as 'other RSS'.")
    shard_mb: int = knob(
        64, label="Shard size", short="shard", unit="MiB", low=1, high=65_536, flag="--shard-mb",
        help="shard size", sweep="num", sweep_rank=1, tune="8,16,32,64,128", tune_rank=2,
        propose="16,32,64", slider=(1, 512, 1), required=True, streams="layers",
        tip="Unit of loading and eviction. Changing it re-plans: the run restarts.")
    prefetch_depth: int = knob(
        2, label="Prefetch depth", short="prefetch", column="depth", counts="shards", low=0, high=16,
        flag="--prefetch-depth",
        sweep="int", sweep_rank=2, tune="0-4", tune_rank=3, propose="0-2", slider=(0, 16, 1), live=True,
        setter="set_prefetch_depth",
        required=True, streams="layers", tip="Streamed shards loaded ahead of the layer being computed.")
    threads: int = knob(
        2, label="Threads", short="threads", counts="threads", low=1, high=512, flag="--threads", sweep="int",
        sweep_rank=3, tune="", tune_rank=4, slider=(1, max(2, _CORES), 1), live=True, setter="set_threads",
        required=True,
        reported_as="n_threads", tip="llama.cpp compute threads (applies from the next token).")
    n_gpu_layers: int = knob(
        0, label="GPU layers", short="GPU layers", counts="layers", low=0, high=1024, flag="--n-gpu-layers",
        sweep="int", sweep_rank=4, slider=(0, 64, 1),
        tip="Layers offloaded to the GPU. Changing it reloads the model: the run restarts.")
    policy: str = knob(
        "pinned", label="Policy", short="policy", choices=("pinned", "lru"), flag="--policy",
        sweep="str", sweep_rank=6, tune="pinned,lru", tune_rank=1, live=True, setter="set_policy",
        required=True, streams="layers", tip="pinned: keep a fixed prefix of shards resident, stream the rest\n"
                           "lru: every shard competes; thrashes once the model exceeds the budget")
    ssd_mb_s: float = knob(
        0.0, label="SSD emulation", short="SSD", unit="MB/s", off="off", low=0, high=1_000_000, flag="--ssd-mb-s",
        help="emulate an SSD of this read bandwidth (0: off)", sweep="num", sweep_rank=7, slider=(0, 4000, 10),
        live=True, setter="set_ssd_mb_s", reported_as="emulated_ssd_mb_s",
        tip="Cap shard loads at this rate to emulate a slower disk. 0 = off (this disk's speed).")
    n_gen: int = knob(32, label="Tokens", short="tokens", low=1, high=100_000, flag="--tokens",
                      help="tokens to generate")
    n_ctx: int = knob(256, label="Context", short="context", low=16, high=1_048_576, flag="--n-ctx",
                      help="context size (default: fits prompt+tokens)")
    prompt: str = knob(DEFAULT_PROMPT, label="Prompt", short="prompt", flag="--prompt")
    temperature: float = knob(0.0, label="Temperature", short="temperature", low=0, high=10,
                              flag="--temperature", help="0: greedy")
    seed: int = knob(0, label="Seed", short="seed", low=0, high=2**31 - 1, flag="--seed")
    # MoE expert streaming (engine.experts.expert_run): read only the experts the router picks.
    # Dense models ignore them (a sweep or tune varies them only for MoE models); all three are live.
    expert_cache_mb: int = knob(
        0, label="Expert cache", short="expert cache", unit="MiB", off="auto", low=0, high=1_048_576,
        flag="--expert-cache-mb",
        sweep="num", sweep_rank=8, tune="0", tune_rank=5, propose="0", live=True, setter="set_expert_cache_mb",
        slider=(0, 4096, 1),
        streams="experts",
        tip="Memory for routed experts; 0 = auto: what the budget leaves once the trunk has its share.")
    expert_policy: str = knob(
        "auto", label="Expert policy", short="expert policy", choices=("auto", "decay", "lru", "lfu", "hot"),
        flag="--expert-policy", sweep="str", sweep_rank=9, tune="auto,decay,lru,lfu,hot", tune_rank=6,
        live=True, setter="set_expert_policy", streams="experts",
        tip="Which cached experts make room: auto (follows whichever of lru, lfu, decay and a router-rank decay "
            "would have hit most over the last tokens; docs/real-traces.md), decay (the longest expected wait by a "
            "decaying pick count), least recently used, least frequently used, or keep the hot set")
    expert_speculation: bool = knob(
        False, label="Expert speculation", short="speculation", flag="--expert-speculation", sweep="bool",
        sweep_rank=10, tune="off,on", tune_rank=7, live=True, setter="set_expert_speculation", streams="experts",
        tip="Prefetch the experts the router is predicted to pick for the next layer")
    # The split of an MoE budget between its trunk and its expert cache (engine/layout/budget_minimum.py).
    trunk_share: int = knob(
        0, label="Trunk share", short="trunk share", column="trunk", unit="%", off="auto", low=0, high=100,
        flag="--trunk-share", help="percent of the budget above the minimum the trunk may keep resident, "
                                   "the rest for the expert cache (0: the engine chooses)",
        sweep="num", sweep_rank=11, tune="0,1,25,50,75,100", tune_rank=8, propose="0,1,50,100",
        slider=(0, 100, 1), live=True, setter="set_trunk_share", streams="experts",
        tip="How the budget above the minimum is split: this percent to the trunk's resident layers "
            "(read again every token when not resident), the rest to the expert cache. "
            "0 = auto: the engine's choice from the model and the budget.")

    def with_changes(self, **changes) -> "RunSettings":
        return replace(self, **changes)


KNOBS: dict[str, Knob] = {f.name: replace(f.metadata["knob"], name=f.name) for f in fields(RunSettings)}
ENABLED: tuple[str, ...] = tuple(k for k, spec in KNOBS.items() if spec.enabled)
LIVE: frozenset[str] = frozenset(k for k, spec in KNOBS.items() if spec.live)
LAYER_KNOBS: tuple[str, ...] = tuple(k for k, spec in KNOBS.items() if spec.streams == "layers")
EXPERT_KNOBS: tuple[str, ...] = tuple(k for k, spec in KNOBS.items() if spec.streams == "experts")
SWEPT: tuple[str, ...] = tuple(sorted((k for k in ENABLED if KNOBS[k].sweep), key=lambda k: KNOBS[k].sweep_rank))
TUNED: tuple[str, ...] = tuple(sorted((k for k in ENABLED if KNOBS[k].tune is not None),
                                      key=lambda k: KNOBS[k].tune_rank))


def changed(old: RunSettings, new: RunSettings) -> list[str]:
    """The fields whose values differ, in declaration order."""
    return [k for k in KNOBS if getattr(old, k) != getattr(new, k)]


def describe(values, keys=None) -> str:
    """"shard 64 MB, depth 2, threads 2": settings (or a RunSummary) as one line.

    A RunSummary is read through each knob's ``reported_as`` column.
    """
    parts = []
    for key in keys if keys is not None else SWEPT:
        spec = KNOBS[key]
        source = spec.reported_as if spec.reported_as and not isinstance(values, RunSettings) else key
        if not hasattr(values, source):  # a dense run's summary has no expert columns
            continue
        if spec.streams == "layers" and not isinstance(values, RunSettings) and getattr(values, "expert_policy", ""):
            continue  # an expert run's row: no shards, no prefetch, no layer policy to show
        parts.append(f"{spec.brief} {spec.text(getattr(values, source))}")
    return ", ".join(parts)
