"""Profile files: round trips, built-ins, every refusal naming file and key, fuzzing."""

from __future__ import annotations

import math
import os
from dataclasses import fields
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.profile_file import (
    REQUIRED_SETTINGS,
    SETTINGS_KEYS,
    TOP_LEVEL_KEYS,
    Profile,
    builtin_profiles_dir,
    list_profiles,
    load_profile,
    profile_filename,
    save_profile,
)
from shardscope.engine.knobs.settings import EXPERT_POLICIES, POLICIES, RANGES, RunSettings, validate

FUZZ = hsettings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

_DROP = object()  # marks a key to leave out

VALID = {
    "name": "Test rig",
    "description": "for tests",
    "device": "iphone-16-pro",
    "settings": {
        "budget_mb": 2048,
        "shard_mb": 64,
        "prefetch_depth": 2,
        "threads": 2,
        "n_gpu_layers": 0,
        "policy": "pinned",
        "ssd_mb_s": 860.0,
        "n_gen": 32,
    },
}


def _doc(**top) -> dict:
    doc = {k: (dict(v) if isinstance(v, dict) else v) for k, v in VALID.items()}
    for key, value in top.items():
        if value is _DROP:
            doc.pop(key, None)
        else:
            doc[key] = value
    return doc


def _with_setting(key, value) -> dict:
    doc = _doc()
    if value is _DROP:
        del doc["settings"][key]
    else:
        doc["settings"][key] = value
    return doc


def _write(path: Path, content) -> Path:
    if isinstance(content, dict):
        content = tomli_w.dumps(content)
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return path


def _assert_valid_profile(profile: Profile) -> None:
    assert isinstance(profile, Profile)
    assert isinstance(profile.name, str) and profile.name.strip()
    assert isinstance(profile.description, str)
    assert profile.device is None or isinstance(profile.device, str)
    s = profile.settings
    assert isinstance(s, RunSettings)
    for f in fields(RunSettings):
        value = getattr(s, f.name)
        if f.name == "model_path":
            assert value is None or (isinstance(value, str) and value)
        elif isinstance(f.default, bool) or not isinstance(f.default, (int, float)):
            assert isinstance(value, type(f.default)), f.name
        else:
            assert type(value) is type(f.default), f.name
    validate(s)


# --- round trips -----------------------------------------------------------------


def test_round_trip_equals(tmp_path):
    profile = Profile(
        name="My rig — ünïcode",
        settings=RunSettings(
            model_path="/models/qwen 3.gguf",
            budget_mb=1500,
            shard_mb=32,
            prefetch_depth=4,
            threads=6,
            n_gpu_layers=3,
            policy="lru",
            ssd_mb_s=312.5,
            n_gen=64,
            n_ctx=1024,
            prompt='Quotes " and \\ and\nnewlines\tand tabs',
            temperature=0.7,
            seed=42,
        ),
        description="multi\nline",
        device="iphone-16-pro",
    )
    path = tmp_path / profile_filename(profile.name)
    save_profile(profile, path)
    loaded = load_profile(path)
    assert loaded == profile
    assert loaded.path == path
    assert loaded.builtin is False


def test_round_trip_defaults_and_no_optional_fields(tmp_path):
    profile = Profile(name="Plain", settings=RunSettings())
    path = tmp_path / "plain.toml"
    save_profile(profile, path)
    assert load_profile(path) == profile
    assert "model_path" not in path.read_text()  # None stays out: TOML has no null


def test_optional_settings_fall_back_to_defaults(tmp_path):
    text = (
        'name = "Minimal"\n[settings]\nbudget_mb = 512\nshard_mb = 16\n'
        'prefetch_depth = 1\nthreads = 4\npolicy = "lru"\n'
    )
    profile = load_profile(_write(tmp_path / "min.toml", text))
    assert profile.settings == RunSettings(
        budget_mb=512, shard_mb=16, prefetch_depth=1, threads=4, policy="lru"
    )
    assert profile.description == "" and profile.device is None


