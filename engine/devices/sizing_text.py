"""The sizing answer as text: what `shardscope plan` prints (engine/devices/sizing.py computes it)."""

from __future__ import annotations

from shardscope.engine.base.quantity_text import bytes_text, mib_text, params_text, plural, rate_text, seconds_text
from shardscope.engine.devices.sizing import SizingResult
from shardscope.engine.layout.budget_minimum import STEP_LAYERS, whole_mb


def format_sizing(result: SizingResult) -> str:
    """The multi-line text ``shardscope plan`` prints: numbers, then how they were got."""
    r = result
    p = r.projection
    unver = set(r.unverified)

    def tag(quantity: str) -> str:
        return " (unverified)" if quantity in unver else ""

    lines = [f"Plan: {r.model} on {r.device_name}"]
    if r.bytes_source:
        lines.append(f"  bytes from  {r.bytes_source}")
    lines.append(
        f"  device      SSD {r.ssd_mb_s:g} MB/s{tag('ssd_read_mb_s')}, "
        f"{r.ssd_latency_us:g} µs per request{tag('ssd_latency_us')}, queue depth {r.ssd_queue_depth}"
        f"{tag('ssd_queue_depth')}, "
        f"DRAM {r.dram_mb_s:g} MB/s{tag('dram_mb_s')}"
    )
    kind = "MoE" if r.is_moe else "dense"
    made_of = (f"{params_text(r.n_params)} params x {r.bits_per_weight:.3g} bits, {kind}" if r.n_params > 0
               else f"{kind}, bytes as the header gives them")
    lines.append(
        f"  weights     {bytes_text(r.weight_bytes)} ({made_of}), {plural(r.n_layers, 'layer')} x "
        f"{bytes_text(r.bytes_per_layer)}, globals {bytes_text(r.globals_bytes)}"
    )
    share = r.active_bytes_per_token / r.weight_bytes
    lines.append(
        f"  per token   touches {bytes_text(r.active_bytes_per_token)} ({share * 100:.3g}% of the weights)"
    )
    lines.append(f"  budget      {mib_text(r.budget_bytes)} for weights ({r.budget_note})")
    if r.minimum_parts:  # the run's own minimum (engine/layout/budget_minimum.py): bench accepts it, not a MiB less
        lines.append(f"  minimum     {whole_mb(r.min_budget_bytes):,} MiB = {r.minimum_parts}; the one bench accepts "
                     "with the same --shard-mb and --prefetch-depth")
    elif r.is_moe:  # the expert run's own rule on the shape's bytes
        lines.append(
            f"  minimum     {whole_mb(r.min_budget_bytes):,} MiB = dense {mib_text(r.dense_resident_bytes)} "
            f"(resident) + {STEP_LAYERS} x {mib_text(r.layer_picks_bytes)} (one layer's picked experts: the layer "
            f"computing and the next loading; --expert-speculation adds 1 x); the prompt goes in micro-batches "
            "that fit the expert cache")
    else:
        lines.append(
            f"  minimum     {whole_mb(r.min_budget_bytes):,} MiB = globals {mib_text(r.globals_bytes)} + "
            f"{2 if r.prefetch else 1} x {mib_text(r.active_bytes_per_layer)} (one layer's bytes per token"
            + (": the layer computing and the one being read)" if r.prefetch else ")")
        )
    if r.fits_in_memory:
        lines.append(f"  residency   the whole model fits: {mib_text(r.resident_bytes)} resident, nothing streams")
    elif r.trunk_streams:
        how = "the engine's choice: the trunk first" if r.trunk_share_chosen else "given"
        lines.append(
            f"  split       trunk share {r.trunk_share} % of the {mib_text(r.budget_bytes - r.min_budget_bytes)} above "
            f"the minimum ({how}): trunk {mib_text(r.trunk_hold_bytes)} of {mib_text(r.trunk_bytes)} held, expert "
            f"cache {mib_text(r.expert_cache_bytes)} (one step's picks take {mib_text(r.staging_bytes)} of it)")
        lines.append(
            f"  residency   the trunk streams by layer beside the experts: {mib_text(r.resident_bytes)} resident; "
            f"{r.hit_rate:.2%} of a token's layer bytes served from memory")
    elif r.is_moe:
        held = r.resident_bytes - r.dense_resident_bytes
        lines.append(
            f"  residency   dense {mib_text(r.dense_resident_bytes)} + expert cache "
            f"{mib_text(r.expert_cache_bytes)} (budget - dense, what the run uses; one step's picks take "
            f"{mib_text(r.staging_bytes)} of it"
            + (f"; pinned: {mib_text(held)} held for good" if held < r.expert_cache_bytes and r.policy == "pinned"
               else "")
            + f"); {r.hit_rate:.2%} of a token's layer bytes served from memory"
        )
    else:
        lines.append(
            f"  residency   {r.policy}: {mib_text(r.resident_bytes)} resident "
            f"(globals {mib_text(r.globals_bytes)} + cache {mib_text(r.resident_bytes - r.globals_bytes)}) "
            f"+ {mib_text(r.staging_bytes)} layer buffers; {r.hit_rate:.2%} of a token's layer bytes "
            "served from memory"
        )
    lines.append(f"  streamed    {bytes_text(r.streamed_bytes_per_token)} per token from the SSD")
    if r.is_moe and not r.fits_in_memory:
        trunk = r.trunk_streamed_bytes if r.trunk_streams else 0.0
        experts = r.expert_streamed_bytes if r.trunk_streams else r.streamed_bytes_per_token
        lines.append(f"    trunk     {bytes_text(trunk)} per token (its layers not held"
                     + (")" if r.trunk_streams else ": none, the trunk is resident)"))
        lines.append(f"    experts   {bytes_text(experts)} per token (picked experts not in the cache)")
    if not r.fits_in_memory and r.ttft_s > 0:
        batches = (f"in micro-batches of {plural(r.prompt_batch_tokens, 'token')} (what the expert cache holds of "
                   "their picks), each reading the streamed trunk again" if r.prompt_batch_tokens else "in one pass")
        lines.append(f"  TTFT        {seconds_text(r.ttft_s)} for a {r.prompt_tokens}-token prompt's reads, {batches}"
                     + ("" if r.compute_s_per_token > 0 else "; compute not modelled"))
    combine = (
        "max(ssd, dram, compute): prefetch overlaps reads with compute"
        if p.overlapped
        else "ssd + max(dram, compute): without prefetch, compute waits for each read"
    )
    lines.append(f"  projection  {seconds_text(p.s_per_token)} per token = {rate_text(p.tokens_per_s)}, {p.bound_text}")
    lines.extend(projection_figure_lines(p))
    if r.flash_model:
        lines.append(f"    flash     {r.flash_model}")
    lines.append(
        f"    ssd       {seconds_text(p.terms['ssd'])} = {bytes_text(r.streamed_bytes_per_token)} / "
        f"{r.ssd_mb_s / 1000:g} GB/s"
        + (f" + {seconds_text(p.ssd_latency_s)} of request latency the queue depth does not hide "
           f"({r.ssd_latency_us:g} µs each, {r.ssd_queue_depth} in flight: a request waits while those ahead "
           f"transfer, so only each layer's first request waits in full, after its router picks)"
           if p.ssd_latency_s > 0 else "")
    )
    lines.append(
        f"    dram      {seconds_text(p.terms['dram'])} = "
        f"{bytes_text(r.active_bytes_per_token - r.streamed_bytes_per_token)} resident bytes touched / "
        f"{r.dram_mb_s / 1000:g} GB/s"
    )
    if r.compute_s_per_token > 0:
        lines.append(f"    compute   {seconds_text(p.terms['compute'])} (given)")
    else:
        lines.append("    compute   not modelled (pass --compute-s-per-token): tok/s is an upper bound")
    lines.append(f"    combined  {combine}")
    if r.assumptions:
        lines.append("  assumptions")
        lines.extend(f"    - {a}" for a in r.assumptions)
    lines.append(f"  summary     {r.summary}")
    lines.append("  units       memory in MiB (2^20 bytes, the unit of --budget-mb); sizes and rates "
                 "in decimal MB/GB/TB")
    return "\n".join(lines)


def projection_figure_lines(p) -> list[str]:
    """The serial time and the overlapped bound, which one the engine does, each with the error the
    phone check measured on published runs (engine/devices/projection_error.py)."""
    from shardscope.engine.devices.projection_error import error_text

    return [f"    serial    {rate_text(p.serial_tok_s)} = 1 / (ssd + max(dram, compute)): nothing overlapped; "
            f"{error_text('serial_tok_s')}",
            f"    overlapped bound {rate_text(p.overlapped_tok_s)} = 1 / max(ssd, dram, compute): the best case; "
            f"{error_text('overlapped_tok_s')}",
            f"    engine    {p.engine_text}"]
