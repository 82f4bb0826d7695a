"""shardscope's desktop window.

The app package is the only place where the Qt widgets (``widgets``) meet the
streaming engine (``engine``): the engine never imports Qt and the widgets never
import the engine, so each half can be tested and reused alone.
"""
