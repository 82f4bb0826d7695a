"""Run settings, declared once and shared by the CLI, the GUI sliders and profiles."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

POLICIES = ("pinned", "lru")
EXPERT_POLICIES = ("lru", "lfu", "hot")

DEFAULT_PROMPT = "The history of the printing press begins"


@dataclass(frozen=True)
class RunSettings:
    """Everything that shapes one run.

    ``model_path`` None means the bundled gemma-3-270m. ``ssd_mb_s`` 0 means "no
    emulation, read as fast as this disk allows". ``budget_mb`` covers weights only
    (globals + resident shards); KV cache and compute buffers are charted apart.
    """

    model_path: str | None = None
    budget_mb: int = 4096
    shard_mb: int = 64
    prefetch_depth: int = 2
    threads: int = 2
    n_gpu_layers: int = 0
    policy: str = "pinned"
    ssd_mb_s: float = 0.0
    n_gen: int = 32
    n_ctx: int = 256
    prompt: str = DEFAULT_PROMPT
    temperature: float = 0.0
    seed: int = 0
    # MoE models only (names agreed with the knob registry): the expert cache's size
    # (0 = what the budget leaves after the dense weights), its policy, and whether the
    # next layer's likely experts are loaded ahead.
    expert_cache_mb: int = 0
    expert_policy: str = "lru"
    expert_speculation: bool = False

    def with_changes(self, **changes) -> "RunSettings":
        return replace(self, **changes)


# Declared ranges: used by the GUI sliders, profile validation and the CLI alike.
# (low, high) inclusive; the GUI clamps, the loaders refuse.
RANGES: dict[str, tuple[float, float]] = {
    "budget_mb": (16, 1_048_576),
    "shard_mb": (1, 65_536),
    "prefetch_depth": (0, 16),
    "threads": (1, 512),
    "n_gpu_layers": (0, 1024),
    "ssd_mb_s": (0, 1_000_000),
    "n_gen": (1, 100_000),
    "n_ctx": (16, 1_048_576),
    "temperature": (0, 10),
    "seed": (0, 2**31 - 1),
    "expert_cache_mb": (0, 1_048_576),
}

FIELD_TYPES = {f.name: f.type for f in fields(RunSettings)}


def validate(settings: RunSettings, source: str = "settings") -> RunSettings:
    """Refuse values no run could use, naming the key, before anything is loaded.

    ``source`` names where the values came from (a profile path, "command line") so
    the message tells the user which file or flag to fix.
    """
    from engine.errors import ShardscopeError

    for key, (low, high) in RANGES.items():
        value = getattr(settings, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ShardscopeError(f"{source}: '{key}' must be a number, got {value!r}")
        if not low <= value <= high:
            raise ShardscopeError(
                f"{source}: '{key}' = {value} is out of range ({low:g} to {high:g})"
            )
    if settings.policy not in POLICIES:
        raise ShardscopeError(
            f"{source}: 'policy' must be one of {', '.join(POLICIES)}, got {settings.policy!r}"
        )
    if settings.expert_policy not in EXPERT_POLICIES:
        raise ShardscopeError(
            f"{source}: 'expert_policy' must be one of {', '.join(EXPERT_POLICIES)}, got {settings.expert_policy!r}"
        )
    if not isinstance(settings.expert_speculation, bool):
        raise ShardscopeError(f"{source}: 'expert_speculation' must be true or false, got {settings.expert_speculation!r}")
    return settings
