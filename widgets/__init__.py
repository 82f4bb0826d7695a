"""shardscope's reusable Qt widgets.

Kept free of `engine` and `app` imports (only PySide6, pyqtgraph, numpy and the
standard library) so each widget can be built, tested and benchmarked alone, and
the engine stays importable without Qt.
"""

from widgets.expert_map import ExpertMap
from widgets.labelled_slider import LabelledSlider
from widgets.live_chart import LiveChart
from widgets.number_format import format_number
from widgets.numbers_panel import NumbersPanel
from widgets.shard_map import EVICTED, GLOBAL, LOADING, PINNED, RESIDENT, STATE_COLORS, STATE_NAMES, ShardMap

__all__ = [
    "EVICTED",
    "GLOBAL",
    "LOADING",
    "PINNED",
    "RESIDENT",
    "STATE_COLORS",
    "STATE_NAMES",
    "ExpertMap",
    "LabelledSlider",
    "LiveChart",
    "NumbersPanel",
    "ShardMap",
    "format_number",
]
