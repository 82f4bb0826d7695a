"""What-if sizing from a GGUF header: exact sizes, layers, globals and the expert split read from
the tensor table (never the weights), then the arithmetic of engine/devices/sizing.py."""

from __future__ import annotations

import math
import re
from pathlib import Path

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.devices.devices import Device
from shardscope.engine.devices.sizing import ModelShape, SizingResult, bytes_text, size_shape

# ---------------------------------------------------------------- from GGUF
_SPLIT_RE = re.compile(r"^(?P<stem>.*)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$")


def _split_parts(path: Path) -> list[Path]:
    """All files of a split GGUF (``name-00001-of-00003.gguf``), or just ``path``.

    A model too big to run is usually split; planning from one part would silently
    undercount it, so a missing part is an error that names it.
    """
    match = _SPLIT_RE.match(path.name)
    if not match:
        return [path]
    count = int(match.group("count"))
    parts = [path.with_name(f"{match.group('stem')}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    for part in parts:
        if not part.exists():
            raise ShardscopeError(f"{path}: split model part {part.name} is missing (needs all {count} parts)")
    return parts


def _state(path: Path) -> dict:
    """The recurrent layers' fixed state (KDA, gated delta net, deepseek4's compressors) from the header."""
    from shardscope.engine.layout.recurrent_state import recurrent_state_of_file

    state, note = recurrent_state_of_file(path)
    return {"state_bytes": float(state), "state_note": note} if state else {}


def _shape_from_gguf(path: str | Path, settings=None) -> ModelShape:
    """``settings``: the knobs the run's minimum depends on (shard size, prefetch depth); default: bench's."""
    from shardscope.engine.layout.gguf_layout import read_layout  # needs the gguf package; import only when used

    path = Path(path)
    if not path.exists():
        raise ShardscopeError(f"{path}: no such file")
    layouts = [read_layout(part) for part in _split_parts(path)]
    meta: dict = {}
    for layout in layouts:
        meta.update({k: v for k, v in layout.metadata.items() if k not in meta})
    arch = str(meta.get("general.architecture", "unknown"))

    globals_ = 0
    dense: dict[int, int] = {}
    experts: dict[int, int] = {}
    n_params = 0
    for layout in layouts:
        for t in layout.tensors:
            n_params += math.prod(t.shape)
            if t.layer is None:
                globals_ += t.n_bytes
            elif t.name.endswith("_exps.weight"):  # routed experts (their biases and scales are dense)
                experts[t.layer] = experts.get(t.layer, 0) + t.n_bytes
            else:
                dense[t.layer] = dense.get(t.layer, 0) + t.n_bytes
    layers = sorted(set(dense) | set(experts))
    if not layers:
        raise ShardscopeError(f"{path}: no layer tensors (blk.N.*) found; cannot plan streaming")
    weight = globals_ + sum(dense.values()) + sum(experts.values())
    assumptions: list[str] = []

    f = 1.0
    if experts:
        n_exp = meta.get(f"{arch}.expert_count")
        n_used = meta.get(f"{arch}.expert_used_count")
        _refuse_bad_expert_counts(path, arch, n_exp, n_used, layouts)
        if isinstance(n_exp, int) and isinstance(n_used, int):
            f = n_used / n_exp
        else:
            assumptions.append(
                f"{arch}.expert_count / expert_used_count missing or invalid in the header: "
                "every expert counted as touched (pessimistic)"
            )
    units = [dense.get(k, 0) + f * experts.get(k, 0) for k in layers]
    label = f"{meta.get('general.name') or path.name} ({bytes_text(weight)})"
    # Expert streaming keeps the dense bytes and streams the picks: its minimum is the run's own
    # (engine/layout/budget_minimum.py: whole pages, edge pages), so the minimum printed is one
    # `bench` accepts. A split file is not one mapping: there, the same rule on the tensor bytes.
    streamed = {}
    if f < 1 and experts:
        streamed = dict(dense_resident_bytes=float(globals_ + sum(dense.values())),
                        layer_picks_bytes=max(f * b for b in experts.values()))
    if len(layouts) == 1:  # one mapping: the run's own minimum and trunk, as bench applies them
        streamed.update(_run_minimum(layouts[0], settings))
    return ModelShape(
        label=label,
        weight_bytes=float(weight),
        globals_bytes=float(globals_),
        dense_layer_bytes=float(sum(dense.values())),
        expert_bytes=float(sum(experts.values())),
        expert_fraction=f,
        n_layers=len(layers),
        unit_bytes=max(units),
        n_params=float(n_params),
        bits_per_weight=8 * weight / n_params,
        assumptions=tuple(assumptions),
        bytes_source=f"the GGUF header of {path} (tensor table: each layer's expert and dense tensors)",
        **_state(path),
        **streamed,
    )


def _run_minimum(layout, settings) -> dict:
    """The run's minimum (engine/layout/budget_minimum.py minimum_of_layout: what bench accepts, one MiB
    less refused) and, for an MoE file, the trunk's streamable bytes and window."""
    from shardscope.engine.knobs.settings import RunSettings
    from shardscope.engine.layout import budget_minimum
    from shardscope.engine.layout.moe_layout import read_moe_layout

    settings = settings or RunSettings(model_path=layout.path)
    try:
        minimum = budget_minimum.minimum_of_layout(layout, settings)
    except ShardscopeError:  # a file bench refuses to run (e.g. no expert counts): no run minimum to match
        return {}
    out = dict(minimum_bytes=float(minimum.bytes), minimum_parts=minimum.parts())
    moe = read_moe_layout(layout)
    if moe is not None:
        trunk = budget_minimum.trunk_plan_for(layout, moe, settings)
        out.update(dense_resident_bytes=float(budget_minimum.resident_dense_bytes(moe)),
                   layer_picks_bytes=float(moe.n_expert_used * budget_minimum.booked_unit_bytes(moe)),
                   trunk_bytes=float(trunk.streamable_bytes if trunk is not None else 0),
                   trunk_window_bytes=float(minimum.window_bytes),
                   n_expert=moe.n_expert, n_expert_used=moe.n_expert_used)
    return out


def _refuse_bad_expert_counts(path: Path, arch: str, n_exp, n_used, layouts) -> None:
    """Counts that are given but wrong are refused as ``bench`` refuses them (llama.cpp would abort
    loading such a file), so plan never sizes a model no run could load. Missing counts are
    only an assumption here: the plan then counts every expert as touched."""
    from shardscope.engine.layout.moe_layout import MAX_EXPERTS

    if n_exp is not None and not (isinstance(n_exp, int) and 0 < n_exp <= MAX_EXPERTS):
        raise ShardscopeError(f"{path}: {arch}.expert_count is {n_exp}; llama.cpp takes 1 to {MAX_EXPERTS}")
    if n_exp is not None and n_used is not None and not (isinstance(n_used, int) and 0 < n_used <= n_exp):
        raise ShardscopeError(f"{path}: {arch}.expert_used_count is {n_used}, but it must be 1 to "
                              f"{arch}.expert_count ({n_exp})")
    if n_exp is None:
        return
    for layout in layouts:
        for t in layout.tensors:
            if t.layer is not None and t.name.endswith("_exps.weight") and (len(t.shape) != 3 or t.shape[2] != n_exp):
                held = t.shape[2] if len(t.shape) == 3 else 1
                raise ShardscopeError(f"{path}: {t.name} (shape {list(t.shape)}) does not divide into "
                                      f"{arch}.expert_count = {n_exp} experts (it holds {held})")


def size_from_gguf_header(
    path: str | Path,
    device: Device | str,
    budget_mb: float | None = None,
    policy: str = "pinned",
    prefetch: bool = True,
    *,
    compute_s_per_token: float = 0.0,
    ssd_mb_s: float | None = None,
    expert_hit_rate: float | None = None,
    expert_trace=None,
    expert_policy: str = "auto",
    trunk_share: int = 0,
    settings=None,
) -> SizingResult:
    """Plan from a GGUF file's header: exact sizes, layers, globals and expert split.

    Reads only the header and tensor table (engine.layout.gguf_layout), never the weights,
    so planning a 1.5 TB model costs milliseconds. All parts of a split model are read.
    """
    return size_shape(
        _shape_from_gguf(path, settings),
        device,
        budget_mb=budget_mb,
        policy=policy,
        prefetch=prefetch,
        compute_s_per_token=compute_s_per_token,
        ssd_mb_s=ssd_mb_s,
        expert_hit_rate=expert_hit_rate,
        expert_trace=expert_trace,
        expert_policy=expert_policy,
        trunk_share=trunk_share,
    )
