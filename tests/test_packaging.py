"""The tests test the package they mean: the source tree beside them (the README's
editable install), or, in .ci/run's run against the built wheel
(``FLAX_POSENC_TEST_INSTALLED=1``, from the unpacked sdist without its
``flax_posenc/``), the wheel installed in site-packages; and the package ships what
is not a module."""

import importlib.resources
import os
import pathlib
import sysconfig

import flax_posenc

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = pathlib.Path(flax_posenc.__file__).resolve().parent


def test_the_tests_import_the_package_they_mean():
    if os.environ.get("FLAX_POSENC_TEST_INSTALLED"):
        site_packages = pathlib.Path(sysconfig.get_paths()["purelib"]).resolve()
        assert PACKAGE == site_packages / "flax_posenc"
        assert not (ROOT / "flax_posenc").exists(), "the source tree would shadow it"
    else:
        assert PACKAGE == ROOT / "flax_posenc"


def test_the_package_ships_its_type_marker():
    """PEP 561: without ``py.typed`` a type checker ignores the annotations."""
    assert importlib.resources.files("flax_posenc").joinpath("py.typed").is_file()