def test_int_accepted_for_float_fields(tmp_path):
    doc = _with_setting("ssd_mb_s", 860)
    doc["settings"]["temperature"] = 1
    profile = load_profile(_write(tmp_path / "p.toml", doc))
    assert profile.settings.ssd_mb_s == 860.0 and type(profile.settings.ssd_mb_s) is float
    assert type(profile.settings.temperature) is float


def test_utf8_bom_is_tolerated(tmp_path):
    path = _write(tmp_path / "bom.toml", b"\xef\xbb\xbf" + tomli_w.dumps(VALID).encode())
    assert load_profile(path).name == "Test rig"


_names = st.text(min_size=1, max_size=30).filter(
    lambda s: s.strip() and "\n" not in s and "\r" not in s
)


def _setting_strategy(key: str):
    if key in RANGES:
        low, high = RANGES[key]
        if isinstance(getattr(RunSettings(), key), float):
            return st.floats(low, high, allow_nan=False)
        return st.integers(int(low), int(high))
    if key == "policy":
        return st.sampled_from(POLICIES)
    if key == "expert_policy":
        return st.sampled_from(EXPERT_POLICIES)
    if key == "expert_speculation":
        return st.booleans()
    if key == "model_path":
        return st.none() | st.text(min_size=1, max_size=40)
    return st.text(max_size=60)  # prompt


_valid_profiles = st.builds(
    Profile,
    name=_names,
    settings=st.builds(RunSettings, **{k: _setting_strategy(k) for k in SETTINGS_KEYS}),
    description=st.text(max_size=60),
    device=st.none() | _names,
)


@FUZZ
@given(profile=_valid_profiles)
def test_round_trip_any_valid_profile(tmp_path, profile):
    path = tmp_path / "rt.toml"
    save_profile(profile, path)
    assert load_profile(path) == profile


# --- built-ins -------------------------------------------------------------------


def test_every_builtin_loads():
    files = sorted(p for p in builtin_profiles_dir().glob("*.toml") if p.is_file())
    assert {p.name for p in files} >= {"iphone-16-pro-tuned.toml", "desktop-unconstrained.toml"}
    for path in files:
        profile = load_profile(path)
        assert profile.builtin is True
        assert profile_filename(profile.name) == path.name
        _assert_valid_profile(profile)


def test_builtin_numbers():
    iphone = load_profile(builtin_profiles_dir() / "iphone-16-pro-tuned.toml")
    assert iphone.name == "iPhone 16 Pro, tuned" and iphone.device == "iphone-16-pro"
    assert iphone.settings == RunSettings(
        budget_mb=3072 - 512 - 512,
        shard_mb=8,  # measured best on a model twice the budget (the preset file shows the sweep)
        prefetch_depth=2,
        threads=2,
        n_gpu_layers=0,
        policy="pinned",
        ssd_mb_s=860.0,
    )
    desktop = load_profile(builtin_profiles_dir() / "desktop-unconstrained.toml")
    assert desktop.name == "Desktop, unconstrained"
    assert desktop.settings == RunSettings(
        budget_mb=65536, shard_mb=256, prefetch_depth=0, threads=2, policy="pinned", ssd_mb_s=0.0
    )


def test_list_profiles_builtins_first_and_broken_file_reported(tmp_path):
    user = tmp_path / "user"
    user.mkdir()
    save_profile(Profile(name="A mine", settings=RunSettings()), user / "a-mine.toml")
    _write(user / "broken.toml", "name = [unclosed\n")
    (user / "sub").mkdir()
    _write(user / "sub" / "nested.toml", VALID)  # subfolders are not profiles
    _write(user / "notes.txt", "not a profile")
    profiles, errors = list_profiles(user)
    builtins = [p for p in profiles if p.builtin]
    assert [p.builtin for p in profiles] == [True] * len(builtins) + [False]
    assert {p.name for p in builtins} >= {"iPhone 16 Pro, tuned", "Desktop, unconstrained"}
    assert profiles[-1].name == "A mine"
    assert len(errors) == 1 and "broken.toml" in errors[0] and "\n" not in errors[0]


def test_list_profiles_missing_user_dir_and_builtin_dir_not_doubled(tmp_path):
    profiles, errors = list_profiles(tmp_path / "does-not-exist")
    assert errors == [] and profiles and all(p.builtin for p in profiles)
    again, errors = list_profiles(builtin_profiles_dir())
    assert errors == [] and again == profiles


@pytest.mark.parametrize(
    "name, expected",
    [
        ("iPhone 16 Pro", "iphone-16-pro.toml"),
        ("Desktop, unconstrained", "desktop-unconstrained.toml"),
        ("../../etc/passwd", "etc-passwd.toml"),
        ("Ünïcode café", "unicode-cafe.toml"),
        ("☃☃", "profile.toml"),
        ("", "profile.toml"),
        ("CON", "con-profile.toml"),
    ],
)
def test_profile_filename(name, expected):
    assert profile_filename(name) == expected


@given(st.text())
def test_profile_filename_is_always_safe(name):
    filename = profile_filename(name)
    assert filename.endswith(".toml") and len(filename) <= 85
    stem = filename[: -len(".toml")]
    assert stem and set(stem) <= set("abcdefghijklmnopqrstuvwxyz0123456789-")
    assert not stem.startswith("-") and not stem.endswith("-")


# --- refusals: each names the file and the key ----------------------------------

BAD_CASES = {
    # case id: (file content, words the message must contain)
    "not-toml": ('name = "x"\n[settings\nthreads = 2\n', ["not valid TOML", "line 2"]),
    "not-utf8": (b'name = "caf\xe9"\n', ["UTF-8", "line 1"]),
    "threads-string": (_with_setting("threads", "two"), ["threads", "integer", "'two'"]),
    "threads-float": (_with_setting("threads", 2.5), ["threads", "integer"]),
    "threads-bool": (_with_setting("threads", True), ["threads", "integer"]),
    "ssd-bool": (_with_setting("ssd_mb_s", False), ["ssd_mb_s", "number"]),
    "ssd-string": (_with_setting("ssd_mb_s", "fast"), ["ssd_mb_s", "number"]),
    "policy-int": (_with_setting("policy", 3), ["policy", "string"]),
    "prompt-list": (_with_setting("prompt", ["a"]), ["prompt", "string"]),
    "model-path-empty": (_with_setting("model_path", ""), ["model_path"]),
    "unknown-setting": (_with_setting("thread", 2), ["'thread'", "did you mean 'threads'"]),
    "unknown-top": (_doc(nmae="x"), ["'nmae'", "did you mean 'name'"]),
    "setting-at-top": (_doc(budget_mb=2048), ["'budget_mb'", "[settings]"]),
    "budget-zero": (_with_setting("budget_mb", 0), ["budget_mb", "out of range"]),
    "threads-10000": (_with_setting("threads", 10000), ["threads", "out of range"]),
    "prefetch-negative": (_with_setting("prefetch_depth", -1), ["prefetch_depth", "range"]),
    "ssd-nan": (_with_setting("ssd_mb_s", math.nan), ["ssd_mb_s", "range"]),
    "ssd-inf": (_with_setting("ssd_mb_s", math.inf), ["ssd_mb_s", "range"]),
    "huge-int": (_with_setting("seed", 2**62), ["seed", "range"]),
    "bad-policy": (_with_setting("policy", "fifo"), ["policy", "fifo"]),
    "missing-name": (_doc(name=_DROP), ["'name'", "missing"]),
    "missing-settings": (_doc(settings=_DROP), ["'settings'", "missing"]),
    "empty-file": ("", ["'name'", "missing"]),
    "name-int": (_doc(name=5), ["'name'", "string"]),
    "name-empty": (_doc(name="  "), ["'name'", "empty"]),
    "description-int": (_doc(description=1), ["'description'", "string"]),
    "device-list": (_doc(device=["a"]), ["'device'", "string"]),
    "settings-not-table": (_doc(settings=3), ["'settings'", "table"]),
    "settings-array-of-tables": (
        'name = "x"\n[[settings]]\nthreads = 2\n',
        ["'settings'", "table"],
    ),
    **{
        f"missing-{key}": (_with_setting(key, _DROP), [f"'{key}'", "missing"])
        for key in REQUIRED_SETTINGS
    },
}


