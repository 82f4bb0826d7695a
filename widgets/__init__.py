"""shardscope's reusable Qt widgets.

Kept free of `engine` and `app` imports (only PySide6, pyqtgraph, numpy and the
standard library) so each widget can be built, tested and benchmarked alone, and
the engine stays importable without Qt.
"""

from shardscope.widgets.chart_ghosts import ChartGhosts
from shardscope.widgets.expert_map import ExpertMap
from shardscope.widgets.labelled_slider import LabelledSlider
from shardscope.widgets.live_chart import LiveChart
from shardscope.widgets.number_format import format_number
from shardscope.widgets.numbers_panel import NumbersPanel
from shardscope.widgets.rounds_table import RoundsTable, TableColumn
from shardscope.widgets.shard_map import EVICTED, GLOBAL, LOADING, PINNED, RESIDENT, STATE_COLORS, STATE_NAMES, ShardMap
from shardscope.widgets.sort_item import SortItem

__all__ = [
    "EVICTED",
    "GLOBAL",
    "LOADING",
    "PINNED",
    "RESIDENT",
    "STATE_COLORS",
    "STATE_NAMES",
    "ChartGhosts",
    "ExpertMap",
    "LabelledSlider",
    "LiveChart",
    "NumbersPanel",
    "RoundsTable",
    "ShardMap",
    "SortItem",
    "TableColumn",
    "format_number",
]
