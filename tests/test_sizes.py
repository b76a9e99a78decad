"""One size syntax for every option: ``dask.utils.parse_bytes``'s, in ``operators.sizes``."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner
from dask.utils import byte_sizes, parse_bytes

from dask_pfs.cli import SIZE
from operators.ratelimit import parse_bandwidth
from operators.sizes import UNITS, parse_size

SAMPLES = ["256M", "256MiB", "256mb", "1GiB", "1.5 GB", "500k", "65536", "1e6", "1e6 kB", "MB", "0.5kiB", "2Pi", 7]


@pytest.mark.parametrize("text", SAMPLES)
def test_sizes_read_as_dask_reads_them(text):
    assert parse_size(text) == parse_bytes(text)


def test_decimal_and_binary_units():
    assert byte_sizes == UNITS
    assert parse_size("256M") == 256_000_000 and parse_size("256MiB") == 256 * 2**20


@pytest.mark.parametrize("text", ["lots", "-1M", "10 MB/h", "1.2.3M", "12 furlongs"])
def test_not_a_size(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_bandwidth_is_a_size_per_second():
    assert parse_bandwidth("256M/s") == parse_size("256M") and parse_bandwidth("1GiB/sec") == 2**30


def test_cli_options_take_the_same_sizes():
    @click.command()
    @click.option("--chunk-bytes", type=SIZE, default="256MiB")
    def cmd(chunk_bytes: int) -> None:
        click.echo(chunk_bytes)

    runner = CliRunner()
    assert runner.invoke(cmd, []).output.strip() == str(2**28)
    assert runner.invoke(cmd, ["--chunk-bytes", "256M"]).output.strip() == "256000000"
    bad = runner.invoke(cmd, ["--chunk-bytes", "lots"])
    assert bad.exit_code == 2 and "not a size" in bad.output
