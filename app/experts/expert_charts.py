"""The MoE curves on the run chart: expert hit rate and speculation accuracy beside the dense
hit rate, and a row splitting the bytes read per token into dense and experts.

They read MetricsSample's expert fields, which are NaN in dense runs' samples (and absent
from an older engine's): a NaN is a gap, so a dense run draws none of them, and the
per-token row is taken out of the layout while a dense model is open (an empty row
would only shrink the others).
"""

from __future__ import annotations

import math

from shardscope.app.run_view.charts import keep_top_clear
from shardscope.engine.measure.metric_registry import chart_curves
from shardscope.engine.measure.metrics import MetricsSample
from shardscope.widgets import LiveChart

EXPERT_COLORS = {"expert_hit": "#d62728", "spec": "#f2a93b", "dense_tok": "#555d66", "expert_tok": "#d9822b",
                 "trunk_held": "#8c564b", "expert_cache": "#e377c2"}
# curve key -> MetricsSample field, from the metric registry (engine/measure/metric_registry.py)
EXPERT_CURVES = chart_curves("experts")
EXPERT_CURVE_FIELDS = {curve: m.name for curve, m in EXPERT_CURVES.items()}
PERCENT_CURVES = tuple(c for c, m in EXPERT_CURVES.items() if m.fraction)  # fractions in the sample, % on the axis
EXPERT_HIT_LABELS = {curve: EXPERT_CURVES[curve].label for curve in ("expert_hit", "spec")}  # the hit plot's
EXPERT_MEMORY_LABELS = {curve: EXPERT_CURVES[curve].label for curve in ("trunk_held", "expert_cache")}
EXPERT_SHORT = {"expert_hit": "experts", "spec": "spec."}  # the legend's names where the plot is small


def add_expert_curves(chart: LiveChart) -> None:
    """Onto a chart from app.run_view.charts.build_run_chart (its "hit" plot is in %)."""
    for curve, label in EXPERT_HIT_LABELS.items():
        chart.add_curve("hit", curve, label, EXPERT_COLORS[curve], short=EXPERT_SHORT[curve])
    # Where an expert run's weights sit: the trunk's shards held and the expert cache, apart.
    for curve, short in (("trunk_held", "trunk"), ("expert_cache", "experts")):
        chart.add_curve("memory", curve, EXPERT_MEMORY_LABELS[curve], EXPERT_COLORS[curve], short=short)
    chart.add_plot("per_token", "Read per token, MoE (dense / experts)", "MiB")
    chart.add_curve("per_token", "dense_tok", EXPERT_CURVES["dense_tok"].label, EXPERT_COLORS["dense_tok"])
    chart.add_curve("per_token", "expert_tok", EXPERT_CURVES["expert_tok"].label, EXPERT_COLORS["expert_tok"])
    keep_top_clear(chart.plot_item("per_token"))
    chart.scale_from_zero("per_token")  # the top quarter stays free for the legend, as on the other rows
    show_expert_row(chart, False)


def show_expert_row(chart: LiveChart, visible: bool) -> None:
    """Put the per-token row in (MoE model) or take it out (dense); the bottom row shows time.
    The hit-rate legend names the expert curves only for an MoE model (a dense run draws none)."""
    _show_expert_legend(chart, visible)
    item, above = chart.plot_item("per_token"), chart.plot_item("toks")
    shown = item in chart.ci.items
    if visible == shown:
        return
    if visible:
        chart.ci.addItem(item, row=len(chart.ci.items), col=0)
    else:
        chart.ci.removeItem(item)
    for bottom, last in ((above, not visible), (item, visible)):
        bottom.showAxis("bottom", last)


def _show_expert_legend(chart: LiveChart, visible: bool) -> None:
    for key, names in (("hit", set(EXPERT_HIT_LABELS.values())), ("memory", set(EXPERT_MEMORY_LABELS.values()))):
        item = chart.plot_item(key)
        legend = item.legend
        named = {getattr(text, "full_name", None) or text.text for _sample, text in legend.items}
        for curve in item.listDataItems():
            name = curve.name()
            if name not in names:
                continue
            if visible and name not in named:
                legend.addItem(curve, name)
            elif not visible and name in named:
                legend.removeItem(curve)
        chart.fit_legend(key)


def expert_values(s: MetricsSample) -> dict[str, float]:
    values = {}
    for curve, field in EXPERT_CURVE_FIELDS.items():
        value = getattr(s, field, None)
        value = math.nan if value is None else float(value)
        values[curve] = 100.0 * value if curve in PERCENT_CURVES else value
    return values
