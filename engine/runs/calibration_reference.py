"""This machine's reference rows for a calibration: the bundled model benched here, 3 repetitions.
Lives with the runs so that engine/devices/calibrate.py (the fit) never imports the run layer."""

from __future__ import annotations

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.devices.calibrate import Observation, model_text, observations


def measure_here(model: tuple[str, int, int], where: str, *, threads: int = 2, tokens: int = 16) -> list[Observation]:
    """This machine's rows for the bundled model: a bench run that fits its budget, 3 repetitions."""
    from shardscope.engine.base.bundled_model import bundled_model_path
    from shardscope.engine.knobs.settings import RunSettings
    from shardscope.engine.output.llama_bench_output import rows_for, utc_now
    from shardscope.engine.runs.bench_command import run_repetitions
    from shardscope.engine.stream.build_info import model_info

    bundled = str(bundled_model_path())
    info = model_info(bundled)
    if (info["model_type"], info["model_size"], info["model_n_params"]) != model:
        raise ShardscopeError(f"{where}: rows are for model {model_text(model)}, not the bundled "
                              f"{model_text((info['model_type'], info['model_size'], info['model_n_params']))}: "
                              f"pass --reference with this machine's rows for that model")
    settings = RunSettings(threads=threads, n_gen=tokens, n_ctx=max(128, tokens + 64))
    started = utc_now()
    rows = rows_for(settings, [(run_repetitions(settings, 3), started)])
    return observations(rows, "this machine's run")
