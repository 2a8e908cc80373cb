"""What a `pip install` of the project ships: the package, not its test-data generators or build artefacts."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_ships_the_package_without_samples_or_tests(tmp_path):
    # built from a copy of the tracked files: setuptools reuses an in-tree build/ left by an earlier build,
    # so a file moved or deleted since would still be in the wheel
    source = tmp_path / "source"
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in tracked.splitlines():
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path), str(source)], check=True, capture_output=True, timeout=300)
    [wheel] = tmp_path.glob("ingestion_pipeline-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "ingestion_pipeline/definitions.py" in names
    assert "ingestion_pipeline/read.py" in names
    assert not [n for n in names if n.startswith(("ingestion_pipeline/samples", "ingestion_pipeline_tests"))]


def test_no_build_artefacts_are_committed():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert not [path for path in tracked.splitlines() if "/build/" in f"/{path}" or path.endswith((".whl", ".pyc"))]
