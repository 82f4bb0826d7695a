"""Issue 19's smaller findings: each one refused in one line (exit 2) or shown, never a traceback,
an empty answer or a silent overwrite."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from shardscope.engine.cli.cli import main
from shardscope.engine.experts.routing_trace import TraceHeader, TraceRecord, TraceWriter


def _small_trace(tmp_path):
    writer = TraceWriter(tmp_path / "t.jsonl", TraceHeader("m.gguf", 8, 2, {0: 1000, 1: 1000}))
    for token in range(1, 20):
        for layer in (0, 1):
            writer.write(TraceRecord(token, layer, (token % 8, (token + 3) % 8)))
    writer.close()
    return str(tmp_path / "t.jsonl")


def _exit(argv) -> int:
    """main()'s exit code, whether it returns it or argparse exits with it."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def _one_line(capsys, *words):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    for word in words:
        assert word in err[0], err
    return err[0]


def test_replay_huge_cache_is_one_line_not_a_traceback(tmp_path, capsys):
    trace = _small_trace(tmp_path)
    assert _exit(["replay", trace, "--cache-mb", "1e308"]) == 2
    _one_line(capsys, "--cache-mb", "at most")


def test_replay_with_no_policy_is_refused(tmp_path, capsys):
    trace = _small_trace(tmp_path)
    assert main(["replay", trace, "--cache-mb", "1", "--policy", ""]) == 2
    _one_line(capsys, "--policy", "at least one")
    assert main(["replay", trace, "--cache-mb", "1", "--policy", " , "]) == 2
    _one_line(capsys, "--policy")


def _moe_header_gguf(path, expert_count: int):
    gguf = pytest.importorskip("gguf")
    np = pytest.importorskip("numpy")
    writer = gguf.GGUFWriter(str(path), "testarch")
    writer.add_uint32("testarch.expert_count", expert_count)
    writer.add_uint32("testarch.expert_used_count", 2)
    writer.add_tensor("token_embd.weight", np.zeros((64, 32), np.float32))
    for layer in range(2):
        writer.add_tensor(f"blk.{layer}.attn_q.weight", np.zeros((32, 32), np.float32))
        writer.add_tensor(f"blk.{layer}.ffn_up_exps.weight", np.zeros((16, 16, 32), np.float32))  # 16 experts
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


@pytest.mark.parametrize("count, words", [(0, "expert_count is 0"), (15, "does not divide")])
def test_plan_refuses_expert_counts_bench_refuses(tmp_path, capsys, count, words):
    path = _moe_header_gguf(tmp_path / f"moe{count}.gguf", count)
    assert main(["plan", "--gguf", path]) == 2
    line = _one_line(capsys, path, words)
    # bench refuses the same file with the same reason, before llama.cpp could abort on it
    assert main(["bench", "--model", path, "--tokens", "2"]) == 2
    assert words in _one_line(capsys, path) and words in line
    good = _moe_header_gguf(tmp_path / "moe16.gguf", 16)
    assert main(["plan", "--gguf", good]) == 0


def test_bench_help_documents_every_run_flag(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    text = " ".join(capsys.readouterr().out.split("options:", 1)[1].split())
    for flag, words in [("--prefetch-depth PREFETCH_DEPTH", "(default: 2)"), ("--threads THREADS", "(default: 2)"),
                        ("--policy {pinned,lru}", "(default: pinned)"),
                        ("--expert-cache-mb EXPERT_CACHE_MB", "MoE:"),
                        ("--expert-policy {auto,decay,lru,lfu,hot}", "(default: auto)"),
                        ("--no-expert-speculation", "(default: off)")]:
        after = text.split(flag, 1)[1].split(" --", 1)[0]
        assert words in after, (flag, after)


def test_devices_are_listed(capsys):
    from shardscope.engine.devices.devices import builtin_devices

    assert main(["devices"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["id", "name"]
    ids = [line.split()[0] for line in out[1:-1]]
    assert ids == list(builtin_devices()) and "iphone-16-pro" in ids


def test_bench_summary_says_which_spread_its_plus_minus_is(bundled_model, tmp_path, capsys):
    """The summary's ± (between tokens) and the table's (between -r repetitions) differ: each says which."""
    assert main(["bench", "--model", bundled_model, "--tokens", "6", "--threads", "2", "--quiet"]) == 0
    out = capsys.readouterr()
    speed = next(line for line in out.out.splitlines() if line.startswith("speed"))
    assert "tokens vary ±" in speed


def test_a_trace_killed_by_sigkill_leaves_no_temp_file_after_the_next_start(tmp_path):
    target = tmp_path / "t.jsonl"
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from shardscope.engine.experts.routing_trace import TraceHeader, TraceRecord, TraceWriter
        w = TraceWriter({str(target)!r}, TraceHeader("m", 4, 2, {{0: 1}}))
        w.write(TraceRecord(1, 0, (1, 2)))
        print("writing", flush=True)
        time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "writing"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert [p.suffix for p in tmp_path.iterdir()] == [".tmp"]  # what SIGKILL leaves: no finally ran
    live = TraceWriter(target, TraceHeader("m", 4, 2, {0: 1}))  # the next run writing this trace
    try:
        left = sorted(p.name for p in tmp_path.iterdir())
        assert len(left) == 1 and str(os.getpid()) in left[0]  # only the live writer's own temp file
    finally:
        live.discard()
    assert list(tmp_path.iterdir()) == []


def test_tune_refuses_to_overwrite_a_profile_before_searching(tmp_path, capsys):
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "p1.toml").write_text("kept = true\n")
    # a model path that does not exist would be refused later: the profile check comes first
    assert main(["tune", "--save-profile", "p1", "--profile-dir", str(profiles), "--tokens", "2"]) == 2
    _one_line(capsys, "--save-profile p1", "--force")
    assert (profiles / "p1.toml").read_text() == "kept = true\n"
