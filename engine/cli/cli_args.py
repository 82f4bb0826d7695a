"""Argparse pieces every subcommand shares: number types and the run flags, derived from
the knob registry (engine.knobs) so a knob's flag, default and help are declared once."""

from __future__ import annotations

import argparse
import math

from shardscope.engine.knobs.knobs import ENABLED, KNOBS, RunSettings


def _number_type(kind: type, allow_zero: bool):
    """An argparse type: a whole or real number, > 0 (or ≥ 0), refused in one line."""
    noun = "a whole number" if kind is int else "a number"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {noun}, got {text!r}") from None
        ok = value >= 0 if allow_zero else value > 0
        if not ok or (kind is float and math.isinf(value)):
            raise argparse.ArgumentTypeError(f"must be {'≥' if allow_zero else '>'} 0, got {text}")
        return value

    return parse


positive_int = _number_type(int, allow_zero=False)
non_negative_int = _number_type(int, allow_zero=True)
positive_float = _number_type(float, allow_zero=False)
non_negative_float = _number_type(float, allow_zero=True)

_COMPUTED = {"n_ctx"}  # default None on the command line: fitted to prompt + tokens


def flag_type(key: str):
    """The argparse type for one knob's flag: its declared type, bounded below by its range."""
    spec = KNOBS[key]
    numeric = float if spec.type is float or spec.sweep == "num" else int
    if spec.low is None:
        return None
    return {(int, False): positive_int, (int, True): non_negative_int,
            (float, False): positive_float, (float, True): non_negative_float}[numeric, spec.low <= 0]


def add_flag(p: argparse.ArgumentParser, key: str, **overrides) -> None:
    spec = KNOBS[key]
    kw: dict = {"default": None if key in _COMPUTED else spec.default}
    if spec.choices:
        kw["choices"] = spec.choices
    elif spec.type is bool:
        kw["action"] = argparse.BooleanOptionalAction
    elif (kind := flag_type(key)) is not None:
        kw["type"] = kind
    kw["help"] = flag_help(key)
    kw.update(overrides)
    if "action" not in kw and "choices" not in kw:
        kw.setdefault("metavar", metavar(key))
    p.add_argument(spec.flag, dest=key, **kw)


def flag_help(key: str) -> str:
    """A knob's help line: its own help, else the first line of its tooltip, with the default
    (so ``bench --help`` says what every flag does and what it is when left out)."""
    spec = KNOBS[key]
    tip = ("; ".join(line.strip().rstrip(";") for line in spec.tip.splitlines()) if spec.choices
           else spec.tip.split("\n")[0])
    text = spec.help or (tip.rstrip(".;") if tip else spec.label)
    if spec.unit and spec.unit not in text:
        text += f" ({spec.unit})"
    if spec.streams == "experts":
        text = "MoE: " + text
    elif spec.streams == "layers":
        text += "; layer streaming"
    if "default" not in text and key not in _COMPUTED:
        default = spec.default
        shown = ("on" if default else "off") if isinstance(default, bool) else f"{default:g}" \
            if isinstance(default, float) else str(default)
        text += f" (default: {shown}{' = ' + spec.off if spec.off and not default else ''})"
    return text.replace("%", "%%")  # argparse formats help with %


def metavar(key: str) -> str:
    """"--tokens" → TOKENS: help names the flag, not the RunSettings field behind it."""
    return KNOBS[key].flag.lstrip("-").upper().replace("-", "_")


def list_help(key: str, what: str = "values") -> str:
    """Help for a knob taking a list (sweep, tune): its label, unit and an example."""
    spec = KNOBS[key]
    unit = f" ({spec.unit}{'; 0 = ' + spec.off if spec.off else ''})" if spec.unit else ""
    example = spec.propose or spec.tune or ",".join(spec.choices) or _example(spec)
    return f"{spec.label.lower()} {what}{unit}, e.g. {example}".replace("%", "%%")  # argparse formats help


def _example(spec) -> str:
    """A list and a range inside the knob's own range ("16,32 or 16-128*2"): an example that runs."""
    first = max(int(spec.low or 0), 1)
    return f"{first},{2 * first} or {first}-{8 * first}*2"


def add_run_arguments(p: argparse.ArgumentParser, skip: tuple[str, ...] = (), **overrides: dict) -> None:
    """One flag per enabled knob that declares one (``overrides``: per-knob add_argument changes)."""
    for key in ENABLED:
        if KNOBS[key].flag and key not in skip:
            add_flag(p, key, **overrides.get(key, {}))


def _whole(value):
    return int(value) if isinstance(value, float) and value.is_integer() else value


def settings_from_args(args) -> RunSettings:
    """RunSettings from parsed flags (absent knobs keep their defaults; n_ctx fits prompt+tokens)."""
    values = {key: getattr(args, key) for key in ENABLED if hasattr(args, key)}
    values = {k: _whole(v) if KNOBS[k].sweep == "num" and KNOBS[k].type is int else v for k, v in values.items()}
    d = RunSettings()
    prompt, n_gen = values.get("prompt", d.prompt), values.get("n_gen", d.n_gen)
    if not values.get("n_ctx"):
        values["n_ctx"] = max(128, 64 * math.ceil((len(prompt) // 2 + n_gen + 16) / 64))
    return RunSettings(**values)


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    """llama-bench's -o and -r (engine.output.llama_bench_format)."""
    from shardscope.engine.output.llama_bench_format import FORMATS

    p.add_argument("-o", "--output", choices=FORMATS, default="md",
                   help="rows on stdout in llama-bench's format (default: md)")
    p.add_argument("-r", "--repetitions", type=positive_int, default=1,
                   help="times each test is repeated (one sample each; llama-bench's default is 5)")
