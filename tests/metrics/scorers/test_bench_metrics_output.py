"""bench/metrics.py prints its load and ends with one line per target, in the issue's exact form.

Behaviour only (a dozen pairs, one round): the figures themselves are the bench's business.
"""

import os
import re

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402

from bench import metrics as bench  # noqa: E402

TARGETS = [
    re.compile(r"^target suite_vs_peers: ratio \d+\.\d\d \(goal >= 2\.0\)$"),
    re.compile(r"^target suite_vs_encoder_pass: ratio \d+\.\d\d \(goal <= 1\.25\)$"),
]


def run_bench(capsys, *args):
    bench.main(["--pairs", "12", "--repeat", "1", "--device", "cpu", *args])
    return capsys.readouterr().out.splitlines()


def test_ends_with_the_two_target_lines_after_the_load(capsys):
    lines = run_bench(capsys)
    assert all(pattern.match(line) for pattern, line in zip(TARGETS, lines[-2:], strict=True))
    load = next(line for line in lines if line.startswith("load:"))
    assert re.search(r"os\.getloadavg\(\) before the timed rounds [\d.]+ [\d.]+ [\d.]+", load)
    table = "\n".join(lines)
    for peer in bench.PEERS:  # every peer is timed
        assert f"  {peer}" in table
    assert "bare encoder pass (transformers)" in table and "suite (9 metrics)" in table


def test_a_missing_peer_package_is_named_not_dropped_silently(capsys, monkeypatch):
    monkeypatch.setattr(bench, "missing_packages", lambda: {"rouge-score"})
    lines = run_bench(capsys)
    assert any(line.startswith("NOT INSTALLED: rouge-score") for line in lines)
    assert any("peers missing (not installed): rouge-score" in line for line in lines)
    assert "  rouge-score ROUGE" not in "\n".join(lines)
    assert all(pattern.match(line) for pattern, line in zip(TARGETS, lines[-2:], strict=True))


def test_the_thread_option_applies_to_every_method(capsys):
    import torch

    before = torch.get_num_threads()
    try:
        lines = run_bench(capsys, "--threads", "1")
        assert "(1 threads for every method)" in lines[0]
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("argv", [["--pairs", "0"], ["--threads", "0"], ["--repeat", "0"]])
def test_rejects_nonsense_options(argv):
    with pytest.raises(SystemExit):
        bench.parse_args(argv)
