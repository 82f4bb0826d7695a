"""The run's four strip charts on one time axis, and what each sample puts on them.

One place says which MetricsSample field feeds which curve, so the window, the
export and the tests agree on "the hit-rate curve is ``cache_hit_rate``". Units are
the project's (engine/base/units.py): memory MiB, bandwidth 10^6 B/s, rates in %.

Layout choices come from looking at the window: the largest curve (RSS) auto-
ranges to the very top of its plot, right under the legend and the change
markers' labels, where it disappeared. So every plot keeps its top quarter free
(see keep_top_clear). Legends sat in the title row at first, beside the title, until
an MoE run's four hit-rate entries grew wider than the room the title leaves and
covered it ("Cache hits, on time"): now the title row holds only the title, and the
legend sits in the plot's free top band, right-aligned.
"""

from __future__ import annotations

import math

from shardscope.engine.measure.metric_registry import chart_curves
from shardscope.engine.measure.metrics import MetricsSample
from shardscope.widgets import LiveChart, format_number

# Resident weights use the shard map's "resident" green on purpose: same meaning.
COLORS = {
    "rss": "#555d66", "weights": "#3a9d5d", "other": "#d9822b", "budget": "#d62728",
    "ssd": "#1f77b4", "emulated": "#e377c2", "hit": "#2f6fdb", "ontime": "#17becf", "toks": "#9467bd",
    "projected": "#8c564b",
}
PLOTS = ("memory", "ssd", "hit", "toks")
# curve key -> MetricsSample field, from the metric registry (engine/measure/metric_registry.py)
CURVES = chart_curves()
CURVE_FIELDS = {curve: m.name for curve, m in CURVES.items()}
FRACTION_CURVES = tuple(curve for curve, m in CURVES.items() if m.fraction)  # fractions 0..1, the axis is %
# The words of the hit plot, said in the window (docs/window.md "Words on the charts").
ON_TIME = ("on time: of the weight bytes the tokens needed, the share in memory when compute reached them "
           "(already resident, or read ahead early enough). On time \u2265 the hit rate: the gap is prefetch "
           "that arrived in time.")
HIT_TIP = ("cache hit rate (from RAM): of the weight bytes the tokens needed, the share in memory without any "
           "disk read.\n" + ON_TIME)


def build_run_chart() -> LiveChart:
    chart = LiveChart(capacity=6000, refresh_hz=12.0)  # 10 minutes at the sampler's 10 Hz
    chart.add_plot("memory", "Memory (other = KV cache, buffers, app)", "MiB")
    chart.add_curve("memory", "rss", CURVES["rss"].label, COLORS["rss"])
    # No fills under curves: an alpha fill in software raster was half a frame's cost
    # (profiled; docs/decisions.md), and every frame is time taken from the run under it.
    chart.add_curve("memory", "weights", "weights", COLORS["weights"])
    chart.add_curve("memory", "other", CURVES["other"].label, COLORS["other"])
    chart.add_curve("memory", "gpu", CURVES["gpu"].label, "#bcbd22",
                    short="GPU")  # GPU memory in use (n_gpu_layers), issue #35
    chart.add_level_line("memory", "budget", "budget", COLORS["budget"])
    chart.add_plot("ssd", "SSD reads (read_bytes; 1 MB = 10⁶ B, as the emulated SSD)", "MB/s")
    chart.add_curve("ssd", "ssd", "read MB/s", COLORS["ssd"], short="read")
    chart.add_level_line("ssd", "emulated", "emulated SSD", COLORS["emulated"])
    chart.add_plot("hit", "Cache hits, on time (per s or token)", "%")
    chart.add_curve("hit", "hit", CURVES["hit"].label, COLORS["hit"], short="hit (RAM)")
    chart.add_curve("hit", "ontime", CURVES["ontime"].label, COLORS["ontime"])
    chart.add_plot("toks", "Tokens per second", "tok/s")
    chart.add_curve("toks", "toks", "tok/s", COLORS["toks"])
    chart.add_level_line("toks", "projected", "projected", COLORS["projected"])
    chart.setMinimumWidth(340)  # with the expert column the window still fits 1280 px
    for key in PLOTS:
        keep_top_clear(chart.plot_item(key))
    for key in ("memory", "toks"):
        chart.scale_from_zero(key)  # 0.01 tok/s is a line, not the floor of a 0-1 axis
    # An emulated SSD of 860 MB/s over 20 MB/s of reads flattened the reads to the floor:
    # the emulation line is drawn only within 4x the reads' top, and named in the title above that.
    chart.scale_from_zero("ssd", level_within=4.0)
    # a percentage: a fixed axis (not 99.6-100.4 at a steady 100 %), 0 to 125 % or more: 100 % stays
    # below the legend however many rows the legend takes
    chart.fixed_range("hit", 100.0)
    chart.set_plot_tip("hit", HIT_TIP)
    return chart


def keep_top_clear(item) -> None:
    """Title left, alone in its row; legend top-right inside the plot; 15 % padding, floor 0.

    Every charted quantity is >= 0, and pyqtgraph shifts a padded range up to the
    floor instead of cutting it, so the data's top lands at ~77 % of the height,
    below the legend and the marker labels (92 %).
    """
    item.titleLabel.setText(item.titleLabel.text, justify="left")
    legend = item.legend
    if legend is not None:
        legend.setParentItem(item.getViewBox())  # below the title row: it can never cover the title
        legend.anchor(itemPos=(1, 0), parentPos=(1, 0), offset=(-2, 1))
    vb = item.getViewBox()
    vb.setDefaultPadding(0.15)
    vb.setLimits(yMin=0)


def sample_values(s: MetricsSample) -> dict[str, float]:
    """Chart values of one sample; a rate measured as "n/a" (None) is a gap, not 0."""
    values = {}
    for curve, field in CURVE_FIELDS.items():
        value = getattr(s, field, None)
        if value is None:
            value = math.nan
        values[curve] = 100.0 * value if curve in FRACTION_CURVES else value
    return values


def set_projection(chart: LiveChart, tok_s: float | None, label: str) -> None:
    """Show (or hide, with None) the projected tok/s line with a device's name on it."""
    shown = tok_s is not None and math.isfinite(tok_s)
    text = f"{label} {format_number(float(tok_s))} tok/s".strip() if shown else None
    chart.set_level("projected", tok_s, text)  # braces in a device name survive (set_level escapes them)
