"""Helpers of benchmarks/ whose figures the README quotes."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.fit_ratio_ci import pair_ratios


def test_pair_ratios_reads_each_complete_pair_of_a_bench_fit_record(tmp_path: Path):
    record = tmp_path / "bench_fit.txt"
    record.write_text("# python -m benchmarks.bench_fit ...\n"
                      "pair 0 fit : wall   16.4 s  cpu   28.7 s  13.4 ms/step  eval 0.33 s/epoch\n"
                      "pair 0 bare: wall   14.7 s  cpu   25.6 s  12.3 ms/step  eval 0.25 s/epoch\n"
                      "pair 1 bare: wall   15.0 s  cpu   26.2 s  12.5 ms/step  eval 0.25 s/epoch\n"
                      "pair 1 fit : wall   17.3 s  cpu   30.2 s  14.3 ms/step  eval 0.33 s/epoch\n"
                      "pair 2 fit : wall   17.2 s  cpu   29.9 s  14.1 ms/step  eval 0.32 s/epoch\n"  # cut short
                      "  ratio     |   1.17x |   1.16x |   1.15x |\n")
    assert pair_ratios(record) == pytest.approx([16.4 / 14.7, 17.3 / 15.0])


def test_pair_ratios_of_a_lean_record_take_the_named_variant_over_the_named_reference(tmp_path: Path):
    record = tmp_path / "bench_fit_lean.txt"
    record.write_text("pair 0 fit : wall   24.4 s  cpu   43.1 s  20.6 ms/step  eval 0.56 s/epoch\n"
                      "pair 0 lean: wall   22.7 s  cpu   41.3 s  20.3 ms/step  eval 0.61 s/epoch\n"
                      "pair 0 bare: wall   22.5 s  cpu   40.5 s  20.2 ms/step  eval 0.58 s/epoch\n"
                      "pair 1 lean: wall   23.7 s  cpu   42.1 s  19.8 ms/step  eval 0.61 s/epoch\n"
                      "pair 1 bare: wall   23.2 s  cpu   41.5 s  20.5 ms/step  eval 0.56 s/epoch\n"  # its fit cut short
                      "  lean/bare |   1.06x |   1.09x |   1.11x |\n")
    assert pair_ratios(record) == pytest.approx([24.4 / 22.5])
    assert pair_ratios(record, "lean") == pytest.approx([22.7 / 22.5, 23.7 / 23.2])
    assert pair_ratios(record, "fit", over="lean") == pytest.approx([24.4 / 22.7])


def test_alternate_rotates_the_runs_so_each_goes_first_in_turn():
    from benchmarks.bench_fit import alternate

    two = [[name for name, _ in alternate(pair, ["fit"], ["bare"])] for pair in range(2)]
    assert two == [["fit", "bare"], ["bare", "fit"]]
    three = [[name for name, cmd in alternate(pair, ["fit"], ["bare"], ["lean"])] for pair in range(3)]
    assert three == [["fit", "lean", "bare"], ["lean", "bare", "fit"], ["bare", "fit", "lean"]]
