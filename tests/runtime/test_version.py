"""The version jitorch reports is the one pyproject.toml declares (cache keys and exports carry it)."""

import pathlib
import tomllib

import jitorch
from jitorch.runtime.version import __version__


def test_version_is_pyprojects():
    pyproject = tomllib.loads((pathlib.Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert jitorch.__version__ == __version__ == pyproject["project"]["version"]
