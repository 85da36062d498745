"""Virtual environments with the trainers installed from PyPI, for the tests
that load meshtune's exports with each trainer's own code
(tests/test_trainer_loaders.py).

    python tests/trainers/venvs.py [NAME ...]     # build (or reuse) them

Each venv lives in `$MESHTUNE_TRAINER_VENVS` (default
`~/.cache/meshtune/trainer-venvs`) under a name that includes a hash of its
recipe, so a changed recipe builds a new one; a finished venv holds a file
`ready`, a failed build its pip log. Building the three takes several
minutes and a few GB (MindSpore alone is 2.5 GB).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
TORCH_CPU = "torch==2.13.0"  # a CPU build, where pip finds the local wheel


@dataclass(frozen=True)
class Recipe:
    """pip commands (argument lists after `pip install`), run in order."""

    name: str
    version: str
    steps: tuple[tuple[str, ...], ...]
    requirements_of: str | None = None  # also install this package's own requirements
    skip_requirements: tuple[str, ...] = ()  # ... except these
    extra_with_requirements: tuple[str, ...] = ()  # installed together with them
    pth_modules: tuple[str, ...] = ()  # tests/trainers modules imported at start-up
    python: str = "3.11"  # the oldest Python it needs (3.11: the one running the tests)

    @property
    def key(self) -> str:
        digest = hashlib.sha256(json.dumps(self.__dict__, default=list).encode()).hexdigest()
        return f"{self.name}-{digest[:12]}"


RECIPES = {
    "maxtext": Recipe(
        name="maxtext",
        version="MaxText 0.2.5 with jax 0.12 (CPU), Python 3.12",
        # every pin, --no-deps: maxtext's own metadata lists its dependencies
        # only in the tpu / cuda12 extras, each several GB
        steps=(("--no-deps", "-r", str(HERE / "maxtext-0.2.5-requirements.txt")),),
        python="3.12",
    ),
    "torchtitan": Recipe(
        name="torchtitan",
        version="torchtitan 0.3.0 with torch 2.13.0 (CPU) and triton 3.9.0",
        # torchtitan declares no torch requirement; it imports triton without
        # declaring it either
        steps=((TORCH_CPU,), ("torchtitan==0.3.0",), ("triton==3.9.0",)),
    ),
    "mindformers": Recipe(
        name="mindformers",
        version="MindFormers 2.0.0 with MindSpore 2.10.0",
        steps=(("mindspore==2.10.0",), ("--no-deps", "mindformers==2.0.0")),
        requirements_of="mindformers",
        # hyper-parallel~=1.0.0 is not on PyPI: a stand-in module takes its place
        skip_requirements=("mindspore", "hyper-parallel"),
        # the newest pyarrow needs numpy 2; MindFormers pins numpy below 2
        extra_with_requirements=("pyarrow==23.0.1",),
        pth_modules=("hyper_parallel_stub",),
    ),
}


class Unavailable(Exception):
    """A trainer's venv could not be built here (the message says why)."""


def root() -> Path:
    default = Path.home() / ".cache" / "meshtune" / "trainer-venvs"
    return Path(os.environ.get("MESHTUNE_TRAINER_VENVS", default))


def _interpreter(version: str) -> str:
    """A Python of at least `version`: this one, python3.X on the path, or a
    pyenv install."""
    wanted = tuple(int(n) for n in version.split("."))
    if sys.version_info[:2] >= wanted:
        return sys.executable
    candidates = [shutil.which(f"python3.{minor}") for minor in range(wanted[1], 20)]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates += sorted(str(p / "bin" / "python3") for p in pyenv.glob("3.*"))
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [candidate, "-c", f"import sys; print(sys.version_info[:2] >= {wanted!r})"],
            capture_output=True,
            text=True,
        )
        if probe.returncode == 0 and probe.stdout.strip() == "True":
            return candidate
    raise Unavailable(f"needs Python {version} or newer; none found (python3.X, pyenv)")


def _pip(python: Path, args: tuple[str, ...] | list[str], log: Path) -> None:
    with log.open("a") as out:
        out.write(f"$ pip install {' '.join(args)}\n")
        out.flush()
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    if done.returncode != 0:
        tail = [line for line in log.read_text().splitlines() if line.strip()][-1:]
        raise Unavailable(f"pip install {' '.join(args)} failed: {' '.join(tail)} (log: {log})")


def _requirements(python: Path, recipe: Recipe) -> list[str]:
    code = (
        "import importlib.metadata as m, json, re; "
        f"print(json.dumps([r for r in m.requires({recipe.requirements_of!r}) or [] "
        "if 'extra ==' not in r]))"
    )
    listed = json.loads(subprocess.check_output([str(python), "-c", code], text=True))
    skip = {name.lower() for name in recipe.skip_requirements}
    kept = []
    for requirement in listed:
        name = requirement.split(";")[0]
        for sep in "<>=!~[ ":
            name = name.split(sep)[0]
        if name.lower().replace("_", "-") not in skip:
            kept.append(requirement)
    return kept


def ensure(name: str) -> Path:
    """The python of `name`'s venv, built if it is not there yet."""
    recipe = RECIPES[name]
    venv = root() / recipe.key
    python = venv / "bin" / "python"
    if (venv / "ready").exists():
        return python
    failed = venv.with_suffix(".failed")
    if failed.exists():
        raise Unavailable(failed.read_text().strip())
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    log = venv.with_suffix(".log")
    log.write_text("")
    try:
        subprocess.run([_interpreter(recipe.python), "-m", "venv", str(venv)], check=True)
        _pip(python, ("--upgrade", "pip"), log)
        for step in recipe.steps:
            _pip(python, step, log)
        if recipe.requirements_of:
            wanted = _requirements(python, recipe) + list(recipe.extra_with_requirements)
            _pip(python, wanted, log)
        site = subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            text=True,
        ).strip()
        for module in recipe.pth_modules:
            shutil.copy(HERE / f"{module}.py", Path(site) / f"{module}.py")
            (Path(site) / f"zz_meshtune_{module}.pth").write_text(f"import {module}\n")
    except Unavailable as error:
        failed.write_text(f"{recipe.version}: {error}\n")
        raise
    (venv / "ready").write_text(recipe.version + "\n")
    return python


def main() -> None:
    names = sys.argv[1:] or list(RECIPES)
    status = 0
    for name in names:
        try:
            print(f"{name}: {ensure(name)}")
        except Unavailable as error:
            print(f"{name}: unavailable: {error}")
            status = 1
    sys.exit(status)


if __name__ == "__main__":
    main()
