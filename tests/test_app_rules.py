"""Small rules of the app layer that need no window: names, file names, marker text."""

from __future__ import annotations

import pytest

from shardscope.app.files.export import base_from_chosen, export_paths
from shardscope.app.profiles.profile_store import ProfileStore
from shardscope.app.profiles.settings_binding import describe_change
from shardscope.app.window.main import main
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.settings import RunSettings


def test_profile_store_refuses_to_overwrite_another_profile_with_the_same_file_name(tmp_path):
    store = ProfileStore(tmp_path)
    first = store.save("My Rig", RunSettings(budget_mb=512))
    assert first.path.name == "my-rig.toml"
    again = store.save("My Rig", RunSettings(budget_mb=640))  # same name: an update
    assert again.settings.budget_mb == 640
    with pytest.raises(ShardscopeError, match="already holds profile 'My Rig'"):
        store.save("my rig!", RunSettings())  # different name, same file: refused
    with pytest.raises(ShardscopeError, match="built-in"):
        store.save("iphone 16 pro, tuned", RunSettings())  # a built-in's name, in other case
    with pytest.raises(ShardscopeError, match="empty"):
        store.save("   ", RunSettings())


def test_saved_profiles_do_not_carry_the_model(tmp_path):
    saved = ProfileStore(tmp_path).save("Any model", RunSettings(model_path="/models/x.gguf"))
    assert saved.settings.model_path is None


def test_marker_text_reads_like_the_change():
    assert describe_change("budget_mb", 600, 400) == "budget 600\u2192400 MiB"
    assert describe_change("ssd_mb_s", 0.0, 860.0) == "SSD off\u2192860 MB/s"
    assert describe_change("ssd_mb_s", 860.0, 0.0) == "SSD 860\u2192off"
    assert describe_change("prefetch_depth", 1, 2) == "prefetch 1\u21922"
    assert describe_change("budget_mb", 2048, 65536) == "budget 2,048\u219265,536 MiB"


def test_export_base_names():
    assert base_from_chosen("/d/run.csv").name == "run"
    assert base_from_chosen("/d/run").name == "run"
    assert base_from_chosen("/d/run.v2").name == "run.v2"  # a dot in the name is not an extension
    paths = export_paths("/d/run.v2")
    assert [p.name for p in paths.all()] == ["run.v2.csv", "run.v2-timeline.csv", "run.v2-rounds.csv", "run.v2.png"]


def test_gui_takes_at_most_one_model(capsys):
    assert main(["gui", "a.gguf", "b.gguf"]) == 2
    assert "usage" in capsys.readouterr().err


def test_garbage_is_collected_on_the_gui_thread_only(qtbot):
    import gc

    from shardscope.app.base.gui_thread_gc import collect_garbage_on_gui_thread

    first = collect_garbage_on_gui_thread()
    assert collect_garbage_on_gui_thread() is first  # one per application
    assert not gc.isenabled()  # no collection can start on a worker thread
    assert first.timer.isActive()


@pytest.mark.parametrize("platform", ["linux", "darwin", "win32"])
def test_the_window_lists_profiles_where_the_cli_saves_them(tmp_path, monkeypatch, platform):
    from shardscope.app.base.config_paths import default_config_dir, profiles_dir
    from shardscope.engine.knobs.profile_file import Profile, save_profile
    from shardscope.engine.search.tune import user_profiles_dir

    monkeypatch.delenv("SHARDSCOPE_CONFIG_DIR", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr("sys.platform", platform)
    cli_dir = user_profiles_dir()  # where `tune --save-profile` writes
    save_profile(Profile(name="Tuned", settings=RunSettings(budget_mb=640)), cli_dir / "tuned.toml")
    window_dir = profiles_dir(default_config_dir())
    assert window_dir == cli_dir
    assert [p.name for p in ProfileStore(window_dir).refresh()[0] if not p.builtin] == ["Tuned"]
