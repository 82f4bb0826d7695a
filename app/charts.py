"""The run's four strip charts on one time axis, and what each sample puts on them.

One place says which MetricsSample field feeds which curve, so the window, the
export and the tests agree on "the hit-rate curve is ``cache_hit_rate``".

Layout choices come from looking at the window: the largest curve (RSS) auto-
ranges to the very top of its plot, right under the legend and the change
markers' labels, where it disappeared. So titles go left and legends right in
the title row, and every plot keeps its top quarter free (see keep_top_clear).
"""

from __future__ import annotations

import math

from engine.metrics import MetricsSample
from widgets import LiveChart, format_number

# Resident weights use the shard map's "resident" green on purpose: same meaning.
COLORS = {
    "rss": "#555d66", "weights": "#3a9d5d", "other": "#d9822b", "budget": "#d62728",
    "ssd": "#1f77b4", "emulated": "#e377c2", "hit": "#2f6fdb", "toks": "#9467bd", "projected": "#8c564b",
}
PLOTS = ("memory", "ssd", "hit", "toks")
# curve key -> MetricsSample field
CURVE_FIELDS = {
    "rss": "rss_mb", "weights": "resident_weights_mb", "other": "other_rss_mb",
    "ssd": "ssd_mb_s", "hit": "cache_hit_rate", "toks": "tok_s",
}


def build_run_chart() -> LiveChart:
    chart = LiveChart(capacity=6000, refresh_hz=12.0)  # 10 minutes at the sampler's 10 Hz
    chart.add_plot("memory", "Memory (other = KV cache, buffers, app)", "MB")
    chart.add_curve("memory", "rss", "RSS", COLORS["rss"])
    chart.add_curve("memory", "weights", "weights", COLORS["weights"], fill_to_zero=True)
    chart.add_curve("memory", "other", "other", COLORS["other"])
    chart.add_level_line("memory", "budget", "budget", COLORS["budget"])
    chart.add_plot("ssd", "SSD reads (kernel read_bytes)", "MB/s")
    chart.add_curve("ssd", "ssd", "read MB/s", COLORS["ssd"], fill_to_zero=True)
    chart.add_level_line("ssd", "emulated", "emulated SSD", COLORS["emulated"])
    chart.add_plot("hit", "Cache hit rate (last second)", "%")
    chart.add_curve("hit", "hit", "hit rate", COLORS["hit"])
    chart.add_plot("toks", "Tokens per second", "tok/s")
    chart.add_curve("toks", "toks", "tok/s", COLORS["toks"])
    chart.add_level_line("toks", "projected", "projected", COLORS["projected"])
    chart.setMinimumWidth(360)
    for key in PLOTS:
        keep_top_clear(chart.plot_item(key))
    hit = chart.plot_item("hit")
    hit.enableAutoRange(y=False)  # a percentage: a fixed axis, not 99.6-100.4 at a steady 100 %
    hit.setYRange(0, 125, padding=0)
    return chart


def keep_top_clear(item) -> None:
    """Title left and legend right in the title row; 15 % padding with a floor at 0.

    Every charted quantity is >= 0, and pyqtgraph shifts a padded range up to the
    floor instead of cutting it, so the data's top lands at ~77 % of the height,
    below the marker labels (92 %).
    """
    item.titleLabel.setText(item.titleLabel.text, justify="left")
    legend = item.legend
    if legend is not None:
        legend.setParentItem(item)
        legend.anchor(itemPos=(1, 0), parentPos=(1, 0), offset=(-4, 0))
    vb = item.getViewBox()
    vb.setDefaultPadding(0.15)
    vb.setLimits(yMin=0)


def sample_values(s: MetricsSample) -> dict[str, float]:
    return {curve: getattr(s, field) for curve, field in CURVE_FIELDS.items()}


def set_projection(chart: LiveChart, tok_s: float | None, label: str) -> None:
    """Show (or hide, with None) the projected tok/s line with a device's name on it."""
    chart.set_level("projected", tok_s)
    if tok_s is not None and math.isfinite(tok_s):
        text = f"{label} {format_number(float(tok_s))} tok/s".strip()
        # The label runs str.format on its text: braces in a device name must survive.
        chart.level_line("projected").label.setFormat(text.replace("{", "{{").replace("}", "}}"))
