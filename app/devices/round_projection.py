"""A round's device projection as the window shows it: one number and honest sentences.

``engine.devices.run_projection.projection_for`` does the arithmetic and returns a value
(the caller attaches it to the RunSummary so the exported CSV carries it); this
module only decides how it reads: "projected on iPhone 16 Pro (USB-C SSD): 5.75 tok/s
(ssd-bound)". The presets mark numbers that are derived, borrowed from a sibling
device or assumed as unverified; a projection built on them is an estimate, and
the caption says so rather than letting a guess pass for a measurement. Its compute
factor is named ("compute: assumed = this host × 1.0" until the device is calibrated), and
where the round measured here and the projection differ by more than 1.5× the caption says
which term differs and the two rates behind it (engine.devices.run_projection.differs_note).
A round whose host stalled says so; its projection leaves the stalled tokens out.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardscope.engine.devices.devices import Device, get_device
from shardscope.engine.devices.projection import Projection
from shardscope.engine.devices.run_projection import compute_basis, differs_note, projection_for, round_stall
from shardscope.widgets import format_number

# The preset quantities the roofline's three terms read; the app memory limit sets no tok/s.
PROJECTION_INPUTS: dict[str, str] = {
    "ssd_read_mb_s": "SSD read speed",
    "dram_mb_s": "DRAM bandwidth",
    "compute_scale": "per-core speed",
    "cpu": "performance cores",
}


@dataclass(frozen=True)
class RoundProjection:
    device_id: str
    device_name: str
    tok_s: float
    bound: str  # "ssd", "dram" or "compute"
    unverified: tuple[str, ...]  # PROJECTION_INPUTS keys the preset marks unverified
    sources: tuple[str, ...] = ()
    projection: Projection | None = None  # the engine's value, for fill_device_columns
    basis: str = ""  # where the compute factor comes from ("assumed = this host × 1.0 …")
    differs: str = ""  # why measured here and projected differ by > 1.5× ("" when they do not)
    stall: str = ""  # what stalled the round's host ("" for a clean round): its tokens are left out

    def caption(self) -> str:
        text = f"projected on {self.device_name}: {format_number(self.tok_s)} tok/s ({self.bound}-bound)"
        if self.projection is not None:  # both figures, the serial one with the error the phone check measured
            from shardscope.engine.devices.projection_error import error_text

            p = self.projection
            text += (f"; serial {format_number(p.serial_tok_s)} ({error_text('serial_tok_s')}), "
                     f"overlapped bound {format_number(p.overlapped_tok_s)} (the best case)")
        text += " (unverified numbers)" if self.unverified else ""
        if self.bound == "compute" and self.basis.startswith("assumed"):  # then the figure is this host's speed
            text += f"; compute {self.basis.split(' (')[0]}"
        if self.stall:
            text += f"; this round: {self.stall}, left out of the projection"
        return text + (f"\n{self.differs}" if self.differs else "")

    def tooltip(self) -> str:
        lines = [f"Projection of this round's measured bytes/token and compute onto "
                 f"{self.device_name} ({self.device_id}), not a measurement"
                 + (f": {self.projection.figures_text()}; {self.projection.engine_text}." if self.projection else "."),
                 "Compute: the median token's compute here (stalled tokens left out) × the device's "
                 f"compute factor, {self.basis or 'from the preset'}."]
        if self.unverified:
            names = ", ".join(PROJECTION_INPUTS[k] for k in self.unverified)
            lines.append(f"Unverified preset numbers: {names}.")
        lines.extend(self.sources)
        return "\n".join(lines)


def unverified_inputs(device: Device) -> tuple[str, ...]:
    return tuple(k for k in PROJECTION_INPUTS if not device.is_verified(k))


def project_round(summary, device_id: str) -> RoundProjection:
    """The round's projection, described; the summary is untouched. ShardscopeError if it
    cannot be projected (a round stopped before its second token has no tok/s)."""
    device = get_device(device_id)
    p = projection_for(summary, device_id)
    unverified = unverified_inputs(device)
    sources = tuple(f"{PROJECTION_INPUTS[k]}: {device.sources[k]}" for k in unverified if k in device.sources)
    return RoundProjection(device.id, device.name, round(p.tokens_per_s, 4), p.bound, unverified, sources, p,
                           basis=compute_basis(device), differs=differs_note(summary, p, device_id),
                           stall=round_stall(summary))
