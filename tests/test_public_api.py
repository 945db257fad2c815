"""The public API (issue 44 item 5): `from rollwise import ...` gives exactly what docs/api.md documents,
each name the object at its defining path; `import rollwise` stays light; the one-file GRPO example runs."""
import importlib
import re
import subprocess
import sys
from pathlib import Path

import rollwise

ROOT = Path(__file__).resolve().parent.parent


def _target(spec: str):
    module, _, attr = spec.partition(":")
    obj = importlib.import_module(module)
    return getattr(obj, attr) if attr else obj


def test_every_public_name_is_the_object_where_it_is_defined():
    assert set(rollwise.__all__) == {"__version__", *rollwise._API}
    for name, spec in rollwise._API.items():
        assert getattr(rollwise, name) is _target(spec), name
    assert "Trainer" in dir(rollwise)


def test_docs_api_documents_exactly_the_public_names():
    documented = set(re.findall(r"^::: (\S+)$", (ROOT / "docs/api.md").read_text(), re.M))
    assert documented == {spec.replace(":", ".") for spec in rollwise._API.values()}


def test_an_unknown_name_is_an_attribute_error():
    try:
        rollwise.Nope  # noqa: B018
    except AttributeError as e:
        assert "no attribute 'Nope'" in str(e)
    else:
        raise AssertionError("rollwise.Nope resolved")


def test_import_rollwise_does_not_import_torch():
    code = "import sys, rollwise; print('torch' in sys.modules, rollwise.__version__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "False" and out[1] == rollwise.__version__


def test_the_one_file_grpo_example_trains_on_the_public_api(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        example = importlib.import_module("grpo_minimal")
    finally:
        sys.path.pop(0)
    acc = example.main(["--steps", "2", "--batch", "4", "--n", "2", "--eval-size", "20", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert out.startswith("step 0: held-out accuracy") and "step 2: reward" in out
    assert 0.0 <= acc <= 1.0
    assert "from rollwise import" in (ROOT / "examples/grpo_minimal.py").read_text()
    assert "rollwise." not in "".join(line for line in (ROOT / "examples/grpo_minimal.py").read_text().splitlines()
                                      if line.startswith(("import", "from")) and "from rollwise import" not in line)