@pytest.mark.parametrize("content, words", BAD_CASES.values(), ids=list(BAD_CASES))
def test_bad_file_names_file_and_key(tmp_path, content, words):
    path = _write(tmp_path / "bad-profile.toml", content)
    with pytest.raises(ShardscopeError) as info:
        load_profile(path)
    message = str(info.value)
    assert "bad-profile.toml" in message
    assert "\n" not in message
    for word in words:
        assert word in message, (word, message)


def test_missing_file(tmp_path):
    with pytest.raises(ShardscopeError, match="nope.toml"):
        load_profile(tmp_path / "nope.toml")


def test_directory_instead_of_file(tmp_path):
    (tmp_path / "dir.toml").mkdir()
    with pytest.raises(ShardscopeError, match="dir.toml"):
        load_profile(tmp_path / "dir.toml")


def test_deeply_nested_arrays_are_refused_cleanly(tmp_path):
    path = _write(tmp_path / "deep.toml", "x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ShardscopeError, match="deep.toml"):
        load_profile(path)


def test_oversized_file_refused(tmp_path):
    path = _write(tmp_path / "big.toml", "# " + "x" * (2 << 20) + "\n")
    with pytest.raises(ShardscopeError, match="big.toml.*too large"):
        load_profile(path)


# --- saving ----------------------------------------------------------------------

GOOD = Profile(name="Good", settings=RunSettings(budget_mb=1024))


def test_save_into_builtin_dir_refused():
    target = builtin_profiles_dir() / "iphone-16-pro-tuned.toml"
    before = target.read_bytes()
    with pytest.raises(ShardscopeError, match="iphone-16-pro-tuned.toml.*read-only"):
        save_profile(GOOD, target)
    assert target.read_bytes() == before
    new = builtin_profiles_dir() / "brand-new.toml"
    with pytest.raises(ShardscopeError, match="read-only"):
        save_profile(GOOD, new)
    assert not new.exists()


@pytest.mark.parametrize(
    "bad, words",
    [
        (Profile(name="x", settings=RunSettings(threads=0)), ["threads", "range"]),
        (Profile(name="x", settings=RunSettings(budget_mb=0)), ["budget_mb"]),
        (Profile(name="x", settings=RunSettings(threads="two")), ["threads", "'two'"]),
        (Profile(name="x", settings=RunSettings(policy="fifo")), ["policy"]),
        (Profile(name="", settings=RunSettings()), ["name"]),
        (Profile(name="x", settings=RunSettings(prompt="\ud800")), ["TOML"]),
    ],
)
def test_invalid_profile_never_touches_disk(tmp_path, bad, words):
    existing = tmp_path / "existing.toml"
    save_profile(GOOD, existing)
    before = existing.read_bytes()
    with pytest.raises(ShardscopeError) as info:
        save_profile(bad, existing)
    for word in ["existing.toml", *words]:
        assert word in str(info.value)
    assert existing.read_bytes() == before
    fresh = tmp_path / "fresh.toml"
    with pytest.raises(ShardscopeError):
        save_profile(bad, fresh)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.toml"]


def test_save_creates_missing_user_folder(tmp_path):
    path = tmp_path / "a" / "b" / "good.toml"
    save_profile(GOOD, path)
    assert load_profile(path) == GOOD


def test_save_to_read_only_dir_keeps_old_file(tmp_path):
    """The save runs in a child that obeys permission bits (as root too: tests/permission_bits.py)."""
    from permission_bits import require_permission_bits, run_obeying_permissions

    require_permission_bits(tmp_path)  # skips, saying why, where root cannot drop CAP_DAC_OVERRIDE
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "good.toml"
    save_profile(GOOD, path)
    before = path.read_bytes()
    folder.chmod(0o555)
    try:
        child = run_obeying_permissions(["-c", f"""
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.profile_file import Profile, save_profile
from shardscope.engine.knobs.settings import RunSettings
try:
    save_profile(Profile(name="Changed", settings=RunSettings()), {str(path)!r})
except ShardscopeError as exc:
    print("refused:", exc)
else:
    print("saved")
"""])
        assert child.returncode == 0, child.stderr
        assert child.stdout.startswith("refused:") and "good.toml" in child.stdout, child.stdout
        assert path.read_bytes() == before
        assert [p.name for p in folder.iterdir()] == ["good.toml"]
    finally:
        folder.chmod(0o755)


def test_save_under_a_regular_file_is_refused(tmp_path):
    """A folder that cannot be: the path runs through a regular file (refused for root too)."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file\n")
    with pytest.raises(ShardscopeError, match="good.toml"):
        save_profile(GOOD, blocker / "good.toml")
    assert blocker.read_text() == "a file\n" and sorted(p.name for p in tmp_path.iterdir()) == ["not-a-folder"]


def test_failed_rename_keeps_old_file_and_leaves_no_temp(tmp_path, monkeypatch):
    # Works as root too: simulate the disk refusing the final rename.
    path = tmp_path / "good.toml"
    save_profile(GOOD, path)
    before = path.read_bytes()

    def refuse(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(ShardscopeError, match="good.toml"):
        save_profile(Profile(name="Changed", settings=RunSettings()), path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["good.toml"]


# --- fuzzing: any file content gives a valid Profile or a ShardscopeError -------

_scalars = (
    st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.booleans()
    | st.sampled_from(POLICIES)
    | st.integers(-5, 70000)
)
_keys = st.sampled_from(TOP_LEVEL_KEYS + SETTINGS_KEYS) | st.text(max_size=12)
_toml_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_keys, children, max_size=4),
    max_leaves=12,
)


def _load_or_refuse(path: Path) -> None:
    try:
        profile = load_profile(path)
    except ShardscopeError as exc:
        message = str(exc)
        assert path.name in message and "\n" not in message, message
    else:
        _assert_valid_profile(profile)


@FUZZ
@given(doc=st.dictionaries(_keys, _toml_values, max_size=6))
def test_fuzz_arbitrary_toml_documents(tmp_path, doc):
    _load_or_refuse(_write(tmp_path / "fuzz.toml", doc))


@FUZZ
@given(
    name=_toml_values,
    overrides=st.dictionaries(st.sampled_from(SETTINGS_KEYS) | st.text(max_size=8), _scalars),
    drop=st.sets(st.sampled_from(SETTINGS_KEYS)),
)
def test_fuzz_near_valid_documents(tmp_path, name, overrides, drop):
    doc = _doc(name=name)
    doc["settings"].update(overrides)
    for key in drop:
        doc["settings"].pop(key, None)
    _load_or_refuse(_write(tmp_path / "fuzz.toml", doc))


@FUZZ
@given(data=st.binary(max_size=600))
def test_fuzz_raw_bytes(tmp_path, data):
    _load_or_refuse(_write(tmp_path / "fuzz.toml", data))


@FUZZ
@given(
    text=st.text(max_size=300)
    | st.lists(
        st.sampled_from(
            ['name = "x"', "[settings]", "threads = 2", "budget_mb = 2048", "shard_mb = 64",
             "prefetch_depth = 0", 'policy = "lru"', "[", "=", '"', "\\", "ssd_mb_s = 1e999",
             "threads = 0x10", "seed = 1979-05-27", "[[settings]]", "name = '''"]
        )
        | st.text(max_size=15),
        max_size=12,
    ).map("\n".join)
)
def test_fuzz_text(tmp_path, text):
    _load_or_refuse(_write(tmp_path / "fuzz.toml", text))
