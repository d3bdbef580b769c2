"""What `pip install` puts in site-packages: `autotune` only (templates/ and measure/ install inside
it as autotune.templates and autotune.measure), so a user's own `measure.py` or `templates/` folder
is never imported in their place; and no code imports them by their folder names."""
from __future__ import annotations

import ast
import configparser
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _listed_packages() -> set[str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return {p.strip() for p in cfg["options"]["packages"].split() if p.strip()}


def test_setup_cfg_lists_every_package_under_the_autotune_name_only() -> None:
    found = {".".join(p.relative_to(ROOT).parent.parts) for p in (ROOT / "autotune").rglob("__init__.py")}
    found |= {"autotune." + ".".join(p.relative_to(ROOT).parent.parts)
              for top in ("templates", "measure") for p in (ROOT / top).rglob("__init__.py")
              if "experiments" not in p.parts}
    assert _listed_packages() == found
    assert all(p == "autotune" or p.startswith("autotune.") for p in _listed_packages())


def test_no_code_imports_templates_or_measure_by_their_folder_names() -> None:
    bad = []
    for top in ("autotune", "templates", "measure", "tests", "tutorials"):
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
                bad += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in ("templates", "measure")]
    assert not bad, "import autotune.templates / autotune.measure instead:\n" + "\n".join(bad)


def test_a_users_own_measure_py_and_templates_folder_break_nothing(tmp_path: Path) -> None:
    """A script beside its own measure.py and templates/ (both raise if imported) tunes a matmul."""
    (tmp_path / "measure.py").write_text("raise SystemExit('the user measure.py was imported')\n")
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "__init__.py").write_text("raise SystemExit('the user templates/ was imported')\n")
    (tmp_path / "script.py").write_text(
        "import numpy as np, autotune\n"
        "mm = autotune.op('matmul', log='t.jsonl', trials=2, threads=1)\n"
        "a = np.ones((16, 16), np.float32)\n"
        "np.testing.assert_allclose(mm(a, a), a @ a)\n"
        "print('ok')\n")
    proc = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr
