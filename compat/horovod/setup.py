"""Adds hvd-selector-horovod.pth to the wheel's root (setuptools has no declarative way to)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "hvd-selector-horovod.pth"


class BuildWithPth(build_py):
    def run(self) -> None:
        super().run()
        shutil.copy(Path(__file__).parent / PTH, Path(self.build_lib) / PTH)


setup(cmdclass={"build_py": BuildWithPth})
